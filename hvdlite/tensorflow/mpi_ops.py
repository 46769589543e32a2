"""Horovod's `horovod.tensorflow.mpi_ops` module: the basics and the
collective ops in one namespace, for code that imports from it directly
(`from horovod.tensorflow.mpi_ops import allgather, rank_op`). Its names are
collectives.py's __all__ and hvdlite.common's; Horovod's private helpers
(`_allreduce`, whose op defaults to Sum there) are not among them."""
from hvdlite.common import *  # noqa: F401,F403  (init, rank, size, ops, process sets, errors)
from hvdlite.common import __all__ as _common_all
from hvdlite.tensorflow.collectives import *  # noqa: F401,F403
from hvdlite.tensorflow.collectives import __all__ as _collectives_all

__all__ = [*_common_all, *_collectives_all]
