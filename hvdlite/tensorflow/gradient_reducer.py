"""Averages a list of gradients over the ranks: the shared engine of
DistributedGradientTape and the Keras DistributedOptimizer."""
import tensorflow as tf

from hvdlite.common import membership
from hvdlite.common.ops import ReduceOp, resolve_op
from hvdlite.common.process_sets import global_process_set
from hvdlite.tensorflow import ops
from hvdlite.tensorflow.compression import Compression


class GradientReducer:
    """Horovod's gradient options, applied to (gradient, variable) lists.

    Names derive from the variables, so they are the same on every rank and on
    every step (the response cache then skips negotiation after the first step).
    """

    def __init__(self, compression=None, sparse_as_dense=False, op=None,
                 gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 process_set=global_process_set, prefix="DistributedGradient", postscale=1.0,
                 scale_local_gradients=True):
        self.compression = compression or Compression.none
        self.sparse_as_dense = sparse_as_dense
        self.op = resolve_op(op)
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

    def _scale_local(self, grad):
        # Horovod divides local gradients by the set's size, so that they
        # match the averaged ones in scale (its pull 3695).
        scale = self.postscale / (ops._set_size(self.process_set) if self.scale_local_gradients
                                  else 1)
        if grad is None or scale == 1.0:
            return grad
        if isinstance(grad, tf.IndexedSlices):
            return tf.IndexedSlices(grad.values * tf.cast(scale, grad.values.dtype), grad.indices,
                                    grad.dense_shape)
        return grad * tf.cast(scale, grad.dtype)

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
        # Alone, there is nothing to reduce; but in an elastic job a graph
        # traced now may run after the job grew, so it must keep the allreduce.
        if ops._set_size(self.process_set) == 1 and self.op in (ReduceOp.Sum, ReduceOp.Average) \
                and self.process_set.included() and self.postscale == 1.0 \
                and not membership.enabled():
            return grads
        if self.sparse_as_dense:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        prescale, postscale = self._scales()
        out = list(grads)
        grouped = {}
        group_ids = self._group_ids(variables)
        for index, (grad, variable, position) in enumerate(zip(grads, variables, positions)):
            if grad is None:
                continue
            name = f"{self.prefix}.{position}.{ops._normalize(getattr(variable, 'path', None) or variable.name)}"
            if group_ids[index] is None or isinstance(grad, tf.IndexedSlices):
                out[index] = ops.allreduce(grad, op=self.op, compression=self.compression,
                                           prescale_factor=prescale, postscale_factor=postscale,
                                           name=name, process_set=self.process_set)
            else:
                grouped.setdefault(group_ids[index], []).append(index)
        for group, indices in grouped.items():
            reduced = ops.grouped_allreduce(
                [grads[i] for i in indices], op=self.op, compression=self.compression,
                prescale_factor=prescale, postscale_factor=postscale,
                name=f"{self.prefix}.group{group}", process_set=self.process_set)
            for i, r in zip(indices, reduced):
                out[i] = r
        return out
