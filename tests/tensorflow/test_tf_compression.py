"""hvdlite/tensorflow/compression.py on 2 real ranks under Keras 2 (tf_keras):
fp16 and bf16 on the wire (common/compression.py's casts), allreduce,
DistributedGradientTape and a Keras fit against references within each half
type's precision. (The same under Keras 3: test_tf_jobs.py's 2-rank job.)"""
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.tensorflow_ops

WORKER = Path(__file__).parent / "workers" / "compressed_collectives.py"


# Keras 2 (tf_keras), whose hvdlite.keras takes TensorFlow's Compression as
# well (Keras 3 on TensorFlow: in test_tf_jobs.py's 2-rank job).
@pytest.mark.parametrize("keras_flavour", ["keras2"])
def test_fp16_and_bf16_compression_on_two_ranks(world, keras_flavour):
    pytest.importorskip("tf_keras")
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}
    result = world(2, WORKER, "keras", timeout=300, env=env)
    assert result.returncode == 0, result
    for rank in range(2):
        lines = result.lines(rank)
        assert "compression OK" in lines, result
        assert any(line.startswith("keras tf_keras") for line in lines), result
