"""Data-parallel PyTorch training on a Spark cluster with hvdlite.spark.

    python examples/spark/train_digits.py --num-proc 2               # local-cluster[2,1,1024]
    python examples/spark/train_digits.py --master spark://host:7077 --num-proc 8

Each rank is a task of one Spark barrier stage running the training function
of examples/pytorch/train_digits.py (hvdlite.torch with its
DistributedOptimizer), unchanged: hvdlite.spark.run gives every task its
rank's environment, so that function's hvd.init() joins the job as it would
under hvdliterun. Spark needs Java (17).
"""
import argparse
import importlib.util
import os
import pathlib
import sys

from pyspark import cloudpickle
from pyspark.sql import SparkSession

import hvdlite.spark


def load_training_module():
    path = pathlib.Path(__file__).resolve().parents[1] / "pytorch" / "train_digits.py"
    spec = importlib.util.spec_from_file_location("pytorch_train_digits", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    # The executors cannot import a script by its path: ship it by value.
    cloudpickle.register_pickle_by_value(module)
    return module


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default="local-cluster[2,1,1024]",
                        help="Spark master; the default starts two executors here")
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=15)
    args = parser.parse_args()

    training = load_training_module()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors use this venv
    spark = (SparkSession.builder.master(args.master).appName("hvdlite-train-digits")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    try:
        accuracies = hvdlite.spark.run(training.train, kwargs={"epochs": args.epochs},
                                       num_proc=args.num_proc, stdout=sys.stdout)
    finally:
        spark.stop()
    print(f"{args.num_proc} Spark task(s): test accuracy {accuracies[0]:.3f}")


if __name__ == "__main__":
    main()
