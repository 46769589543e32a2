"""Large fused allreduces, which the executor feeds to the transport in
pipeline chunks: every dtype and op, scale factors, member boundaries that do
not line up with chunks; checked against NumPy on the same inputs."""
import numpy as np

import hvdlite.numpy as hvd

# Element counts: a few MiB in all, with odd sizes so that tensors straddle chunks.
COUNTS = [300_001, 17, 262_144, 5, 700_003]
DTYPES = [np.float32, np.float64, np.int32, np.float16]


def inputs(rank, dtype, seed):
    rng = np.random.default_rng(seed * 100 + rank)
    return [rng.integers(-3, 4, size=n).astype(dtype) for n in COUNTS]


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    for d, dtype in enumerate(DTYPES):
        for o, (op, name) in enumerate([(hvd.Sum, "sum"), (hvd.Max, "max"), (hvd.Average, "avg")]):
            if op == hvd.Average and dtype == np.int32:
                continue
            seed = d * 10 + o
            mine = inputs(rank, dtype, seed)
            every = [inputs(r, dtype, seed) for r in range(size)]
            # Scales whose product is not 1, so that a dropped or doubled scale
            # shows; integer-valued for int32 (whose scaling rounds).
            pre, post = (1.0, 1.0) if op != hvd.Sum else (3.0, 2.0) if dtype == np.int32 else (3.0, 0.5)
            handles = [hvd.allreduce_async(x, op=op, name=f"{name}.{dtype.__name__}.{k}",
                                           prescale_factor=pre, postscale_factor=post)
                       for k, x in enumerate(mine)]
            for k, h in enumerate(handles):
                got = hvd.synchronize(h)
                stack = np.stack([e[k].astype(np.float64) for e in every])
                if op == hvd.Sum:
                    want = stack.sum(0) * pre * post
                elif op == hvd.Max:
                    want = stack.max(0)
                else:
                    want = stack.mean(0)
                assert got.dtype == dtype and got.shape == (COUNTS[k],), (got.dtype, got.shape)
                tolerance = 1e-2 if dtype == np.float16 else 1e-6
                assert np.allclose(got.astype(np.float64), want, atol=tolerance), \
                    (name, dtype, k, np.flatnonzero(~np.isclose(got, want))[:5])
    print(f"rank {rank}: pipelined allreduce OK")
    hvd.shutdown()


if __name__ == "__main__":
    main()
