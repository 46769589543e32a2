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
