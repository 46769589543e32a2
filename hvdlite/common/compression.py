"""Horovod's compression interface, shared by the framework bindings: a
compressor's compress(tensor) returns (tensor to send, context) and
decompress(tensor, context) undoes it. Each binding makes its
hvd.Compression with cast_compression(), saying what "floating" and "cast"
mean for its tensors (hvdlite/torch/compression.py, tensorflow/, jax/)."""


class Compressor:
    """Base class: subclasses override compress and decompress."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """Sends tensors as they are."""


class CastCompressor(Compressor):
    """Sends floating-point tensors as `wire_dtype`, casts back afterwards;
    other dtypes pass unchanged. cast_compression() subclasses it with a
    binding's is_floating(dtype) and cast(tensor, dtype)."""
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if cls.is_floating(tensor.dtype) and tensor.dtype != cls.wire_dtype:
            return cls.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else cls.cast(tensor, ctx)


def cast_compression(is_floating, cast, fp16, bf16, module):
    """Horovod's hvd.Compression namespace (none, fp16, bf16) for the binding
    in `module` whose dtypes answer is_floating(dtype), whose tensors convert
    with cast(tensor, dtype), and whose half types are fp16 and bf16."""
    base = type("CastCompressor", (CastCompressor,), {
        "is_floating": staticmethod(is_floating), "cast": staticmethod(cast),
        "__module__": module})
    fp16_class = type("FP16Compressor", (base,), {
        "wire_dtype": fp16, "__doc__": "float16 on the wire: 10 bits of mantissa, range up "
                                       "to 65504.", "__module__": base.__module__})
    bf16_class = type("BF16Compressor", (base,), {
        "wire_dtype": bf16, "__doc__": "bfloat16 on the wire: float32's range, 7 bits of "
                                       "mantissa.", "__module__": base.__module__})
    return type("Compression", (), {
        "none": NoneCompressor, "fp16": fp16_class, "bf16": bf16_class, "__module__": module,
        "__doc__": "hvd.Compression.none / .fp16 (Horovod's names) and .bf16."})
