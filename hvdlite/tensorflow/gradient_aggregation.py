"""Local gradient aggregation (Horovod's backward_passes_per_step) for
optimizers that have none of their own (Keras 2): gradients of N backward
passes are summed on each rank, and only every Nth step communicates and
updates the variables."""
import tensorflow as tf


class LocalGradientAggregator:
    """Accumulates gradients in variables; works eagerly and inside tf.function.

    Every rank counts the same steps, so every rank takes the same branch of
    the tf.cond around the reduction and the update: collectives never diverge.
    """

    def __init__(self, backward_passes_per_step, reducer, average_aggregated_gradients=False):
        self.passes = int(backward_passes_per_step)
        self.reducer = reducer
        self.average = average_aggregated_gradients
        self.counter = None
        self._sums = {}  # id(variable) -> its accumulator

    def _build(self, variables):
        with tf.init_scope():  # created once, outside any function being traced
            if self.counter is None:
                self.counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name="hvdlite_aggregation_counter")
            for variable in variables:
                if id(variable) not in self._sums:
                    self._sums[id(variable)] = tf.Variable(
                        tf.zeros(variable.shape, variable.dtype), trainable=False,
                        name="hvdlite_aggregated_gradient")

    def compute_gradients(self, grads, variables):
        """Adds `grads` to the sums; returns the reduced sums on every Nth call
        (the local sums otherwise, which apply_gradients then skips)."""
        variables = list(variables)
        self._build(variables)
        updates = [self._sums[id(v)].assign_add(tf.convert_to_tensor(g))
                   for g, v in zip(grads, variables) if g is not None]
        with tf.control_dependencies(updates):
            count = self.counter.assign_add(1)
        present = [i for i, g in enumerate(grads) if g is not None]
        scale = 1.0 / self.passes if self.average else 1.0

        def sums():
            return [self._sums[id(variables[i])].read_value() * scale for i in present]

        def reduced():
            return self.reducer.reduce(sums(), [variables[i] for i in present])

        values = tf.cond(tf.equal(count % self.passes, 0), reduced, sums) if present else []
        out = [None] * len(variables)
        for i, value in zip(present, values):
            out[i] = value
        return out

    def apply_gradients(self, apply, optimizer, variables):
        """Runs apply() and clears the sums on every Nth step; on the others
        only counts the step in optimizer.iterations, as Horovod does."""
        def update():
            result = apply()
            if isinstance(result, tf.Variable):
                result = result.read_value()
            with tf.control_dependencies([] if result is None else [result]):
                clears = [self._sums[id(v)].assign(tf.zeros_like(self._sums[id(v)]))
                          for v in variables if id(v) in self._sums]
            with tf.control_dependencies(clears):
                return tf.constant(True)

        def skip():
            with tf.control_dependencies([optimizer.iterations.assign_add(1)]):
                return tf.constant(False)

        return tf.cond(tf.equal(self.counter % self.passes, 0), update, skip)
