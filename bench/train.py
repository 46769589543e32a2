"""Training throughput on synthetic data: hvdlite's PyTorch and Keras bindings
against PyTorch DDP (gloo), at 1 rank and N ranks, with the same model, batch
and threads (one per rank), and the scaling efficiency of each.

    python bench/train.py [--np 2] [--models cnn,mlp]
                          [--backends torch,ddp,keras,alone,keras-alone,horovod]
                          [--steps N] [--warmup N] [--batch N]

Models: "cnn", a ~1 M-parameter convolutional net on 32x32x3 images at batch
32 per rank, and "mlp", a ~21 M-parameter perceptron (84 MB of gradients) at
batch 64 per rank (--steps, --warmup and --batch shrink a run: the tests
check the harness with them, not the numbers). Backends: "torch"
(hvdlite.torch DistributedOptimizer), "ddp"
(torch.nn.parallel.DistributedDataParallel over gloo), "keras"
(hvdlite.keras DistributedOptimizer under model.fit), "alone" (N copies
of plain PyTorch that never communicate: the ceiling memory contention
leaves), "keras-alone" (the same for Keras) and "horovod" (horovod.torch's
DistributedOptimizer under horovodrun, where installed). Scaling efficiency =
samples/s at N ranks / (N x samples/s at 1 rank of the same backend); "vs
plain" divides by N x the plain framework's 1 process ("alone" or
"keras-alone") instead. Prints a table and writes <out>/train.json.

Each run is one script under hvdliterun (see launch.py), started again as
    hvdliterun -np N python bench/train.py --backend torch --model cnn --json out.json
"""
import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from launch import HERE, horovodrun, launch

MODELS = {"cnn": {"batch": 32, "steps": 30, "warmup": 5},
          "mlp": {"batch": 64, "steps": 30, "warmup": 5}}
BACKENDS = ("torch", "ddp", "keras", "alone", "keras-alone", "horovod")
IMAGE = (3, 32, 32)
FEATURES = 3072
CLASSES = 10


# ----------------------------------------------------------------- PyTorch --

def torch_model(name):
    import torch.nn as nn
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(128 * 4 * 4, 384), nn.ReLU(), nn.Linear(384, CLASSES))
    return nn.Sequential(nn.Linear(FEATURES, 4096), nn.ReLU(), nn.Linear(4096, 2048), nn.ReLU(),
                         nn.Linear(2048, CLASSES))


class TorchRun:
    """One rank's PyTorch training loop; `backend` says how gradients are shared."""

    def __init__(self, backend, model_name, batch=None):
        import torch
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.torch = torch
        self.backend = backend
        model = torch_model(model_name)
        self.hvd = None  # set when the backend is hvdlite.torch or Horovod (same API)
        if backend in ("torch", "horovod"):  # the same script over either
            # BENCH_HOROVOD_MODULE: see backends.Horovod.
            hvd = importlib.import_module("hvdlite.torch" if backend == "torch" else
                                          os.environ.get("BENCH_HOROVOD_MODULE", "horovod.torch"))
            self.hvd = hvd
            hvd.init()
            self.rank, self.size = hvd.rank(), hvd.size()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        elif backend == "ddp":
            import torch.distributed as dist
            self.dist = dist
            self.rank, self.size = int(os.environ["HVDLITE_RANK"]), int(os.environ["HVDLITE_SIZE"])
            dist.init_process_group("gloo", rank=self.rank, world_size=self.size,
                                    init_method=f"tcp://127.0.0.1:{os.environ['BENCH_GLOO_PORT']}")
            model = torch.nn.parallel.DistributedDataParallel(model)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        else:  # alone: no communication at all
            self.rank, self.size = int(os.environ["HVDLITE_RANK"]), int(os.environ["HVDLITE_SIZE"])
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        self.model, self.optimizer = model, optimizer
        self.loss = torch.nn.CrossEntropyLoss()
        self.params = sum(p.numel() for p in model.parameters())
        shape = IMAGE if model_name == "cnn" else (FEATURES,)
        batch = batch or MODELS[model_name]["batch"]
        generator = torch.Generator().manual_seed(self.rank)
        self.x = torch.randn(batch, *shape, generator=generator)
        self.y = torch.randint(0, CLASSES, (batch,), generator=generator)

    def train(self, steps):
        for _ in range(steps):
            self.optimizer.zero_grad()
            self.loss(self.model(self.x), self.y).backward()
            self.optimizer.step()

    def sync(self):
        if self.hvd:
            self.hvd.allreduce(self.torch.zeros(1), name="bench.sync")
        elif self.backend == "ddp":
            self.dist.barrier()

    def slowest(self, seconds):
        t = self.torch.tensor([seconds], dtype=self.torch.float64)
        if self.hvd:
            return float(self.hvd.allreduce(t, op=self.hvd.Max, name="bench.elapsed")[0])
        if self.backend == "ddp":
            self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t[0])

    def shutdown(self):
        if self.hvd:
            self.hvd.shutdown()
        elif self.backend == "ddp":
            self.dist.destroy_process_group()


# ------------------------------------------------------------------- Keras --

class KerasRun:
    """One rank's Keras loop: model.fit with hvdlite.keras's DistributedOptimizer,
    or, `alone`, with the plain Keras optimizer and no communication."""

    def __init__(self, model_name, alone=False, batch=None):
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        import keras
        self.keras, self.alone = keras, alone
        if alone:
            self.hvd = None
            self.rank, self.size = int(os.environ["HVDLITE_RANK"]), int(os.environ["HVDLITE_SIZE"])
        else:
            import hvdlite.keras as hvd
            self.hvd = hvd
            hvd.init()
            self.rank, self.size = hvd.rank(), hvd.size()
        keras.utils.set_random_seed(0)
        layers = keras.layers
        if model_name == "cnn":
            self.model = keras.Sequential([
                keras.Input(IMAGE[1:] + IMAGE[:1]),
                layers.Conv2D(32, 3, padding="same", activation="relu"),
                layers.Conv2D(64, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
                layers.Conv2D(128, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
                layers.Conv2D(128, 3, padding="same", activation="relu"), layers.MaxPooling2D(),
                layers.Flatten(), layers.Dense(384, activation="relu"), layers.Dense(CLASSES)])
            shape = IMAGE[1:] + IMAGE[:1]
        else:
            self.model = keras.Sequential([
                keras.Input((FEATURES,)), layers.Dense(4096, activation="relu"),
                layers.Dense(2048, activation="relu"), layers.Dense(CLASSES)])
            shape = (FEATURES,)
        optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
        # One callback for every fit(): it broadcasts the variables once, at
        # the warm-up's start, as a training script does.
        self.callbacks = []
        if not alone:
            optimizer = self.hvd.DistributedOptimizer(optimizer)
            self.callbacks = [self.hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
        self.model.compile(optimizer=optimizer,
                           loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        self.params = self.model.count_params()
        self.batch = batch or MODELS[model_name]["batch"]
        rng = np.random.default_rng(self.rank)
        self.x = rng.normal(size=(self.batch, *shape)).astype("float32")
        self.y = rng.integers(0, CLASSES, size=self.batch)

    def train(self, steps):
        # One dataset that repeats the batch: fit() then runs `steps` steps of
        # its compiled train function, as a real input pipeline would.
        # tf.data's autotuning is off: its thread, stopped when fit() drops the
        # iterator, held each fit() return for up to 10 s on a 2-core machine
        # (a start-up cost of the benchmark, not of training).
        import tensorflow as tf
        options = tf.data.Options()
        options.autotune.enabled = False
        data = tf.data.Dataset.from_tensors((self.x, self.y)).repeat().with_options(options)
        self.model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False,
                       callbacks=self.callbacks)

    def sync(self):
        self.hvd.allreduce(np.zeros(1, np.float32), name="bench.sync")

    def slowest(self, seconds):
        return float(self.hvd.allreduce(np.float64(seconds), op=self.hvd.Max, name="bench.elapsed"))

    def shutdown(self):
        if not self.alone:
            self.hvd.shutdown()


class FileMeeting:
    """Start and finish line for ranks that never communicate (the "alone"
    backends): files beside the run's JSON, so their timed windows overlap as
    trained ranks' do, and the slowest rank's time counts as for the others."""

    def __init__(self, directory, rank, size):
        self.directory, self.rank, self.size, self.meetings = Path(directory), rank, size, 0

    def _meet(self, text=""):
        self.meetings += 1
        mine = self.directory / f"meeting{self.meetings}.{self.rank}"
        partial = self.directory / f"partial-{mine.name}"  # renamed whole, never read half
        partial.write_text(text)
        partial.rename(mine)
        while True:
            found = sorted(self.directory.glob(f"meeting{self.meetings}.[0-9]*"))
            if len(found) == self.size:
                return [f.read_text() for f in found]
            time.sleep(0.001)

    def sync(self):
        self._meet()

    def slowest(self, seconds):
        return max(float(text) for text in self._meet(repr(seconds)))


def worker(args):
    """One rank of one run: warm up, time `steps` steps, report samples/s."""
    spec = MODELS[args.model]
    steps = args.steps or spec["steps"]
    warmup = spec["warmup"] if args.warmup is None else args.warmup
    batch = args.batch or spec["batch"]
    if args.backend in ("keras", "keras-alone"):
        run = KerasRun(args.model, alone=args.backend == "keras-alone", batch=batch)
    else:
        run = TorchRun(args.backend, args.model, batch=batch)
    meeting = run
    if args.backend in ("alone", "keras-alone"):
        meeting = FileMeeting(Path(args.json).parent, run.rank, run.size)
    run.train(warmup)
    meeting.sync()
    start = time.perf_counter()
    run.train(steps)
    meeting.sync()
    elapsed = meeting.slowest(time.perf_counter() - start)
    result = {"model": args.model, "params": int(run.params), "batch": batch,
              "steps": steps, "warmup": warmup, "seconds": elapsed,
              "samples_per_s": run.size * steps * batch / elapsed}
    if run.rank == 0:
        print(f"{args.backend} {args.model} {run.size} rank(s): "
              f"{result['samples_per_s']:.1f} samples/s", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps({"backend": args.backend, "ranks": run.size,
                                                   "results": result}, indent=1))
    run.shutdown()


# ------------------------------------------------------------------ driver --

def available(backends):
    import importlib.util
    need = {"torch": "torch", "ddp": "torch", "alone": "torch", "keras": "tensorflow",
            "keras-alone": "tensorflow", "horovod": "horovod"}
    found = [b for b in backends if importlib.util.find_spec(need[b]) is not None]
    if "horovod" in found and horovodrun() is None:
        found.remove("horovod")
    if "torch" in found:
        try:
            import hvdlite.torch as hvd  # noqa: F401
            hvd.DistributedOptimizer  # noqa: B018
        except (ImportError, AttributeError) as error:
            print(f"hvdlite.torch is not usable here ({error}); left out", flush=True)
            found.remove("torch")
    return found


def run_suite(np_, models, backends, repeat, steps, timeout, warmup=None, batch=None):
    """Runs every (model, backend) at 1 and np_ ranks, interleaved over
    repetitions; steps, warmup, batch: each model's own where None;
    returns {model: {backend: {"1": [...], "N": [...]}}}."""
    sizes = {"steps": steps, "warmup": warmup, "batch": batch}
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter
    raw = {}
    for _ in range(repeat):
        for model in models:
            for backend in backends:
                for ranks in (1, np_):
                    extra = ["--model", model] + [word for option, value in sizes.items()
                                                  if value is not None
                                                  for word in (f"--{option}", str(value))]
                    result = launch(backend, "train.py", ranks, extra, timeout)
                    if result is not None:
                        raw.setdefault(model, {}).setdefault(backend, {}).setdefault(
                            str(ranks), []).append(result["results"])
    return raw


# The plain single-process training each backend is a distributed version of.
PLAIN = {"torch": "alone", "ddp": "alone", "alone": "alone", "horovod": "alone",
         "keras": "keras-alone", "keras-alone": "keras-alone"}


def summarize(raw, np_):
    """Per (model, backend): median samples/s at 1 and np_ ranks, the scaling
    efficiency against the backend's own 1-rank run, and against the plain
    framework's 1-process run (what a user gains over not distributing: a
    backend's 1-rank run may itself carry its overhead, as DDP's does)."""
    rows = []
    for model, per_backend in raw.items():
        for backend, runs in per_backend.items():
            one = [r["samples_per_s"] for r in runs.get("1", [])]
            many = [r["samples_per_s"] for r in runs.get(str(np_), [])]
            params = (runs.get("1") or runs.get(str(np_)))[0]["params"]
            row = {"model": model, "backend": backend, "params": params,
                   "one_rank": float(np.median(one)) if one else None,
                   "n_ranks": float(np.median(many)) if many else None}
            row["efficiency"] = (row["n_ranks"] / (np_ * row["one_rank"])
                                 if one and many else None)
            rows.append(row)
    plain_one = {(r["model"], r["backend"]): r["one_rank"] for r in rows}
    for row in rows:
        plain = plain_one.get((row["model"], PLAIN[row["backend"]]))
        row["efficiency_vs_plain"] = (row["n_ranks"] / (np_ * plain)
                                      if plain and row["n_ranks"] else None)
    return rows


def print_table(rows, np_):
    print(f"\ntraining on synthetic data, one thread per rank: samples/s (total over ranks)")
    print(f"{'model':>6} {'backend':>11} {'params':>8} {'1 rank':>9} {f'{np_} ranks':>9} "
          f"{'scaling':>8} {'vs plain':>9}")
    fmt = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
    for r in rows:
        print(f"{r['model']:>6} {r['backend']:>11} {r['params'] / 1e6:>7.2f}M "
              f"{fmt(r['one_rank'], '9.1f')} {fmt(r['n_ranks'], '9.1f')} "
              f"{fmt(r['efficiency'], '8.2f')} {fmt(r['efficiency_vs_plain'], '9.2f')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--models", default="cnn,mlp")
    parser.add_argument("--backends", default=",".join(BACKENDS),
                        help="comma-separated subset of " + ",".join(BACKENDS))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--steps", type=int, help="timed steps per run (default per model)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default per model)")
    parser.add_argument("--batch", type=int, help="samples per rank and step (default per model)")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--timeout", type=float, default=900)
    # One rank of one run (how the driver starts itself under hvdliterun).
    parser.add_argument("--backend", choices=BACKENDS)
    parser.add_argument("--model", choices=sorted(MODELS))
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.backend:
        return worker(args)
    backends = available(args.backends.split(","))
    raw = run_suite(args.np, args.models.split(","), backends, args.repeat, args.steps,
                    args.timeout, args.warmup, args.batch)
    rows = summarize(raw, args.np)
    print_table(rows, args.np)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.json").write_text(json.dumps({"ranks": args.np, "repeat": args.repeat,
                                                "summary": rows, "raw": raw}, indent=1))
    print(f"results: {out / 'train.json'}")


if __name__ == "__main__":
    sys.exit(main())
