"""Local gradient aggregation (Horovod's backward_passes_per_step) for
optimizers that have none of their own (Keras 2): gradients of N backward
passes are summed on each rank, and only every Nth pass communicates and
updates the variables."""
import tensorflow as tf


class LocalGradientAggregator:
    """Accumulates gradients in variables; works eagerly and inside tf.function
    (model.fit). The Keras 2 optimizer's `_agg_helper`, as in Horovod.

    `counter` holds the passes summed since the last reduction (0 right after
    it), so after k passes it reads k % backward_passes_per_step. Every rank
    counts the same passes, so every rank takes the same branch of the tf.cond
    around the reduction and the update: collectives never diverge.
    """

    def __init__(self, backward_passes_per_step, reducer, average_aggregated_gradients=False):
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.average_aggregated_gradients = average_aggregated_gradients
        self.reducer = reducer
        self.counter = None
        self._sums = {}  # id(variable) -> its accumulator
        if tf.executing_eagerly():  # readable before the first pass, as Horovod's
            self._build([])

    def _build(self, variables):
        with tf.init_scope():  # created once, outside any function being traced
            if self.counter is None:
                self.counter = tf.Variable(0, dtype=tf.int32, trainable=False,
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
        present = [i for i, g in enumerate(grads) if g is not None]
        # The first pass of a cycle overwrites the sums, so nothing of the last
        # cycle (an infinite gradient included) reaches this one, whether or
        # not apply_gradients ran; tf.where selects, so the inf or NaN in the
        # branch it drops cannot leak.
        first_pass = tf.equal(self.counter, 0)
        updates = []
        for i in present:
            total = self._sums[id(variables[i])]
            grad = tf.convert_to_tensor(grads[i])  # IndexedSlices sum densely
            updates.append(total.assign(tf.where(first_pass, grad, total + grad)))
        with tf.control_dependencies(updates):
            count = self.counter.assign_add(1)
        scale = 1.0 / self.backward_passes_per_step if self.average_aggregated_gradients else 1.0

        def sums():
            return [self._sums[id(variables[i])].read_value() * scale for i in present]

        def reduced():
            with tf.control_dependencies([self.counter.assign(0)]):
                return self.reducer.reduce(sums(), [variables[i] for i in present])

        values = []
        if present:
            with tf.control_dependencies([count]):
                values = tf.cond(tf.equal(count, self.backward_passes_per_step), reduced, sums)
        out = [None] * len(variables)
        for i, value in zip(present, values):
            out[i] = value
        return out

    def apply_gradients(self, apply, optimizer, grads):
        """Runs apply() on the pass that reduced (the counter is back at 0);
        on the others only counts the step in optimizer.iterations, as Horovod
        does. `grads` are what apply() applies: the update waits for them."""
        def update():
            result = apply()
            if isinstance(result, tf.Variable):
                result = result.read_value()
            with tf.control_dependencies([] if result is None else [result]):
                return tf.constant(True)

        def skip():
            with tf.control_dependencies([optimizer.iterations.assign_add(1)]):
                return tf.constant(False)

        self._build([])  # apply_gradients may come first: the counter then reads 0
        ready = [g.values if isinstance(g, tf.IndexedSlices) else g
                 for g in grads if g is not None]
        with tf.control_dependencies(ready):
            return tf.cond(tf.equal(self.counter, 0), update, skip)
