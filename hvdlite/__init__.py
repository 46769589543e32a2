"""hvdlite: distributed training with Horovod's API for PyTorch, TensorFlow,
Keras 3 and NumPy, on a C++ core with background negotiation, tensor fusion and
built-in transports.

    import hvdlite.numpy as hvd      # or hvdlite.torch, hvdlite.tensorflow, hvdlite.keras
    hvd.init()
    total = hvd.allreduce(x, op=hvd.Sum)

The compiled core is loaded on first use, so `hvdliterun` and other pure-Python
parts import without it (only hvdlite._codes, the op and dtype codes, a module
that links nothing).
"""
from typing import TYPE_CHECKING

from hvdlite.version import __version__
from hvdlite.common import *  # noqa: F401,F403  (the shared API: init, rank, size, ...)
from hvdlite.common import __all__ as _common_all

__all__ = ["__version__", "run", *_common_all]

if TYPE_CHECKING:  # for type checkers and the API reference (griffe): loaded lazily below
    from hvdlite.runner.function import run


def __getattr__(name):
    # hvdlite.run (runner/function.py) loads the launcher on first use only.
    if name == "run":
        from hvdlite.runner.function import run
        return run
    raise AttributeError(f"module 'hvdlite' has no attribute {name!r}")
