"""Horovod's compression interface, shared by the framework bindings: a
compressor's compress(tensor) returns (tensor to send, context) and
decompress(tensor, context) undoes it. The casting compressors are
framework-specific (hvdlite/torch/compression.py, hvdlite/tensorflow/...)."""


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
    other dtypes pass unchanged. A binding subclasses it with what "floating"
    and "cast" mean for its tensors (is_floating, cast)."""
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if cls.is_floating(tensor.dtype) and tensor.dtype != cls.wire_dtype:
            return cls.cast(tensor, cls.wire_dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else cls.cast(tensor, ctx)


def cast_compression(base, fp16, bf16, doc):
    """Horovod's hvd.Compression namespace (none, fp16, bf16) for a binding
    whose CastCompressor subclass is `base` and whose half types are fp16, bf16."""
    fp16_class = type("FP16Compressor", (base,), {
        "wire_dtype": fp16, "__doc__": "float16 on the wire: 10 bits of mantissa, range up "
                                       "to 65504.", "__module__": base.__module__})
    bf16_class = type("BF16Compressor", (base,), {
        "wire_dtype": bf16, "__doc__": "bfloat16 on the wire: float32's range, 7 bits of "
                                       "mantissa.", "__module__": base.__module__})
    return type("Compression", (), {"none": NoneCompressor, "fp16": fp16_class,
                                    "bf16": bf16_class, "__doc__": doc,
                                    "__module__": base.__module__})
