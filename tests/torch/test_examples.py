"""The PyTorch examples run on 2 ranks (shortened), and training learns."""
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pytorch"


def test_train_digits_learns_on_two_ranks(world):
    result = world(2, EXAMPLES / "train_digits.py", "--epochs", "8", timeout=180).expect_ok()
    line = " ".join(result.lines(0))
    match = re.search(r"2 rank\(s\): test accuracy ([0-9.]+)", line)
    assert match and float(match.group(1)) > 0.9, result


def test_synthetic_benchmark_reports_throughput(world):
    result = world(2, EXAMPLES / "synthetic_benchmark.py", "--batch-size", "4",
                   "--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "2",
                   "--fp16-allreduce", timeout=180).expect_ok()
    assert re.search(r"Total img/sec on 2 rank\(s\): [0-9.]+", " ".join(result.lines(0))), result
