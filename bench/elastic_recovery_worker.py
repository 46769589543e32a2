"""One worker of bench/elastic_recovery.py: elastic training (torch, Keras 3
on the backend KERAS_BACKEND names, or hvdlite.numpy alone, which imports no
framework) that commits after every step and
writes what happened, with wall-clock times, to EVENTS/<pid>.jsonl:

    start     the process began (before importing the framework)
    init      hvd.init() returned (first time only)
    failure   a collective failed (HvdliteInternalError left the step)
    reset     the job re-formed: init() of the new round returned
    enter     the training function began, after state.sync()
    step      a step (forward, backward, allreduce, update, commit) finished

The job runs until EVENTS/stop exists (rank 0 looks, every rank learns it
from a broadcast, so that all stop after the same step).

    python bench/elastic_recovery_worker.py EVENTS torch|keras|numpy [--step-pause S]
"""
import json
import os
import sys
import time

START = time.time()


class Events:
    def __init__(self, folder):
        self.folder = folder
        self._file = open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a", buffering=1)
        self.worker = os.environ.get("HVDLITE_ELASTIC_WORKER_ID", "?")
        self.host = os.environ.get("HOROVOD_HOSTNAME", "?")
        self.rank = self.size = None
        self.write("start", t=START)

    def write(self, event, t=None, **fields):
        record = {"event": event, "t": time.time() if t is None else t, "pid": os.getpid(),
                  "worker": self.worker, "host": self.host, "rank": self.rank,
                  "size": self.size, **fields}
        self._file.write(json.dumps(record) + "\n")

    def stop_requested(self):
        return os.path.exists(os.path.join(self.folder, "stop"))


def train_torch(events, pause):
    import torch

    import hvdlite.torch as hvd

    initialized(events, hvd)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01,
                                                         momentum=0.9),
                                         named_parameters=model.named_parameters())
    x, y = torch.randn(64, 32), torch.randn(64, 1)

    def step(state):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    train_in_steps(events, hvd, hvd.elastic.TorchState(model, optimizer, step=0), step, pause)


def train_numpy(events, pause):
    """hvdlite alone (no framework to import or build): the floor under the others."""
    import numpy as np

    import hvdlite.numpy as hvd

    initialized(events, hvd)

    def step(state):
        gradient = np.full_like(state.weights, 1e-3 * (hvd.rank() + 1))
        state.weights = state.weights - hvd.allreduce(gradient, name="grad")

    train_in_steps(events, hvd, hvd.elastic.ObjectState(step=0, weights=np.zeros(64 * 33)),
                   step, pause)


def train_in_steps(events, hvd, state, step, pause):
    """hvd.elastic.run over `step(state)`, each followed by a commit and an
    event, until the bench asks to stop."""
    from hvdlite.common.exceptions import HvdliteInternalError

    state.register_reset_callbacks([lambda: on_reset(events, hvd)])

    @hvd.elastic.run
    def train(state):
        entered(events, hvd, state)
        try:
            while True:
                step(state)
                state.step += 1
                stop = stop_requested(events, hvd)
                state.commit()
                events.write("step", step=state.step)
                if stop:
                    return
                time.sleep(pause)
        except HvdliteInternalError as error:
            events.write("failure", error=type(error).__name__)
            raise

    train(state)


def train_keras(events, pause):
    import keras
    import numpy as np

    import hvdlite.keras as hvd

    initialized(events, hvd)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01, momentum=0.9)),
                  loss="mse")
    state = hvd.elastic.KerasState(model, epoch=0, batch=0, step=0)
    state.register_reset_callbacks([lambda: on_reset(events, hvd)])
    x = np.random.default_rng(0).normal(size=(64 * 1000, 32)).astype("float32")
    y = x[:, :1].copy()

    class StepEvents(keras.callbacks.Callback):
        """After the commit of each batch: records it, and stops when asked."""

        def on_train_batch_end(self, batch, logs=None):
            state.step += 1
            events.write("step", step=state.step)
            if stop_requested(events, hvd):
                self.model.stop_training = True
            time.sleep(pause)

    callbacks = [hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=1), StepEvents()]

    @hvd.elastic.run
    def train(state):
        entered(events, hvd, state)
        try:
            model.fit(x, y, batch_size=64, epochs=1000, initial_epoch=state.epoch,
                      callbacks=callbacks, verbose=0, shuffle=False)
        except Exception as error:  # noqa: BLE001 - recorded, then re-raised as it came
            # On some backends a failed collective reaches here as the
            # framework's own error, which hvd.elastic.run translates.
            events.write("failure", error=type(error).__name__)
            raise

    train(state)


def initialized(events, hvd):
    hvd.init()
    events.rank, events.size = hvd.rank(), hvd.size()
    events.write("init")


def entered(events, hvd, state):
    events.rank, events.size = hvd.rank(), hvd.size()
    events.write("enter", step=state.step)


def stop_requested(events, hvd):
    """Rank 0's answer on every rank, so that all stop after the same step."""
    from hvdlite.numpy.objects import broadcast_object  # every binding's, under its name
    return broadcast_object(events.stop_requested() if hvd.rank() == 0 else None, 0,
                            name="bench.stop")


def on_reset(events, hvd):
    events.rank, events.size = hvd.rank(), hvd.size()
    events.write("reset")


def main():
    folder, framework = sys.argv[1], sys.argv[2]
    pause = float(sys.argv[sys.argv.index("--step-pause") + 1]) \
        if "--step-pause" in sys.argv else 0.02
    events = Events(folder)
    {"torch": train_torch, "keras": train_keras, "numpy": train_numpy}[framework](events, pause)
    events.write("done")


if __name__ == "__main__":
    main()
