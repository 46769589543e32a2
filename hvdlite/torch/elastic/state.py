"""TorchState: models, optimizers and elastic samplers by their state_dict(),
plus plain attributes. A sharded optimizer (sharding_stage > 0) is kept whole
(Note [Sharded optimizers in TorchState])."""
import copy

import torch

from hvdlite.common import basics
from hvdlite.common.elastic import ObjectState as _ObjectState
from hvdlite.torch.elastic.sampler import ElasticSampler
from hvdlite.torch.functions import (broadcast_object, broadcast_optimizer_state,
                                     broadcast_parameters, broadcast_state_dict)
from hvdlite.torch.sharded_optimizer import _ShardedOptimizer

# Note [Sharded optimizers in TorchState]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Each rank of a sharded optimizer holds its rows of the state only, and after
# a re-form at another size the rows are split differently, while a lost
# rank's rows are gone. So a commit keeps the WHOLE state on every rank
# (consolidated_state_dict: as much host memory as an unsharded commit), and
# restore() and sync() load it back, which re-shards it for the set as it is
# then. sync() gives every rank rank 0's committed whole (not its current
# state, which no rank holds whole), and runs after every re-form, removals
# included (sync_after_removal). The first save, at construction, gathers
# nothing when the optimizer has no state yet: a worker joining a running job
# builds its TorchState while the others are already in sync().

_STATEFUL = (torch.nn.Module, torch.optim.Optimizer, ElasticSampler)


def bcast_object(obj, name):
    return broadcast_object(obj, root_rank=0, name=name)


class ObjectState(_ObjectState):
    """Picklable values as attributes: `ObjectState(epoch=0, batch=0)`."""

    def __init__(self, **kwargs):
        super().__init__(bcast_object, basics.rank, **kwargs)


class TorchState(_ObjectState):
    """The elastic state of a torch training loop.

    Args:
        model (torch.nn.Module | None): kept by its state_dict().
        optimizer (torch.optim.Optimizer | None): kept by its state_dict().
        **kwargs: any other state: a module, an optimizer or an ElasticSampler is kept
            by its state_dict(); every other value is a plain attribute (state.epoch, ...).

    Example:
        ```python
        state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
        ```
    """

    def __init__(self, model=None, optimizer=None, **kwargs):
        values = dict(kwargs, model=model, optimizer=optimizer)
        self._stateful = {name: value for name, value in values.items()
                          if isinstance(value, _STATEFUL)}
        for name, value in self._stateful.items():
            setattr(self, name, value)
        self._saved_dicts = {}
        self.sync_after_removal = any(isinstance(value, (ElasticSampler, _ShardedOptimizer))
                                      for value in self._stateful.values())
        super().__init__(bcast_object, basics.rank,
                         **{name: value for name, value in values.items()
                            if name not in self._stateful})
        self._save_dicts(first=True)

    def save(self):
        """Keeps a copy of every state_dict() and attribute: the state `restore()` returns to."""
        self._save_dicts()
        super().save()

    def restore(self):
        """Loads the copies the last `save()` (or commit) kept into the modules, optimizers,
        samplers and attributes.
        """
        for name, value in self._stateful.items():
            # A copy: Optimizer.load_state_dict keeps tensors it is given, and
            # the next step would change the saved ones in place.
            value.load_state_dict(copy.deepcopy(self._saved_dicts[name]))
        super().restore()

    def sync(self):
        """Gives every rank rank 0's state (collective): parameters and buffers, optimizer
        state, samplers' processed samples, attributes; then saves it.
        """
        for name, value in self._stateful.items():
            prefix = f"elastic.{name}."
            if isinstance(value, torch.nn.Module):
                broadcast_parameters(value.state_dict(), root_rank=0, prefix=prefix)
            elif isinstance(value, _ShardedOptimizer):
                whole = broadcast_state_dict(self._saved_dicts[name] if basics.rank() == 0 else None,
                                             0, prefix)
                value.load_state_dict(copy.deepcopy(whole))
                value.check_parameters()  # every rank of the new job is here, joiners too
            elif isinstance(value, torch.optim.Optimizer):
                broadcast_optimizer_state(value, root_rank=0, prefix=prefix)
            else:
                value.sync(name=prefix + "sampler")
        self._save_dicts()
        super().sync()

    def reset(self):
        """Shares out each ElasticSampler's rest of the epoch among the ranks there are now."""
        # A sampler shares out the epoch by rank and size, both new now.
        for value in self._stateful.values():
            if isinstance(value, ElasticSampler):
                value.reset()

    def _save_dicts(self, first=False):
        self._saved_dicts = {name: self._saved_dict(value, first)
                             for name, value in self._stateful.items()}

    @staticmethod
    def _saved_dict(value, first):
        if not isinstance(value, _ShardedOptimizer):
            return copy.deepcopy(value.state_dict())
        whole = value.whole_state_dict_if_empty() if first else None
        return whole if whole is not None else value.consolidated_state_dict(root_rank=None)
