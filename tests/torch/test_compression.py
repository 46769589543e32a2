"""hvdlite/torch/compression.py: what each compressor sends and restores
(no ranks needed; allreduce with compression is tested in test_mpi_ops.py)."""
import pytest

torch = pytest.importorskip("torch")

from hvdlite.torch import Compression  # noqa: E402


@pytest.mark.parametrize("compressor, wire", [(Compression.fp16, torch.float16),
                                              (Compression.bf16, torch.bfloat16)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_casting_compressors_send_floats_narrow_and_restore_them(compressor, wire, dtype):
    tensor = torch.linspace(-3, 3, 7, dtype=dtype)
    sent, ctx = compressor.compress(tensor)
    assert sent.dtype == wire
    restored = compressor.decompress(sent, ctx)
    assert restored.dtype == dtype
    assert torch.allclose(restored, tensor, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("compressor", [Compression.none, Compression.fp16, Compression.bf16])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool])
def test_non_float_tensors_pass_unchanged(compressor, dtype):
    tensor = torch.ones(4, dtype=dtype)
    sent, ctx = compressor.compress(tensor)
    assert sent is tensor
    assert compressor.decompress(sent, ctx) is tensor


def test_tensors_already_in_the_wire_dtype_are_not_copied():
    half = torch.ones(3, dtype=torch.float16)
    sent, ctx = Compression.fp16.compress(half)
    assert sent is half and Compression.fp16.decompress(sent, ctx) is half
    # Casting between the two 16-bit formats is still a cast.
    sent, ctx = Compression.bf16.compress(half)
    assert sent.dtype == torch.bfloat16 and Compression.bf16.decompress(sent, ctx).dtype == \
        torch.float16
