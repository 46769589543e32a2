"""Keras callbacks for distributed training (Horovod's hvd.callbacks), for
Keras 3 on any backend or, with TF_USE_LEGACY_KERAS=1, Keras 2 (tf_keras)."""
import numpy as np

from hvdlite.common import basics
from hvdlite.common.process_sets import global_process_set
from hvdlite.keras import backends, flavour
from hvdlite.numpy import collectives

keras = flavour.keras_module()


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """At the start of training, copies root_rank's model and optimizer state to
    every rank, so that differently initialized ranks start identical. Once per
    callback, as in Horovod: passing the same one to later fit() calls does not
    broadcast again (each would cost a pass over every variable).

    Args:
        root_rank (int): the rank whose state every rank gets.
        device (str): accepted for Horovod compatibility.
        local_variables (Iterable | None): variables each rank keeps to itself (model
            parallelism), left out of the broadcast; register_local_var() adds one later.

    Example:
        ```python
        model.fit(data, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
        ```
    """

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        self.local_variables = list(local_variables or [])

    def register_local_var(self, var):
        """Leaves `var` out of the broadcast: it stays as each rank has it.

        Args:
            var: a Keras variable of the model or its optimizer.
        """
        self.local_variables.append(var)

    def on_train_begin(self, logs=None):
        """Broadcasts root's model and optimizer variables, the first time training begins."""
        if self.broadcast_done:
            return
        self.broadcast_done = True
        model = self.model
        variables = list(model.variables)
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None:
            variables += flavour.optimizer_variables(optimizer, model.trainable_variables)
        backends.current().broadcast_variables(variables, self.root_rank, global_process_set,
                                               self.local_variables)


class MetricAverageCallback(keras.callbacks.Callback):
    """At the end of every epoch, replaces each metric in `logs` by its average
    over the ranks, so every rank (and callbacks after this one: checkpoints,
    early stopping, LR schedules) sees the same values. List it before them.

    Args:
        device (str): accepted for Horovod compatibility.
    """

    def __init__(self, device=""):
        super().__init__()

    def _average(self, logs):
        if not logs:
            return
        for key in sorted(logs):  # same order on every rank
            value = logs[key]
            if isinstance(value, (int, float, np.floating, np.integer)) or (
                    hasattr(value, "shape") and np.ndim(value) == 0):
                averaged = collectives.allreduce(np.float64(value),
                                                 name=f"MetricAverageCallback.{key}")
                logs[key] = float(averaged)

    def on_epoch_end(self, epoch, logs=None):
        """Replaces each scalar metric in `logs` by its average over the ranks (collective)."""
        self._average(logs)


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier between start_epoch and
    end_epoch.

    Args:
        initial_lr (float): the learning rate the multiplier scales.
        multiplier (float | Callable[[float], float]): a number or a function of the
            (fractional) epoch.
        start_epoch (int): the first epoch it applies to.
        end_epoch (int | None): the first epoch it no longer applies to; None: no end.
        staircase (bool): set it once per epoch; False re-evaluates it every batch.
        momentum_correction (bool): accepted for Horovod compatibility; Keras 3 compiles
            an optimizer's momentum into the train step as a constant, so it cannot be
            adjusted per batch and is left unchanged.
        steps_per_epoch (int | None): batches per epoch, for staircase=False when Keras
            does not know it.
        verbose (int): rank 0 prints the learning rate it sets at each epoch when non-zero.
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__()
        self.initial_lr = float(initial_lr)
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = 0

    def _active(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _set_lr(self, epoch):
        self._set_lr_value(self.initial_lr * self.multiplier(epoch))

    def _set_lr_value(self, value):
        optimizer = self.model.optimizer
        lr = optimizer.learning_rate
        if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
            raise ValueError("LearningRateScheduleCallback needs an optimizer whose learning_rate "
                             "is a number, not a LearningRateSchedule")
        if hasattr(lr, "assign"):
            lr.assign(value)
        else:  # a Keras 2 legacy optimizer before its first step: a plain hyperparameter
            optimizer.learning_rate = value

    def _steps(self):
        steps = self.steps_per_epoch or (self.params or {}).get("steps")
        if not steps:
            raise ValueError("pass steps_per_epoch: Keras does not know the epoch length of this "
                             "dataset")
        return steps

    def on_epoch_begin(self, epoch, logs=None):
        """Sets the epoch's learning rate when the epoch is within [start_epoch, end_epoch).

        Raises:
            ValueError: when the optimizer's learning rate is a LearningRateSchedule.
        """
        self.current_epoch = epoch
        if self._active(epoch):
            self._set_lr(epoch)
            if self.verbose and basics.rank() == 0:
                lr = float(np.asarray(self.model.optimizer.learning_rate))
                print(f"\nEpoch {epoch + 1}: learning rate set to {lr:.6g}")

    def on_train_batch_begin(self, batch, logs=None):
        """With staircase=False, sets the learning rate for the fractional epoch this batch starts.

        Raises:
            ValueError: when the epoch's length is unknown: pass steps_per_epoch.
        """
        if self.staircase or not self._active(self.current_epoch):
            return
        self._set_lr(self.current_epoch + batch / self._steps())


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from initial_lr / size to initial_lr over
    warmup_epochs (per batch), as "Accurate, Large Minibatch SGD" (Goyal et al.)
    recommends when the learning rate is scaled by the number of ranks.

    Args:
        initial_lr (float): the learning rate reached at the end of the warm-up.
        warmup_epochs (int): how many epochs the ramp takes.
        momentum_correction (bool): accepted for Horovod compatibility (see
            LearningRateScheduleCallback).
        steps_per_epoch (int | None): batches per epoch, when Keras does not know it.
        verbose (int): rank 0 prints when the warm-up is finished, when non-zero.

    Example:
        ```python
        callbacks = [hvd.callbacks.LearningRateWarmupCallback(0.01 * hvd.size(), warmup_epochs=3)]
        ```
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None,
                 verbose=0):
        def multiplier(epoch):
            size = basics.size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, verbose=0)
        self.warmup_epochs = warmup_epochs
        self.warmup_verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        """At the end of the last warm-up epoch, sets the learning rate to initial_lr exactly."""
        if epoch == self.warmup_epochs - 1:
            self._set_lr_value(self.initial_lr)
            if self.warmup_verbose and basics.rank() == 0:
                print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                      f"{self.initial_lr:.6g}.")
