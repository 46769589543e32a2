"""`hvdlite.tensorflow.keras` is `hvdlite.keras` (Horovod's horovod.tensorflow.keras)."""
import sys

import hvdlite.keras as _keras

sys.modules[__name__] = _keras
