"""DistributedOptimizer(op=hvd.Adasum): Horovod's Adasum optimizer.

Adasum combines updates, not gradients: every rank applies the wrapped
optimizer's rule to its own gradient, and the parameter deltas (after - before)
are combined by an Adasum allreduce, so that each parameter becomes
before + Adasum(deltas of all ranks). A parameter's local step and allreduce
start from the hook as soon as backward has produced its gradient (so
communication overlaps the rest of backward); step() waits for them. The
optimizer's state (momentum, Adam's moments) stays local to each rank, as in
Horovod. Between backward and step() a parameter holds this rank's locally
stepped value.
"""

import torch

from hvdlite.common import config
from hvdlite.common.ops import ReduceOp
from hvdlite.common.process_sets import global_process_set
from hvdlite.common.requests import ADASUM_ON_A_SET
from hvdlite.torch.mpi_ops import allreduce_async_, synchronize
from hvdlite.torch.optimizer import (
    _TOO_MANY_PASSES, _ZERO_GRAD_RACE, _DistributedOptimizer, _parameter_names)

_NAME_PREFIX = "DistributedAdasumOptimizer."


class _Launched:
    """One parameter's delta in flight: where the step started, and what
    decompress() needs."""

    def __init__(self, handle, start, context):
        self.handle = handle
        self.start = start
        self.context = context


class _DistributedAdasumOptimizer:
    """Mixed in front of the wrapped optimizer's class (see AdasumOptimizer)."""

    def _hvd_setup(self, named_parameters, compression, backward_passes_per_step):
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self._parameter_names = _parameter_names(self.param_groups, named_parameters)
        self._requires_update = [p for group in self.param_groups for p in group["params"]
                                 if p.requires_grad]
        self._allreduce_delay = {p: backward_passes_per_step for p in self._requires_update}
        self._group_of = {p: index for index, group in enumerate(self.param_groups)
                          for p in group["params"]}
        self._starts = {}    # parameter -> buffer for its value before the local step
        self._launched = {}  # parameter -> _Launched
        self._hook_handles = []
        elastic = config.get("HVDLITE_ELASTIC")
        if global_process_set.size() > 1 or elastic:
            self._register_hooks()

    # The same hooks as DistributedOptimizer's: each calls _gradient_ready(p).
    _register_hooks = _DistributedOptimizer._register_hooks

    def _gradient_ready(self, p):
        if self._allreduce_delay[p] <= 0:
            raise AssertionError(f"{_TOO_MANY_PASSES} (parameter '{self._parameter_names[p]}', "
                                 f"backward_passes_per_step={self.backward_passes_per_step})")
        self._allreduce_delay[p] -= 1
        if self._allreduce_delay[p] == 0:
            self._launched[p] = self._launch(p)

    def _local_step(self, p):
        """The wrapped optimizer's step on p alone (its state stays per parameter)."""
        stashed = [group["params"] for group in self.param_groups]
        try:
            mine = self._group_of[p]
            for index, group in enumerate(self.param_groups):
                group["params"] = [p] if index == mine else []
            super().step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params

    def _launch(self, p):
        """Steps p locally and starts the Adasum allreduce of its delta. A
        parameter without a gradient steps with zeros: other ranks may have one."""
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        start = self._starts.get(p)
        if start is None:
            start = self._starts[p] = torch.empty_like(p, requires_grad=False)
        with torch.no_grad():
            start.copy_(p)
            self._local_step(p)
            delta = p - start
        compressed, context = self._compression.compress(delta)
        handle = allreduce_async_(compressed, name=_NAME_PREFIX + self._parameter_names[p],
                                  op=ReduceOp.Adasum)
        return _Launched(handle, start, context)

    def synchronize(self):
        """Nothing to do: the deltas are applied by step() (as in Horovod)."""

    def skip_synchronize(self):
        """Not supported (as in Horovod): step() must apply the deltas."""
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")

    def step(self, closure=None):
        if not self._hook_handles:  # one rank: a plain step
            return super().step(closure)
        loss = closure() if closure is not None else None
        for p in self._requires_update:  # no gradient here, or fewer backward passes
            if p not in self._launched:
                self._launched[p] = self._launch(p)
        first_error = None
        for p, launched in self._launched.items():
            try:  # wait for every one before raising, so none is left in flight
                delta = self._compression.decompress(synchronize(launched.handle),
                                                     launched.context)
                with torch.no_grad():
                    p.copy_(launched.start).add_(delta)
            except Exception as error:
                first_error = first_error or error
        self._start_new_step()
        if first_error is not None:
            raise first_error
        return loss

    def _start_new_step(self):
        self._launched.clear()
        for p in self._requires_update:
            self._allreduce_delay[p] = self.backward_passes_per_step

    def load_state_dict(self, state_dict):
        # Deltas in flight (a failure struck between backward and step) are
        # waited for and dropped, and their parameters put back where they started.
        for p, launched in self._launched.items():
            try:
                synchronize(launched.handle)
            except Exception:
                pass
            with torch.no_grad():
                p.copy_(launched.start)
        self._start_new_step()
        return super().load_state_dict(state_dict)

    def zero_grad(self, *args, **kwargs):
        if self._launched:
            raise AssertionError(_ZERO_GRAD_RACE)
        return super().zero_grad(*args, **kwargs)

    set_backward_passes_per_step = _DistributedOptimizer.set_backward_passes_per_step


def AdasumOptimizer(optimizer, named_parameters, compression, backward_passes_per_step,
                    gradient_predivide_factor, process_set):
    """DistributedOptimizer(op=hvd.Adasum) (see the module's docstring): an
    instance of the optimizer's own class sharing its groups and state."""
    if gradient_predivide_factor != 1.0:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if process_set is not global_process_set and process_set.process_set_id != 0:
        raise NotImplementedError(ADASUM_ON_A_SET)  # as Horovod
    size = global_process_set.size()
    if size & (size - 1):
        raise ValueError(f"op=hvd.Adasum needs a power-of-two number of ranks (2, 4, 8, ...), "
                         f"but the job has {size}; use op=hvd.Average")
    if int(backward_passes_per_step) < 1:
        raise ValueError(f"backward_passes_per_step must be > 0, got {backward_passes_per_step}")
    cls = type(optimizer.__class__.__name__,
               (_DistributedAdasumOptimizer, optimizer.__class__), {})
    distributed = cls.__new__(cls)
    # As DistributedOptimizer: share the groups and state; not an lr
    # scheduler's patched `step`, which would bypass ours.
    distributed.__dict__.update({k: v for k, v in optimizer.__dict__.items() if k != "step"})
    distributed._hvd_setup(named_parameters, compression, int(backward_passes_per_step))
    return distributed
