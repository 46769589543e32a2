"""Run by tests/torch/test_one_call.py on 2 ranks: allreduce_'s one-call path
(Note [In-place allreduce of a torch tensor in one call] in
csrc/python/bind_collectives.cc) takes the common calls on CPU tensors and
gives the general path's bytes; every call it declines still gets the
general path's result or error."""
import warnings

import torch

import hvdlite.torch as hvd
from hvdlite.torch import async_ops
from hvdlite.torch.tensors import DTYPE_CODES

warnings.filterwarnings("ignore", "Sparse CSR tensor support is in beta")
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def data(tag, rank, dtype):
    values = torch.arange(15, dtype=torch.float64).reshape(5, 3) % 7 + rank + len(tag) % 3
    return values.to(dtype)


def outcome(call):
    """("ok", result bytes, dtype) or ("raised", type, message)."""
    try:
        out = call()
    except Exception as error:  # compared between the two paths, not judged
        return ("raised", type(error).__name__, str(error))
    return ("ok", out.view(torch.uint8).flatten().tolist() if out.numel() else [], str(out.dtype))


def fast(*args):
    return async_ops._allreduce_tensor(*args)


def check_taken(rank):
    ops = [None, hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product, 0]
    for dtype in DTYPE_CODES:
        for op in ops:
            tag = f"one_call.{dtype}.{op!r}"
            quick, slow = data(tag, rank, dtype), data(tag, rank, dtype)
            scales = (0.5, 2.0) if dtype in FLOATS else (1.0, 1.0)
            took = outcome(lambda: fast(quick, tag, op, *scales, hvd.global_process_set, None))
            general = outcome(lambda: async_ops._allreduce_now(
                slow, True, None, tag, op, *scales, hvd.global_process_set))
            if took != general:
                raise AssertionError(f"{tag}: one call {took[:2]} != general path {general[:2]}")
    parameter = torch.nn.Parameter(torch.full((3,), rank + 1.0))
    assert fast(parameter, "p", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None) is parameter
    assert parameter.detach().tolist() == [3.0] * 3, parameter
    scalar = torch.tensor(rank + 1.0)
    assert fast(scalar, "scalar", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None) is scalar
    assert scalar.item() == 3.0


class MyTensor(torch.Tensor):
    pass


def check_declined():
    base = torch.ones(4)
    declined = {
        "average=": (base, "d.avg", None, 1.0, 1.0, hvd.global_process_set, True),
        "Adasum": (base, "d.adasum", hvd.Adasum, 1.0, 1.0, hvd.global_process_set, None),
        "op as text": (base, "d.text", "sum", 1.0, 1.0, hvd.global_process_set, None),
        "int scale": (base, "d.int", hvd.Sum, 2, 1.0, hvd.global_process_set, None),
        "no name": (base, None, hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
        "empty name": (base, "", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
        "no set": (base, "d.noset", hvd.Sum, 1.0, 1.0, None, None),
        "strided": (torch.zeros(8)[::2], "d.strided", hvd.Sum, 1.0, 1.0,
                    hvd.global_process_set, None),
        "subclass": (base.as_subclass(MyTensor), "d.sub", hvd.Sum, 1.0, 1.0,
                     hvd.global_process_set, None),
        "sparse": (torch.eye(3).to_sparse(), "d.sparse", hvd.Sum, 1.0, 1.0,
                   hvd.global_process_set, None),
        "sparse CSR": (torch.eye(3).to_sparse_csr(), "d.csr", hvd.Sum, 1.0, 1.0,
                       hvd.global_process_set, None),
        "complex": (torch.ones(2, dtype=torch.complex64), "d.cx", hvd.Sum, 1.0, 1.0,
                    hvd.global_process_set, None),
        "meta": (torch.ones(2, device="meta"), "d.meta", hvd.Sum, 1.0, 1.0,
                 hvd.global_process_set, None),
        "17 dimensions": (torch.ones([1] * 17), "d.dims", hvd.Sum, 1.0, 1.0,
                          hvd.global_process_set, None),
        "list": ([1.0, 2.0], "d.list", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
    }
    for what, args in declined.items():
        if fast(*args) is not None:
            raise AssertionError(f"one call took the {what} case, which needs the general path")


def check_allreduce_itself(rank, size):
    x = torch.full((4,), rank + 1.0)
    assert hvd.allreduce_(x, name="itself.avg", average=True) is x
    assert x.tolist() == [(size + 1) / 2] * 4, x
    y = torch.full((4,), rank + 1.0)
    assert hvd.allreduce_(y, op=hvd.Sum) is y and y.tolist() == [3.0] * 4  # unnamed
    strided = torch.zeros(4, 2)[:, 0]
    strided += rank + 1
    assert hvd.allreduce_(strided, name="itself.strided", op=hvd.Sum) is strided
    assert strided.tolist() == [3.0] * 4
    try:
        hvd.allreduce_(torch.ones(2, dtype=torch.complex64), op=hvd.Sum, name="itself.cx")
    except ValueError as error:
        assert "complex64" in str(error), error
    else:
        raise AssertionError("allreduce_ took a complex64 tensor")


def check_allreduce_into_a_new_tensor(rank):
    """The synchronous allreduce reduces a contiguous copy in one call: the
    input is unchanged, the result right, also for a strided input."""
    for tensor in (torch.full((4,), rank + 1.0), torch.full((4, 2), rank + 1.0)[:, 0]):
        before = tensor.clone()
        got = hvd.allreduce(tensor, name=f"copy.{tensor.is_contiguous()}", op=hvd.Sum)
        assert got.tolist() == [3.0] * 4 and torch.equal(tensor, before), (got, tensor)
    try:  # the general path's error, as before
        hvd.allreduce(torch.eye(2).to_sparse(), name="copy.sparse", op=hvd.Sum)
    except ValueError as error:
        assert "sparse_coo tensors are not supported" in str(error), error
    else:
        raise AssertionError("allreduce took a sparse tensor")
    graded = torch.full((2,), rank + 1.0, requires_grad=True)
    hvd.allreduce(graded, name="copy.grad", op=hvd.Sum).sum().backward()
    assert graded.grad.tolist() == [2.0, 2.0], graded.grad  # autograd's path, as before


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    check_taken(rank)
    check_declined()
    check_allreduce_itself(rank, size)
    check_allreduce_into_a_new_tensor(rank)
    hvd.shutdown()
    print(f"rank {rank}: one call OK", flush=True)


if __name__ == "__main__":
    main()
