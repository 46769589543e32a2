"""Keras 3 elastic model.fit: KerasState with the Commit/UpdateBatch/
UpdateEpoch callbacks; worker 1 kills itself (SIGKILL) in the middle of
epoch 1. Prints "final <json>" with the epochs done and a weights digest.
With --powersgd the optimizer compresses with PowerSGD, whose state
KerasState commits and restores: the report adds its step count. With
--sharding-stage N the optimizer shards its state (KerasState commits it
whole and re-shards it for the 2 survivors); the report lists the weights."""
import hashlib
import json
import sys

import keras
import numpy as np

import hvdlite.keras as hvd
from job_changes import kill_self_if

EPOCHS = 4
BATCH = 4


class KillWorker(keras.callbacks.Callback):
    """Worker 1 dies in batch 2 of epoch 1 of its first round."""

    def __init__(self):
        super().__init__()
        self.epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.epoch == 1:
            kill_self_if("1:2", batch)


def main():
    hvd.init()
    rng = np.random.default_rng(3)
    x = rng.normal(size=(48, 3)).astype("float32")
    y = (x @ np.array([[1.0], [-1.0], [0.5]], "float32")).astype("float32")
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                              keras.layers.Dense(1)])
    powersgd = (hvd.Compression.powersgd(rank=1, start_iter=2, min_compression_rate=0.0)
                if "--powersgd" in sys.argv else None)
    stage = int(sys.argv[sys.argv.index("--sharding-stage") + 1]) \
        if "--sharding-stage" in sys.argv else 0
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9),
                                                     compression=powersgd, sharding_stage=stage),
                  loss="mse")
    state = hvd.elastic.KerasState(model, epoch=0, batch=0)
    callbacks = [hvd.elastic.CommitStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 KillWorker()]

    @hvd.elastic.run
    def train(state):
        print(f"fit from epoch {state.epoch} as rank {hvd.rank()} of {hvd.size()}", flush=True)
        rows = np.arange(hvd.rank(), len(x), hvd.size())
        model.fit(x[rows], y[rows], batch_size=BATCH, epochs=EPOCHS, initial_epoch=state.epoch,
                  callbacks=callbacks, verbose=0, shuffle=False)

    train(state)
    digest = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights()))
    report = {"epoch": state.epoch, "size": hvd.size(), "weights": digest.hexdigest(),
              "values": [np.asarray(w).tolist() for w in model.get_weights()]}
    if powersgd is not None:
        report["powersgd_steps"] = powersgd.iter
    print("final " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
