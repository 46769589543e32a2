"""DistributedOptimizer(..., sharding_stage=1 or 2): optimizer state (stage 1)
and reduced gradients (stage 2) sharded over the ranks of a process set,
ZeRO-style, by the rows of each parameter (Note [Sharding by rows] in
hvdlite/common/sharding.py).

It is the averaging DistributedOptimizer (optimizer.py: hooks, names,
backward_passes_per_step, compression, groups, process sets) with two
things replaced: what a gradient's hook launches (a reducescatter instead of
an allreduce) and where its result goes (this rank's rows). The wrapped
torch.optim optimizer's parameter groups hold, for each parameter, a view of
the rows this rank owns (Note [Shard views]), so its own update writes them
in place and keeps state for them only; step() then allgathers each
parameter's rows.
"""
import collections

import numpy as np
import torch

from hvdlite.common import basics, config
from hvdlite.common.sharding import CHECKPOINT_FORMAT, ShardLayout, clip_coefficient
from hvdlite.numpy import objects
from hvdlite.numpy import sharding
from hvdlite.torch.collectives import allgather_into_async, grouped_reducescatter_into_async
from hvdlite.torch.mpi_ops import Sum, allgather_async, allreduce, poll, synchronize
from hvdlite.torch.optimizer import _DistributedOptimizer, _Launched, mixed_in

_NAME_PREFIX = "ShardedOptimizer."
# The key, in a sharded optimizer's state_dict(), that marks it as one rank's
# rows (and says whose), so load_state_dict() tells it from a full one.
SHARD_STATE = "hvdlite.shard"

# Note [Shard views]
# ~~~~~~~~~~~~~~~~~~
# A rank's rows of parameter p are p.detach().narrow(0, start, count): a leaf
# tensor sharing p's storage, so the wrapped optimizer updates those rows of
# p itself and the allgather after the step needs to bring only the other
# ranks' rows: it gathers straight into p (Note [Outputs into the caller's
# buffer] in csrc/api/caller_output.cc). The views live as long as the
# parameter's storage: a model moved (model.to(), p.data = ...) after the
# wrapping would leave them on the old storage, so move the model first.


# Note [Gradients in flight]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# Stage 2 drops each full gradient as soon as its reducescatter is queued,
# but the queued reducescatter holds it until it has run: backward produces
# gradients faster than the ranks reduce them, so without a limit nearly
# every full gradient is still alive when backward ends, and the peak is
# stage 1's (measured: 1,003 MB of tensors held after backward against 713 MB
# of model state, 101.8 M parameters at 4 ranks; bench/RESULTS.md). So once
# the full gradients in flight exceed this many bytes, the hook waits for the
# oldest reducescatters first, as DeepSpeed's reduce_bucket_size bounds its
# buckets: backward then overlaps at most this much communication, and the
# peak holds at most this much of the full gradients. The allgathers after
# the step are bounded alike where each one's output is a whole parameter
# the core allocates (CUDA parameters; on the CPU they write into the
# parameters themselves).
#
# Note [Steady buffers]
# ~~~~~~~~~~~~~~~~~~~~~
# Nothing of the step's communication is allocated per step on the CPU: the
# reducescatters write each rank's rows of the reduced gradients into
# buffers kept from step to step (one per parameter and wire dtype), and the
# allgathers write into the parameters. Per-step outputs of hundreds of MB
# are memory the C library's heap keeps once freed, whatever the live tensors
# are (the sharded-optimizer benchmark's peak RSS, bench/RESULTS.md).
_MAX_IN_FLIGHT_BYTES = 64 << 20


class _ShardedOptimizer(_DistributedOptimizer):
    """Mixed in front of the wrapped optimizer's class (see ShardedOptimizer)."""

    def _hvd_setup_sharding(self, stage):
        self.sharding_stage = stage
        # Each group's whole parameters; the groups themselves hold views.
        self._group_params = [list(group["params"]) for group in self.param_groups]
        self._params = [p for params in self._group_params for p in params]  # state-dict order
        self._names = [self._parameter_names[p] for p in self._params]
        self._shard_of = {}
        self._layout = None
        self._pending = collections.deque()  # stage 2: launched, not yet put into shard grads
        self._rows_buffers = {}  # (p, dtype) -> this rank's reduced rows (Note [Steady buffers])
        self._parameters_checked = False
        whole = super(_DistributedOptimizer, self).state_dict() if self.state else None
        self._reshard()
        if whole is not None:  # an optimizer that had stepped (or loaded) before the wrapping
            self.load_state_dict(whole)
        # Elastic workers that join later build their optimizer while the others
        # are in TorchState.sync(), which checks every rank's parameters instead.
        if self._communicates() and not config.get("HVDLITE_ELASTIC"):
            self.check_parameters()

    # --- layout

    def _communicates(self):
        return self.process_set.included() and bool(self._hook_handles)

    def _position(self):
        if not self._communicates():
            return 1, 0  # one rank, or a rank outside the set: it owns every row
        return self.process_set.size(), self.process_set.rank()

    def _reshard(self):
        """Lays the parameter groups out as this rank's rows (Note [Shard views])
        for the set as it is now, with empty state."""
        size, rank = self._position()
        self._layout = ShardLayout([tuple(p.shape) for p in self._params], size, rank)
        self._shard_of = {}
        self._rows_buffers = {}
        for index, p in enumerate(self._params):
            start, count = self._layout.ranges[index]
            whole = p.detach() if p.dim() else p.detach().reshape(1)
            self._shard_of[p] = whole.narrow(0, start, count)
        for group, params in zip(self.param_groups, self._group_params):
            group["params"] = [self._shard_of[p] for p in params]
        self.state = collections.defaultdict(dict)

    def _check_layout(self):
        """Re-lays out an optimizer without state when the set changed size
        (elastic); one with state must have it loaded for the new layout."""
        if (self._layout.size, self._layout.rank) == self._position():
            return
        if self.state:
            raise ValueError(
                f"the sharded optimizer holds rows of {self._layout.size} ranks but the process "
                f"set now has {self._position()[0]}: load its state for the new size first "
                "(hvd.elastic.TorchState restores and syncs it, or load_state_dict() a full state "
                "dict from consolidated_state_dict())")
        self._reshard()

    def check_parameters(self):
        """Checks (collective) that every rank shards the same parameters, in the
        same order; ValueError on every rank naming the first difference."""
        if self.process_set.included():
            sharding.check_same_parameters(
                [(n, tuple(p.shape), p.dtype) for n, p in zip(self._names, self._params)],
                "hvdlite.torch.DistributedOptimizer", self.process_set)
        self._parameters_checked = True

    # --- gradients: reducescatter from each hook, rows into the shard grads

    def _launch(self, params):
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)  # every rank submits every reducescatter
            elif p.grad.is_sparse:
                if not self.sparse_as_dense:
                    raise ValueError(
                        f"sparse gradient of {self._parameter_names[p]!r}: sharding_stage > 0 "
                        "reduce-scatters dense rows; pass sparse_as_dense=True (or leave the "
                        "parameter to an unsharded optimizer)")
                p.grad = p.grad.to_dense()
        tensors, contexts = [], []
        for p in params:
            grad = p.grad if p.grad.dim() else p.grad.reshape(1)  # 0-d: one row
            compressed, context = self._compression.compress(grad)
            tensors.append(compressed)
            contexts.append(context)
        prescale, postscale = self._scale_factors()
        handle = grouped_reducescatter_into_async(
            tensors, [self._rows_buffer(p, t.dtype) for p, t in zip(params, tensors)],
            f"{_NAME_PREFIX}group.{self._parameter_names[params[0]]}", op=self.op,
            process_set=self.process_set, prescale_factor=prescale, postscale_factor=postscale)
        launched = _Launched(params, handle, contexts)
        if self.sharding_stage == 2:
            # The queued reducescatter holds its input until it is finished;
            # the full gradient is nobody else's (Note [Sharding by rows]).
            for p in params:
                p.grad = None
            launched.input_bytes = sum(t.numel() * t.element_size() for t in tensors)
            self._pending.append(launched)
            self._finish_done()
            self._limit_in_flight()
        return launched

    def _rows_buffer(self, p, dtype):
        """Where this rank's rows of p's reduced gradient land, in the wire
        dtype: the same buffer every step (Note [Steady buffers])."""
        key = (p, dtype)
        buffer = self._rows_buffers.get(key)
        if buffer is None:
            shard = self._shard_of[p]
            buffer = torch.empty(shard.shape, dtype=dtype, device=shard.device)
            self._rows_buffers[key] = buffer
        return buffer

    def _limit_in_flight(self):
        """Stage 2: waits for the oldest reducescatters while the full gradients
        they hold exceed _MAX_IN_FLIGHT_BYTES (Note [Gradients in flight])."""
        in_flight = sum(launched.input_bytes for launched in self._pending if launched.handle is not None)
        while in_flight > _MAX_IN_FLIGHT_BYTES and len(self._pending) > 1:
            oldest = self._pending.popleft()
            if oldest.handle is not None:
                in_flight -= oldest.input_bytes
                self._finish(oldest)

    def _finish_done(self):
        """Stage 2: finishes the reducescatters already done, in launch order, so
        their inputs (full gradients) are freed during backward, not at step()."""
        while self._pending and (self._pending[0].handle is None
                                 or poll(self._pending[0].handle)):
            self._finish(self._pending.popleft())

    def _finish(self, launched):
        if launched.handle is None:
            return  # finished early (_finish_done)
        handle, launched.handle = launched.handle, None
        outputs = synchronize(handle)
        for p, output, context in zip(launched.params, outputs, launched.contexts):
            self._shard_of[p].grad = self._compression.decompress(output, context)

    def synchronize(self):
        """Waits for every gradient's reducescatter (starting those backward did
        not); afterwards each shard parameter's .grad holds its reduced rows. A
        second call before step() does nothing (clip_grad_norm_ calls it)."""
        if self._synchronized:
            return
        self._check_layout()
        if not self._communicates():
            for p in self._requires_update:  # one rank: the local gradients are the reduced ones
                if p.grad is not None:
                    self._shard_of[p].grad = p.grad if p.dim() else p.grad.reshape(1)
            self._synchronized = True
            return
        if not self._parameters_checked:
            self.check_parameters()
        try:
            super().synchronize()
        finally:
            self._pending.clear()

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Clips the reduced gradients by their global norm across the shards, as
        `torch.nn.utils.clip_grad_norm_` on the unsharded averaged gradients would
        (collective). Call after backward and before step(); step() then does not
        synchronize again.

        Args:
            max_norm (float): the largest norm the gradients keep.
            norm_type (float): 2 (the only one supported).

        Returns:
            torch.Tensor: the total norm before clipping (float64, on the CPU).
        """
        if float(norm_type) != 2.0:
            raise ValueError(f"clip_grad_norm_ of a sharded optimizer takes norm_type=2, got "
                             f"{norm_type}")
        self.synchronize()
        grads = [g for g in (self._shard_of[p].grad for p in self._requires_update)
                 if g is not None and g.numel()]
        square = torch.zeros(1, dtype=torch.float64)
        for g in grads:
            square += torch.linalg.vector_norm(g, dtype=torch.float64).cpu().square()
        if self._communicates():
            square = allreduce(square, name=_NAME_PREFIX + "clip_grad_norm_", op=Sum,
                               process_set=self.process_set)
        norm, coefficient = clip_coefficient(square.item(), max_norm)
        if coefficient < 1.0 and grads:
            torch._foreach_mul_(grads, coefficient)
        return torch.tensor(norm, dtype=torch.float64)

    # --- the update and the allgather of the rows

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._should_synchronize:
            self.synchronize()
        self._synchronized = False
        super(_DistributedOptimizer, self).step()
        if self._communicates():
            self._gather_parameters()
        return loss

    def _gather_parameters(self):
        """Every parameter's rows from every rank, back into the parameter. The
        allgathers are started ahead, so they overlap. On the CPU each writes
        into its parameter (Note [Steady buffers]); a CUDA parameter's output
        is a whole parameter the core allocates, copied in, so at most
        _MAX_IN_FLIGHT_BYTES of those are in flight at a time: all of them at
        once would hold a second copy of the model (Note [Gradients in flight])."""
        in_flight, in_flight_bytes, first_error = collections.deque(), 0, None

        def finish_oldest():
            nonlocal in_flight_bytes, first_error
            p, handle, allocated = in_flight.popleft()
            in_flight_bytes -= allocated
            try:  # wait for every one before raising, so none is left in flight
                gathered = synchronize(handle)
                if allocated:
                    with torch.no_grad():
                        p.copy_(gathered.view(p.shape))
            except Exception as error:
                first_error = first_error or error

        for p in self._requires_update:
            name = f"{_NAME_PREFIX}allgather.{self._parameter_names[p]}"
            if not p.is_cuda and p.is_contiguous():
                whole = p.detach() if p.dim() else p.detach().reshape(1)
                in_flight.append((p, allgather_into_async(self._shard_of[p], whole, name,
                                                          self.process_set), 0))
                continue
            allocated = p.numel() * p.element_size()
            while in_flight and in_flight_bytes + allocated > _MAX_IN_FLIGHT_BYTES:
                finish_oldest()
            in_flight.append((p, allgather_async(self._shard_of[p], name, self.process_set),
                              allocated))
            in_flight_bytes += allocated
        while in_flight:
            finish_oldest()
        if first_error is not None:
            raise first_error

    def zero_grad(self, set_to_none=True):
        super().zero_grad(set_to_none)  # the shard grads
        for p in self._requires_update:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_()
                p.grad.zero_()

    def add_param_group(self, param_group):
        raise ValueError("a sharded DistributedOptimizer cannot take new parameter groups: add "
                         "them to the torch.optim optimizer before wrapping it")

    # --- checkpoints

    def state_dict(self):
        """This rank's rows of the state (torch's format: parameter indices as
        keys), marked as such; load it back into the same rank of the same
        size, or use consolidated_state_dict() / save_shard() for other sizes."""
        state = super().state_dict()
        state[SHARD_STATE] = {"format": CHECKPOINT_FORMAT + "+torch", "size": self._layout.size,
                              "rank": self._layout.rank, "stage": self.sharding_stage}
        return state

    def load_state_dict(self, state_dict):
        """Loads this rank's shard (from state_dict() on the same rank and size),
        or a full state dict (consolidated_state_dict(), or an unsharded torch
        optimizer's state_dict(), from any world size): its rows for this rank."""
        self._synchronized = False
        self._pending.clear()
        marker = state_dict.get(SHARD_STATE)
        if marker is not None:
            if (marker["size"], marker["rank"]) != self._position():
                raise ValueError(
                    f"this state dict holds the rows of rank {marker['rank']} of {marker['size']}, "
                    f"but this is rank {self._position()[1]} of {self._position()[0]}: load a full "
                    "state dict (consolidated_state_dict()) or every rank's shard file "
                    "(load_shards()) instead")
            if (self._layout.size, self._layout.rank) != self._position():
                self._reshard()
            return super().load_state_dict(
                {k: v for k, v in state_dict.items() if k != SHARD_STATE})
        self._reshard()
        rows = self._rows_of_full(state_dict["state"])
        return super().load_state_dict({**state_dict, "state": rows})

    def _rows_of_full(self, full):
        """{index: {key: this rank's rows}} of a full torch state (index keys).
        A 0-d parameter's per-parameter values (step, ...) are told from its
        per-element ones by key (SCALAR_KEYS in hvdlite/numpy/sharding.py)."""
        whole = {self._names[index]: {key: _to_numpy(value) for key, value in values.items()}
                 for index, values in full.items()}
        mine = sharding.rows_of_state(whole, self._names, self._layout)
        return {index: {key: _to_torch(mine[self._names[index]][key], value) for key, value in values.items()}
                for index, values in full.items()}

    def _shard_arrays(self):
        """(torch state_dict of the shards, {name: {key: ndarray}} of it)."""
        local = super(_DistributedOptimizer, self).state_dict()
        arrays = {self._names[i]: {k: _to_numpy(v) for k, v in values.items()}
                  for i, values in local["state"].items()}
        return local, arrays

    def consolidated_state_dict(self, root_rank=0):
        """The whole optimizer state in torch's format (collective): loadable by
        this optimizer at any world size and by the unsharded torch optimizer
        over the same parameter groups.

        Args:
            root_rank (int | None): the global rank that gets it; None: every rank.

        Returns:
            dict | None: on root_rank (every rank for None), else None.
        """
        self._check_layout()
        local, arrays = self._shard_arrays()
        whole = sharding.full_state(arrays, self._names, self._layout, self.process_set) \
            if self._communicates() else {n: arrays.get(n, {}) for n in self._names}
        if root_rank is not None and basics.rank() != root_rank:
            return None
        state = {i: {k: _to_torch(whole[self._names[i]][k], v) for k, v in values.items()}
                 for i, values in local["state"].items()}
        return {"state": state, "param_groups": local["param_groups"]}

    def whole_state_dict_if_empty(self):
        """The whole state without communicating when this rank holds none (a
        fresh optimizer), else None: elastic TorchState's first save."""
        if self.state:
            return None
        return {"state": {}, "param_groups": super(_DistributedOptimizer, self).state_dict()["param_groups"]}

    def save_shard(self, path):
        """Writes this rank's rows to `path`, one file per rank; every rank's
        files together load at any world size with load_shards()."""
        local, arrays = self._shard_arrays()
        sharding.save_shard(path, arrays, self._names, self._layout, self.sharding_stage,
                            extra={"param_groups": local["param_groups"]})

    def load_shards(self, paths):
        """Loads the shard files every rank of one save wrote (any world size)."""
        whole, extra = sharding.load_shards(paths)
        state = {i: {k: torch.from_numpy(np.array(v)) for k, v in whole[name].items()}
                 for i, name in enumerate(self._names) if whole.get(name)}
        self.load_state_dict({"state": state, "param_groups": extra["param_groups"]})

    def broadcast_sharded_state(self, root_rank, prefix, process_set):
        """hvd.broadcast_optimizer_state for a sharded optimizer: root's parameter
        groups' hyper-parameters. The state is one state split over the ranks,
        not a copy per rank, so there is no root's state to give: every rank
        must hold its rows already (or none anywhere)."""
        hyper = [{k: v for k, v in group.items() if k != "params"} for group in self.param_groups]
        hyper = objects.broadcast_object(hyper, root_rank,
                                         name=f"broadcast_optimizer_state.{prefix}hyper",
                                         process_set=process_set)
        for group, values in zip(self.param_groups, hyper):
            group.update(values)
        holding = objects.allgather_object(bool(self.state),
                                           name=f"broadcast_optimizer_state.{prefix}holding",
                                           process_set=process_set)
        if any(holding) and not all(holding):
            raise ValueError(
                "broadcast_optimizer_state of a sharded optimizer: ranks "
                f"{[r for r, h in enumerate(holding) if h]} hold optimizer state and the others "
                "none; each rank holds only its rows, so root's cannot be copied. Load a full "
                "state dict on every rank instead (load_state_dict(consolidated), any world size)")


def _to_numpy(value):
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:  # NumPy has no bfloat16; float32 holds it exactly
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def _to_torch(array, like):
    """`array` as the type of `like` (a tensor's dtype, or a Python number)."""
    if isinstance(like, torch.Tensor):
        return torch.from_numpy(np.array(array)).to(like.dtype)
    return np.asarray(array).item()


def ShardedOptimizer(optimizer, named_parameters, compression, backward_passes_per_step, op,
                     gradient_predivide_factor, groups, sparse_as_dense, process_set, stage):
    """DistributedOptimizer with sharding_stage 1 or 2 (distributed_optimizer.py
    has checked the arguments): an instance of the optimizer's own class whose
    parameter groups hold this rank's rows."""
    sharded = mixed_in(optimizer, _ShardedOptimizer)
    sharded._hvd_setup(named_parameters, compression, int(backward_passes_per_step), op,
                       float(gradient_predivide_factor), groups, sparse_as_dense, process_set)
    sharded._hvd_setup_sharding(stage)
    return sharded
