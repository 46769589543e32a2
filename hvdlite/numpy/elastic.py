"""Elastic training with NumPy state: `hvdlite.numpy.elastic` (see
hvdlite/common/elastic.py for how it works)."""
from hvdlite.common import basics
from hvdlite.common.elastic import State, run
from hvdlite.common.elastic import ObjectState as _ObjectState
from hvdlite.numpy.objects import broadcast_object

__all__ = ["ObjectState", "State", "run"]


def bcast_object(obj, name):
    return broadcast_object(obj, root_rank=0, name=name)


class ObjectState(_ObjectState):
    """Picklable values as attributes: `ObjectState(epoch=0, weights=w)`."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object, basics.rank, **kwargs)
