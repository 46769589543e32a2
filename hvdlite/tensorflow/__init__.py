"""hvdlite for TensorFlow 2: Horovod's `horovod.tensorflow` API.

    import hvdlite.tensorflow as hvd
    hvd.init()
    tape = hvd.DistributedGradientTape(tape)

The collectives are TensorFlow ops (compiled against the installed TensorFlow
on first use and cached); they work eagerly, inside tf.function and in Keras.
"""
from typing import TYPE_CHECKING

from hvdlite.common import *  # noqa: F401,F403  (init, rank, size, process sets, ops, errors)
from hvdlite.common import __all__ as _common_all
from hvdlite.tensorflow.compression import Compression
from hvdlite.tensorflow.functions import (
    allgather_object, broadcast_, broadcast_object, broadcast_object_fn, broadcast_variables)
from hvdlite.tensorflow.graph_mode import BroadcastGlobalVariablesHook, broadcast_global_variables
from hvdlite.tensorflow.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape
from hvdlite.tensorflow.collectives import *  # noqa: F401,F403
from hvdlite.tensorflow.collectives import __all__ as _collectives_all
from hvdlite.tensorflow import gradients as _gradients  # noqa: F401  (registers op gradients)
from hvdlite.tensorflow import elastic, util
from hvdlite.tensorflow.util import _cache, _executing_eagerly, _make_subgraph  # noqa: F401
from hvdlite.tensorflow.util import refs_to_vars, vars_to_refs

__all__ = [*_common_all, *_collectives_all,
    "BroadcastGlobalVariablesHook", "broadcast_global_variables", "Compression", "allgather_object", "broadcast_object", "broadcast_object_fn",
    "broadcast_variables",
    "DistributedGradientTape", "PartialDistributedGradientTape", "keras", "elastic",
    "broadcast_", "SyncBatchNormalization", "util", "vars_to_refs", "refs_to_vars",
]

if TYPE_CHECKING:  # for type checkers and the API reference (griffe): loaded lazily below
    from hvdlite import keras
    from hvdlite.keras.sync_batch_norm import SyncBatchNormalization


def __getattr__(name):
    # hvdlite.tensorflow.keras is hvdlite.keras, imported only when asked for.
    if name == "keras":
        import hvdlite.keras
        return hvdlite.keras
    if name == "SyncBatchNormalization":  # needs Keras, imported only when asked for
        from hvdlite.keras.sync_batch_norm import SyncBatchNormalization
        return SyncBatchNormalization
    raise AttributeError(f"module 'hvdlite.tensorflow' has no attribute {name!r}")
