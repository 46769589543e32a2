"""Horovod's `horovod.torch.mpi_ops` module: the basics and every collective
in one namespace, for code that imports from it directly. The collectives
are collectives.py's (queued, in place) and autograd_ops.py's
(differentiable), each module's __all__: a new one is named where it is
written."""
from hvdlite.common import *  # noqa: F401,F403  (init, rank, size, ops, process sets, errors)
from hvdlite.common import __all__ as _common_all
from hvdlite.torch.autograd_ops import *  # noqa: F401,F403
from hvdlite.torch.autograd_ops import __all__ as _autograd_all
from hvdlite.torch.collectives import *  # noqa: F401,F403
from hvdlite.torch.collectives import __all__ as _collectives_all
from hvdlite.torch.compression import Compression

__all__ = [*_common_all, *_collectives_all, *_autograd_all, "Compression"]
