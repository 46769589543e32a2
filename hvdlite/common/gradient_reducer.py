"""Averages a list of gradients over the ranks: Horovod's gradient options
(op, compression, predivide, groups, local variables) as policy, shared by
every binding that reduces (gradient, variable) lists. A binding subclasses
it with how its tensors are scaled and reduced (the methods at the end)."""
import abc
import re

from hvdlite.common import basics, membership
from hvdlite.common.compression import NoneCompressor
from hvdlite.common.ops import ReduceOp, resolve_op
from hvdlite.common.powersgd import PowerSGDBase, refuse_unconfigured
from hvdlite.common.process_sets import global_process_set


def normalize_name(name):
    """A variable's name as a tensor name every rank spells the same way."""
    return re.sub(r"[^a-zA-Z0-9_.\-/]", "_", name)


def layer_variables(local_layers, what):
    """The trainable variables of a layer or a list of layers (Horovod's local_layers)."""
    if local_layers is None:
        return []
    if not isinstance(local_layers, (list, tuple)):
        local_layers = [local_layers]
    for layer in local_layers:
        if not hasattr(layer, "trainable_weights"):
            raise ValueError(f"{what}: local_layers must be Keras layers, got "
                             f"{type(layer).__name__}")
    return [v for layer in local_layers for v in layer.trainable_weights]


class GradientReducer(abc.ABC):
    """Names derive from the variables, so they are the same on every rank and
    on every step (the response cache then skips negotiation after the first)."""

    def __init__(self, compression=None, sparse_as_dense=False, op=None,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, prefix="DistributedGradient", postscale=1.0,
                 scale_local_gradients=True, owns_compression=True):
        self.op = resolve_op(op)
        refuse_unconfigured(compression)
        # A compression that reduces whole steps itself (PowerSGD), or None;
        # self.compression is then the per-tensor one of its warm-up: none.
        self.step_compression = None
        if isinstance(compression, PowerSGDBase):
            compression.check_op(self.op)
            if owns_compression:  # an optimizer's; a tape's is made anew each step
                compression.bind(self)
            self.step_compression, compression = compression, None
        self.compression = compression or self.default_compression()
        self.sparse_as_dense = sparse_as_dense
        if gradient_predivide_factor != 1.0 and self.op != ReduceOp.Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        if num_groups and groups is not None:
            raise ValueError("pass num_groups or groups, not both")
        if num_groups < 0:
            raise ValueError(f"num_groups must be >= 0, got {num_groups}")
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.num_groups = int(num_groups)
        self.groups = groups
        self.process_set = process_set
        self.prefix = prefix
        self.postscale = float(postscale)  # e.g. to sum, not average, aggregated gradients
        self.scale_local_gradients = scale_local_gradients
        # Variables each rank keeps to itself (model parallelism): their
        # gradients stay local. Keyed by id(); the list keeps them alive.
        self._local = []
        self._local_ids = set()

    def register_local(self, variable):
        """Keeps `variable`'s gradient local from now on (Horovod's register_local_var)."""
        if id(variable) not in self._local_ids:
            self._local_ids.add(id(variable))
            self._local.append(variable)

    def is_local(self, variable):
        return id(variable) in self._local_ids

    def set_size(self):
        if self.process_set in (None, global_process_set):
            return basics.size()
        return self.process_set.size()

    def _scale_local(self, grad):
        # Horovod divides local gradients by the set's size, so that they
        # match the averaged ones in scale (its pull 3695).
        scale = self.postscale / (self.set_size() if self.scale_local_gradients else 1)
        if grad is None or scale == 1.0:
            return grad
        return self.scale(grad, scale)

    def _scales(self):
        # Average divides by the ranks; predividing by f before the sum and
        # multiplying by f after keeps the result and avoids overflow in fp16.
        f = self.gradient_predivide_factor
        return 1.0 / f, f * self.postscale

    def _group_ids(self, variables):
        """Which group each variable's gradient joins (None: its own allreduce)."""
        if self.groups is not None:
            member = {}
            for index, group in enumerate(self.groups):
                for variable in group:
                    member[id(variable)] = index
            return [member.get(id(v)) for v in variables]
        if self.num_groups:
            per_group = -(-len(variables) // self.num_groups)
            return [i // per_group for i in range(len(variables))]
        return [None] * len(variables)

    def reduce(self, grads, variables):
        """Returns the gradients reduced over the ranks (None stays None); those
        of local variables stay local, divided by the set's size unless
        scale_local_gradients is False."""
        grads = list(grads)
        variables = list(variables)
        if self._local_ids:
            shared = [i for i, v in enumerate(variables) if not self.is_local(v)]
            reduced = self._reduce_shared([grads[i] for i in shared],
                                          [variables[i] for i in shared], shared)
            out = [self._scale_local(g) for g in grads]
            for i, r in zip(shared, reduced):
                out[i] = r
            return out
        return self._reduce_shared(grads, variables, range(len(grads)))

    def _reduce_shared(self, grads, variables, positions):
        # Alone, there is nothing to reduce; but in an elastic job a step
        # compiled now may run after the job grew, so it must keep the allreduce.
        if self.set_size() == 1 and self.op in (ReduceOp.Sum, ReduceOp.Average) \
                and self.process_set.included() and self.postscale == 1.0 \
                and not membership.enabled():
            return grads
        if self.step_compression is not None:
            return self._reduce_step(grads, variables)
        if self.sparse_as_dense:
            grads = [self.densify(g) for g in grads]
        out = list(grads)
        single, grouped = [], {}
        group_ids = self._group_ids(variables)
        for index, (grad, variable, position) in enumerate(zip(grads, variables, positions)):
            if grad is None:
                continue
            if group_ids[index] is None or self.is_sparse(grad):
                path = getattr(variable, "path", None) or variable.name
                single.append((index, f"{self.prefix}.{position}.{normalize_name(path)}"))
            else:
                grouped.setdefault(group_ids[index], []).append(index)
        reduced = self.allreduce_each([grads[i] for i, _ in single], [n for _, n in single])
        for (i, _), r in zip(single, reduced):
            out[i] = r
        for group, indices in grouped.items():
            reduced = self.grouped_allreduce([grads[i] for i in indices],
                                             f"{self.prefix}.group{group}")
            for i, r in zip(indices, reduced):
                out[i] = r
        return out

    def _reduce_step(self, grads, variables):
        """The step's gradients through PowerSGD, all at once: sparse ones made
        dense (it compresses dense matrices), the state keyed by variable path."""
        present = [i for i, g in enumerate(grads) if g is not None]
        out = list(grads)
        if not present:
            return out
        names = [normalize_name(getattr(variables[i], "path", None) or variables[i].name)
                 for i in present]
        prescale, postscale = self._scales()
        reduced = self.reduce_with_powersgd([self.densify(grads[i]) for i in present], names,
                                            f"{self.prefix}.powersgd.{names[0]}", prescale,
                                            postscale)
        for i, r in zip(present, reduced):
            out[i] = r
        return out

    # --- what a binding defines for its tensors

    def default_compression(self):
        return NoneCompressor

    def scale(self, grad, factor):
        return grad * factor

    def densify(self, grad):
        return grad

    def is_sparse(self, grad):
        return False

    @abc.abstractmethod
    def allreduce_each(self, grads, names):
        """Each gradient allreduced under its own name (with self.op, the
        compression and _scales()); returns the results in order."""

    @abc.abstractmethod
    def grouped_allreduce(self, grads, name):
        """The gradients allreduced as one group named `name`."""

    @abc.abstractmethod
    def reduce_with_powersgd(self, grads, names, name, prescale, postscale):
        """The step's dense gradients reduced by self.step_compression (the
        binding's PowerSGD), with self.op and these scales; the gradient of
        names[i] is grads[i], and the collectives' names start with `name`."""
