"""One handle table for every binding: a handle is valid only in the binding
that made it, and refused, naming both bindings, anywhere else."""
import numpy as np
import torch

import hvdlite.numpy as hvd
import hvdlite.torch as hvd_torch


def refused(call, *needles):
    try:
        call()
    except ValueError as error:
        for needle in needles:
            assert needle in str(error), f"'{needle}' not in: {error}"
        return
    raise AssertionError(f"accepted, though it should fail with {needles}")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    total = size * (size + 1) / 2
    from_torch = hvd_torch.allreduce_async(torch.full((4,), rank + 1.0), op=hvd.Sum, name="t")
    from_numpy = hvd.allreduce_async(np.full(4, rank + 1.0), op=hvd.Sum, name="n")
    grouped = hvd_torch.grouped_allreduce_async([torch.ones(2), torch.ones(3)], op=hvd.Sum,
                                                name="g")
    assert len({from_torch, from_numpy, grouped}) == 3, "two bindings handed out one number"
    refused(lambda: hvd.synchronize(from_torch),
            f"handle {from_torch} was returned by hvdlite.torch, not hvdlite.numpy",
            "hvdlite.torch.synchronize()")
    refused(lambda: hvd.poll(grouped), "was returned by hvdlite.torch, not hvdlite.numpy")
    refused(lambda: hvd_torch.synchronize(from_numpy),
            f"handle {from_numpy} was returned by hvdlite.numpy, not hvdlite.torch")
    refused(lambda: hvd_torch.poll(from_numpy), "was returned by hvdlite.numpy")
    # A refusal leaves the handle to its own binding.
    assert torch.equal(hvd_torch.synchronize(from_torch), torch.full((4,), total))
    assert np.array_equal(hvd.synchronize(from_numpy), np.full(4, total))
    reduced = hvd_torch.synchronize(grouped)
    assert [r.tolist() for r in reduced] == [[size] * 2, [size] * 3], reduced
    refused(lambda: hvd.synchronize(from_numpy), f"handle {from_numpy} is unknown")
    refused(lambda: hvd_torch.synchronize(from_numpy), f"handle {from_numpy} is unknown")
    print("binding handles OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
