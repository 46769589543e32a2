"""DistributedOptimizer: averages gradients over the ranks while backward runs.

A hook on each parameter's gradient accumulator starts that gradient's
allreduce as soon as backward has produced it, so communication of the last
layers overlaps backward through the first ones; step() waits for all of them
and then applies the wrapped optimizer's update.
"""
import warnings
import weakref
from contextlib import contextmanager

import torch

from hvdlite.common import config
from hvdlite.common.compression import NoneCompressor
from hvdlite.common.ops import ReduceOp
from hvdlite.torch.mpi_ops import (
    allreduce_async_, grouped_allreduce_async_, sparse_allreduce_async, synchronize)
from hvdlite.torch.powersgd import PowerSGD

_NAME_PREFIX = "DistributedOptimizer."
# The key of a PowerSGD compression's state in the optimizer's state_dict():
# there, elastic TorchState commits and restores it with the rest.
COMPRESSION_STATE = "hvdlite.compression"

# Horovod's messages, word for word where users may match on them.
_ZERO_GRAD_RACE = ("optimizer.zero_grad() was called after loss.backward() but before "
                   "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                   "cause a race condition.")
_TOO_MANY_PASSES = ("Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")
_STEP_AFTER_SYNCHRONIZE = ("optimizer.step() called without optimizer.skip_synchronize() context "
                           "after optimizer.synchronize(). This can cause training slowdown. You "
                           "may want to consider using optimizer.skip_synchronize() context if "
                           "you use optimizer.synchronize() in your code.")


class _Launched:
    """One allreduce in flight: what synchronize() needs to put the result back
    into the parameters' .grad. A sparse one's handle is the function that
    waits for it (Horovod's sparse_allreduce_async)."""

    def __init__(self, params, handle, contexts, sparse=False):
        self.params = params
        self.handle = handle
        self.contexts = contexts
        self.sparse = sparse


class _DistributedOptimizer:
    """Mixed in front of the wrapped optimizer's class (see DistributedOptimizer):
    step() and zero_grad() come from here, the update rule from the optimizer."""

    def _hvd_setup(self, named_parameters, compression, backward_passes_per_step, op,
                   gradient_predivide_factor, groups, sparse_as_dense, process_set):
        # A compression that reduces whole steps itself (PowerSGD), or None;
        # its warm-up steps send gradients as they are.
        self._step_compression = compression if isinstance(compression, PowerSGD) else None
        self._compression = compression if self._step_compression is None else NoneCompressor
        if self._step_compression is not None:
            self._step_compression.check_op(op)
            self._step_compression.bind(self)
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._parameter_names = _parameter_names(self.param_groups, named_parameters)
        self._requires_update = [p for group in self.param_groups for p in group["params"]
                                 if p.requires_grad]
        self._groups = _form_groups(self._requires_update, groups)
        self._group_of = {p: index for index, group in enumerate(self._groups) for p in group}
        self._ready_in_group = [0] * len(self._groups)
        self._allreduce_delay = {p: backward_passes_per_step for p in self._requires_update}
        self._touched = set()      # parameters with gradients since the last synchronize()
        self._launched = {}        # _launch_key() -> _Launched
        self._synchronized = False
        self._should_synchronize = True
        self._hook_handles = []
        # One rank needs no communication, unless elastic training may add
        # ranks later (the driver sets HVDLITE_ELASTIC=1), as in Horovod.
        elastic = config.get("HVDLITE_ELASTIC")
        if process_set.included() and (process_set.size() > 1 or elastic):
            self._register_hooks()

    def _register_hooks(self):
        # The hooks hold the optimizer weakly, and are removed when it is
        # collected: a model wrapped again by a new optimizer must not keep
        # starting allreduces for a dead one.
        this = weakref.ref(self)

        def hook(param):
            optimizer = this()
            if optimizer is not None:
                optimizer._gradient_ready(param)

        for p in self._requires_update:
            self._hook_handles.append(p.register_post_accumulate_grad_hook(hook))
        weakref.finalize(self, _remove_hooks, self._hook_handles)

    def _gradient_ready(self, p):
        """Called by autograd once p.grad holds this backward pass's gradient."""
        if self._allreduce_delay[p] <= 0:
            raise AssertionError(f"{_TOO_MANY_PASSES} (parameter '{self._parameter_names[p]}', "
                                 f"backward_passes_per_step={self.backward_passes_per_step})")
        self._touched.add(p)
        self._allreduce_delay[p] -= 1
        if self._allreduce_delay[p] > 0:
            return  # accumulate locally: communicate after the last pass
        if self._compresses_step():
            return  # PowerSGD takes all of the step's gradients at once, in synchronize()
        group = self._group_of.get(p)
        if group is not None:
            self._ready_in_group[group] += 1
            if self._ready_in_group[group] < len(self._groups[group]):
                return  # a group starts once all its members have gradients
        self._launched[self._launch_key(p)] = self._launch(self._members(p))

    def _compresses_step(self):
        """True when this step's gradients go to PowerSGD (after its warm-up)."""
        return self._step_compression is not None and self._step_compression.compressing()

    def _reduce_compressed_step(self):
        """Hands every gradient to PowerSGD, which reduces them in place. A
        parameter without a gradient contributes zeros, as in _launch()."""
        names, grads = [], []
        for p in self._requires_update:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            if p.grad.is_sparse:
                if not self.sparse_as_dense:
                    raise ValueError(f"sparse gradient of {self._parameter_names[p]!r}: PowerSGD "
                                     "compresses dense matrices; use sparse_as_dense=True")
                p.grad = p.grad.to_dense()
            if not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            names.append(self._parameter_names[p])
            grads.append(p.grad)
        prescale, postscale = self._scale_factors()
        self._step_compression.reduce(names, grads, f"{_NAME_PREFIX}powersgd.{names[0]}", self.op,
                                      prescale, postscale, self.process_set)

    def _launch_key(self, p):
        # Strings and tuples, not tensors: a tensor key would be compared with
        # `==` (elementwise) on a hash collision.
        group = self._group_of.get(p)
        return self._parameter_names[p] if group is None else ("group", group)

    def _members(self, p):
        group = self._group_of.get(p)
        return [p] if group is None else list(self._groups[group])

    def _scale_factors(self):
        # Average divides by the set's size in the core; predividing by f and
        # multiplying by f afterwards keeps the result and avoids overflow.
        if self.op == ReduceOp.Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _launch(self, params):
        """Starts the collective for params (one, or a whole group). A parameter
        without a gradient here contributes zeros: other ranks may have one, and
        every rank must submit the same collectives. As in Horovod, the zeros
        stay its .grad, so the step applies to it (momentum, weight decay) even
        when no rank had a gradient."""
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        sparse = [p for p in params if p.grad.is_sparse and not self.sparse_as_dense]
        if sparse:
            if len(params) != 1:
                raise ValueError(f"sparse gradient of {self._parameter_names[sparse[0]]!r} cannot "
                                 "be allreduced in a group; use sparse_as_dense=True or leave the "
                                 "parameter out of groups")
            # Ranks touch different rows: their (index, value) pairs are
            # allgathered, and rows several ranks touched add up.
            p = params[0]
            wait = sparse_allreduce_async(p.grad.coalesce(), _NAME_PREFIX + self._parameter_names[p],
                                          self.op, process_set=self.process_set)
            return _Launched([p], wait, None, sparse=True)
        tensors, contexts = [], []
        for p in params:
            grad = p.grad.to_dense() if p.grad.is_sparse else p.grad
            compressed, context = self._compression.compress(grad)
            tensors.append(compressed)
            contexts.append(context)
        prescale, postscale = self._scale_factors()
        options = dict(op=self.op, prescale_factor=prescale, postscale_factor=postscale,
                       process_set=self.process_set)
        if len(params) == 1:
            name = _NAME_PREFIX + self._parameter_names[params[0]]
            handle = allreduce_async_(tensors[0], name=name, **options)
        else:
            name = f"{_NAME_PREFIX}group.{self._parameter_names[params[0]]}"
            handle = grouped_allreduce_async_(tensors, name=name, **options)
        return _Launched(params, handle, contexts)

    def _finish(self, launched):
        if launched.sparse:
            launched.params[0].grad = launched.handle().coalesce()
            return
        outputs = synchronize(launched.handle)
        if len(launched.params) == 1:
            outputs = [outputs]
        for p, output, context in zip(launched.params, outputs, launched.contexts):
            reduced = self._compression.decompress(output, context)
            if p.grad.is_sparse:
                p.grad = reduced.to_sparse()
            elif reduced is not p.grad:
                p.grad.copy_(reduced)

    def synchronize(self):
        """Waits for every gradient's allreduce; starts those that backward did
        not (parameters without a gradient on this rank, or fewer backward passes
        than backward_passes_per_step). Afterwards .grad holds the averages."""
        if not self.process_set.included() or not self._hook_handles:
            self._synchronized = True
            return
        try:
            if self._compresses_step():
                self._reduce_compressed_step()
            else:
                self._finish_all()
            if self._step_compression is not None:
                self._step_compression.end_step()  # warm-up steps count too
        finally:
            self._start_new_step()
        self._synchronized = True

    def _finish_all(self):
        """Starts the allreduces backward did not start, and waits for all."""
        for p in self._requires_update:
            key = self._launch_key(p)
            if key not in self._launched:
                self._launched[key] = self._launch(self._members(p))
        first_error = None
        for launched in self._launched.values():
            try:  # wait for every one before raising, so none is left in flight
                self._finish(launched)
            except Exception as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error

    def _start_new_step(self):
        self._launched.clear()
        self._touched.clear()
        for p in self._requires_update:
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._ready_in_group = [0] * len(self._groups)

    def load_state_dict(self, state_dict):
        # State is restored (elastic restore, a checkpoint) typically after a
        # failure, which may have left this step's gradients in flight if it
        # struck outside step(): wait for them and drop them, so that
        # zero_grad() and the next step start clean. Their errors were
        # already raised where the failure struck.
        for launched in self._launched.values():
            try:
                launched.handle() if launched.sparse else synchronize(launched.handle)
            except Exception:
                pass
        self._start_new_step()
        if COMPRESSION_STATE in state_dict:
            compression_state = state_dict[COMPRESSION_STATE]
            state_dict = {k: v for k, v in state_dict.items() if k != COMPRESSION_STATE}
            if self._step_compression is not None:
                self._step_compression.load_state_dict(compression_state)
        return super().load_state_dict(state_dict)

    def state_dict(self):
        """The wrapped optimizer's state_dict(), with PowerSGD's state (step
        count, Q's, this rank's error memory) under COMPRESSION_STATE."""
        state = super().state_dict()
        if self._step_compression is not None:
            state[COMPRESSION_STATE] = self._step_compression.state_dict()
        return state

    def sync_compression_state(self, root_rank, name, process_set):
        """Makes PowerSGD's state the same on every rank (collective; see
        PowerSGD.sync). broadcast_optimizer_state calls it."""
        if self._step_compression is not None:
            self._step_compression.sync(root_rank, name, process_set)

    @contextmanager
    def skip_synchronize(self):
        """step() inside this context does not synchronize: for code that called
        synchronize() itself (e.g. to clip the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if closure is not None:
            # The optimizer evaluates the closure (zero_grad, forward,
            # backward) inside its step, maybe several times (LBFGS): each
            # evaluation's gradients are averaged before the update uses them.
            def synchronized_closure():
                loss = closure()
                if self._should_synchronize:
                    self.synchronize()
                return loss
            self._synchronized = False
            return super().step(synchronized_closure)
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(_STEP_AFTER_SYNCHRONIZE)
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._touched or self._launched:
            raise AssertionError(_ZERO_GRAD_RACE)
        return super().zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        """Changes backward_passes_per_step (between steps)."""
        if int(passes) < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got {passes}")
        self.backward_passes_per_step = int(passes)
        for p in self._requires_update:
            self._allreduce_delay[p] = self.backward_passes_per_step


def _remove_hooks(handles):
    for handle in handles:
        handle.remove()


def _parameter_names(param_groups, named_parameters):
    """{parameter: name}; names must be the same on every rank (they name the allreduces)."""
    if named_parameters is None:
        return {p: f"param.{g}.{i}" for g, group in enumerate(param_groups)
                for i, p in enumerate(group["params"])}
    named_parameters = list(named_parameters)
    if any(not isinstance(item, tuple) or len(item) != 2 for item in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters()")
    names = [name for name, _ in named_parameters]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: "
                         + ", ".join(duplicates))
    by_id = {id(p): name for name, p in named_parameters}
    unnamed = [(g, i) for g, group in enumerate(param_groups)
               for i, p in enumerate(group["params"]) if id(p) not in by_id]
    if unnamed:
        where = ", ".join(f"param_groups[{g}]['params'][{i}]" for g, i in unnamed)
        raise ValueError(f"named_parameters was specified, but one or more model parameters were "
                         f"not named: {where}. Pass the names of every parameter the optimizer "
                         "updates (e.g. model.named_parameters()).")
    return {p: by_id[id(p)] for group in param_groups for p in group["params"]}


def _form_groups(params, groups):
    """Tuples of parameters allreduced together. groups: None, a number of
    groups to split the parameters into (in order), or lists of parameters."""
    if groups is None or groups == 0:
        return []
    if isinstance(groups, int):
        if groups < 0:
            raise ValueError(f"groups must be >= 0, got {groups}")
        per_group = -(-len(params) // groups)
        return [tuple(params[i:i + per_group]) for i in range(0, len(params), per_group)
                if len(params[i:i + per_group]) > 1]
    if not isinstance(groups, (list, tuple)):
        raise ValueError("groups should be a non-negative integer or a list of lists of "
                         f"torch.Tensor, got {type(groups).__name__}")
    trainable = {id(p) for p in params}
    seen = set()
    formed = []
    for group in groups:
        members = []
        for p in group:
            if not isinstance(p, torch.Tensor):
                raise ValueError(f"groups must consist of torch.Tensor, got {type(p).__name__}")
            if id(p) in seen:
                raise ValueError("A parameter can only appear once in groups.")
            seen.add(id(p))
            if id(p) in trainable:
                members.append(p)
        if len(members) > 1:
            formed.append(tuple(members))
    return formed


def check_arguments(op, gradient_predivide_factor, backward_passes_per_step, num_groups, groups):
    """The checks every gradient-reducing DistributedOptimizer makes (averaging
    or sharded); returns `groups`, with num_groups (the older name) folded in."""
    if gradient_predivide_factor != 1.0 and op != ReduceOp.Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if int(backward_passes_per_step) < 1:
        raise ValueError(f"backward_passes_per_step must be > 0, got {backward_passes_per_step}")
    if num_groups:
        if groups is not None:
            raise ValueError("pass num_groups or groups, not both (num_groups is the older name)")
        groups = int(num_groups)
    return groups


def mixed_in(optimizer, mixin):
    """An instance of `mixin` in front of the optimizer's own class (so isinstance
    and the update rule are the optimizer's), sharing its attributes: its
    parameter groups, state and hooks. An lr scheduler made for the plain
    optimizer patched its `step` on the instance; that bound step would bypass
    the mixin's, so it is not carried over."""
    cls = type(optimizer.__class__.__name__, (mixin, optimizer.__class__), {})
    mixed = cls.__new__(cls)
    mixed.__dict__.update({k: v for k, v in optimizer.__dict__.items() if k != "step"})
    return mixed


def AveragingOptimizer(optimizer, named_parameters, compression, backward_passes_per_step, op,
                       gradient_predivide_factor, num_groups, groups, sparse_as_dense, process_set):
    """DistributedOptimizer for every op but Adasum (hvdlite/torch/distributed_optimizer.py):
    an instance of the optimizer's own class, sharing its parameter groups and
    state, whose step() applies the gradients reduced over process_set."""
    groups = check_arguments(op, gradient_predivide_factor, backward_passes_per_step, num_groups,
                             groups)
    distributed = mixed_in(optimizer, _DistributedOptimizer)
    distributed._hvd_setup(named_parameters, compression, int(backward_passes_per_step), op,
                           float(gradient_predivide_factor), groups, sparse_as_dense, process_set)
    return distributed
