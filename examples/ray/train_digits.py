"""Data-parallel PyTorch training on a Ray cluster with hvdlite.ray.

    python examples/ray/train_digits.py --num-workers 2             # a local Ray, started here
    python examples/ray/train_digits.py --address auto --num-workers 8 --use-gpu

Each rank is a Ray actor running the training function of
examples/pytorch/train_digits.py (hvdlite.torch with its DistributedOptimizer),
unchanged: RayExecutor gives every actor its rank's environment, so that
function's hvd.init() joins the job as it would under hvdliterun.
"""
import argparse
import importlib.util
import pathlib
import sys

import ray

from hvdlite.ray import RayExecutor


def load_training_module():
    path = pathlib.Path(__file__).resolve().parents[1] / "pytorch" / "train_digits.py"
    spec = importlib.util.spec_from_file_location("pytorch_train_digits", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    # Ray's workers cannot import a script by its path: ship it by value.
    ray.cloudpickle.register_pickle_by_value(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="a running Ray cluster ('auto', or host:port); "
                                          "default: start one on this machine")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--use-gpu", action="store_true")
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args()

    training = load_training_module()
    ray.init(address=args.address, num_cpus=None if args.address else args.num_workers)
    executor = RayExecutor(RayExecutor.create_settings(timeout_s=60),
                           num_workers=args.num_workers, use_gpu=args.use_gpu)
    executor.start()
    try:
        accuracies = executor.run(training.train, kwargs={"epochs": args.epochs})
    finally:
        executor.shutdown()
    print(f"{args.num_workers} Ray worker(s): test accuracy {accuracies[0]:.3f}")


if __name__ == "__main__":
    main()
