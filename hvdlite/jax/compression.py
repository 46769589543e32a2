"""Compression for allreduce on JAX arrays, Horovod's interface: compress(x)
returns (array to send, context), decompress(x, context) undoes it. The casts
are jnp operations, so inside jax.jit they join the compiled step and the host
sees the narrower array. Compression.powersgd(...) is DistributedOptimizer's
low-rank compression (hvdlite/jax/powersgd.py)."""
import jax.numpy as jnp

from hvdlite.common.compression import cast_compression
from hvdlite.jax.powersgd import PowerSGD

Compression = cast_compression(lambda dtype: jnp.issubdtype(dtype, jnp.floating),
                               lambda tensor, dtype: tensor.astype(dtype),
                               jnp.float16, jnp.bfloat16, __name__)
FP16Compressor = Compression.fp16
BF16Compressor = Compression.bf16
Compression.powersgd = PowerSGD
