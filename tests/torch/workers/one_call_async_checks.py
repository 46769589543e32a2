"""Run by tests/torch/test_one_call.py on 2 ranks: allreduce_async(_) in one
call (Note [Asynchronous allreduce of a tensor in one call] in
csrc/python/torch_one_call.cc) takes the common calls on CPU tensors, gives
the general path's bytes or error for every dtype and op, returns handles
that poll() and synchronize() take like the general path's, keeps its
tensors alive until synchronize, and declines what the general path must
judge, which then still gives the right result."""
import gc

import torch

import hvdlite.numpy
import hvdlite.torch as hvd
from hvdlite.common import requests as hvd_requests
from hvdlite.torch import collectives, core_calls
from hvdlite.torch.tensors import DTYPE_CODES

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class Counted:
    """core_calls.allreduce_tensor_async, counting the calls it took (did not
    decline): callers read it as core_calls' attribute, so replacing it there
    reaches every one."""

    def __init__(self):
        self.original = core_calls.allreduce_tensor_async
        self.taken = 0

    def __call__(self, *args):
        started = self.original(*args)
        self.taken += started is not None
        return started


def data(tag, rank, dtype):
    values = torch.arange(15, dtype=torch.float64).reshape(5, 3) % 7 + rank + len(tag) % 3
    return values.to(dtype)


def outcome(call):
    """("ok", result bytes, dtype, shape, is the input) or ("raised", type, message)."""
    try:
        out, tensor = call()
    except Exception as error:  # compared between the two paths, not judged
        return ("raised", type(error).__name__, str(error))
    return ("ok", out.view(torch.uint8).flatten().tolist(), str(out.dtype), tuple(out.shape),
            out is tensor)


def one_call(tensor, in_place, name, op, prescale, postscale):
    """The public allreduce_async(_), polled until done, then synchronized."""
    start = hvd.allreduce_async_ if in_place else hvd.allreduce_async
    handle = start(tensor, name=name, op=op, prescale_factor=prescale, postscale_factor=postscale)
    while not hvd.poll(handle):
        pass
    return hvd.synchronize(handle), tensor


def general(tensor, in_place, name, op, prescale, postscale):
    """The general path's allreduce_async(_), as before the one call."""
    op, prescale, postscale, set_id = hvd_requests.reduction(op, None, prescale, postscale,
                                                             hvd.global_process_set)
    entry, (finish, payload) = collectives._allreduce_start(tensor, in_place, name, op, prescale,
                                                          postscale, set_id)
    handle = hvd_requests.add_handle(hvd_requests.TORCH, (entry,), finish, payload)
    return hvd.synchronize(handle), tensor


def check_taken(rank, counted):
    ops = [None, hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product, 0]
    expected = 0
    for dtype in DTYPE_CODES:
        for op in ops:
            scales = (0.5, 2.0) if dtype in FLOATS else (1.0, 1.0)
            for in_place in (True, False):
                tag = f"async.{dtype}.{op!r}.{in_place}"
                quick, slow = data(tag, rank, dtype), data(tag, rank, dtype)
                got = outcome(lambda: one_call(quick, in_place, tag, op, *scales))
                want = outcome(lambda: general(slow, in_place, tag, op, *scales))
                expected += got[0] == "ok"
                if got != want:
                    raise AssertionError(f"{tag}: one call {got} != general path {want}")
                if not in_place and not torch.equal(quick, data(tag, rank, dtype)):
                    raise AssertionError(f"{tag}: allreduce_async changed its input")
    if counted.taken != expected:
        raise AssertionError(f"the one call took {counted.taken} calls of {expected}")


def check_handles(rank, counted):
    """Many in flight, synchronized out of order; a handle is its binding's;
    unreferenced tensors stay alive until synchronize."""
    before = counted.taken
    tensors = [torch.full((4,), float(rank + i)) for i in range(20)]
    handles = [hvd.allreduce_async_(t, name=f"async.many.{i}", op=hvd.Sum)
               for i, t in enumerate(tensors)]
    for i in reversed(range(20)):
        assert hvd.synchronize(handles[i]) is tensors[i]
        assert tensors[i].tolist() == [float(2 * i + 1)] * 4, tensors[i]
    handle = hvd.allreduce_async(torch.full((1000,), rank + 1.0), name="async.alive", op=hvd.Sum)
    in_place = hvd.allreduce_async_(torch.full((1000,), rank + 1.0), name="async.alive_",
                                    op=hvd.Sum)
    gc.collect()
    assert hvd.synchronize(handle).tolist() == [3.0] * 1000
    assert hvd.synchronize(in_place).tolist() == [3.0] * 1000
    assert counted.taken == before + 22, counted.taken
    handle = hvd.allreduce_async_(torch.ones(2), name="async.binding", op=hvd.Sum)
    try:
        hvdlite.numpy.synchronize(handle)
    except ValueError as error:
        assert "hvdlite.torch" in str(error), error
    else:
        raise AssertionError("hvdlite.numpy synchronized a torch handle")
    assert hvd.synchronize(handle).tolist() == [2.0, 2.0]
    # one rank's call in one call, the other's through the general path: one collective
    mixed = torch.full((3,), rank + 1.0)
    if rank == 0:
        got, _ = one_call(mixed, True, "async.mixed", hvd.Sum, 1.0, 1.0)
    else:
        got, _ = general(mixed, True, "async.mixed", hvd.Sum, 1.0, 1.0)
    assert got.tolist() == [3.0] * 3, got


def check_declined(rank, counted):
    """What the one call declines it leaves untouched, and the general path
    gives the right result."""
    base = torch.ones(4)
    declined = {
        "average=": (base, "d.avg", None, 1.0, 1.0, hvd.global_process_set, True),
        "Adasum": (base, "d.adasum", hvd.Adasum, 1.0, 1.0, hvd.global_process_set, None),
        "int scale": (base, "d.int", hvd.Sum, 2, 1.0, hvd.global_process_set, None),
        "no set": (base, "d.noset", hvd.Sum, 1.0, 1.0, None, None),
        "strided": (torch.zeros(8)[::2], "d.strided", hvd.Sum, 1.0, 1.0,
                    hvd.global_process_set, None),
        "complex": (torch.ones(2, dtype=torch.complex64), "d.cx", hvd.Sum, 1.0, 1.0,
                    hvd.global_process_set, None),
        "meta": (torch.ones(2, device="meta"), "d.meta", hvd.Sum, 1.0, 1.0,
                 hvd.global_process_set, None),
        "sparse": (torch.eye(3).to_sparse(), "d.sparse", hvd.Sum, 1.0, 1.0,
                   hvd.global_process_set, None),
        "list": ([1.0, 2.0], "d.list", hvd.Sum, 1.0, 1.0, hvd.global_process_set, None),
    }
    for what, (tensor, *arguments) in declined.items():
        for in_place in (True, False):
            if counted.original(in_place, tensor, *arguments) is not None:
                raise AssertionError(f"the async one call took the {what} case")
    graded = torch.ones(2, requires_grad=True)
    assert counted.original(False, graded, "d.grad", hvd.Sum, 1.0, 1.0, hvd.global_process_set,
                            None) is None
    before = counted.taken
    x = torch.full((4,), rank + 1.0)
    assert hvd.synchronize(hvd.allreduce_async_(x, average=True, name="fb.avg")) is x
    assert x.tolist() == [1.5] * 4, x
    strided = torch.zeros(4, 2)[:, 0]
    strided += rank + 1
    assert hvd.synchronize(hvd.allreduce_async_(strided, name="fb.strided", op=hvd.Sum)) \
        is strided
    assert strided.tolist() == [3.0] * 4, strided
    got = hvd.synchronize(hvd.allreduce_async(torch.full((2,), rank + 1.0), name="fb.noset",
                                              op=hvd.Sum, process_set=None, prescale_factor=2))
    assert got.tolist() == [6.0, 6.0], got
    got = hvd.synchronize(hvd.allreduce_async(graded * (rank + 1), name="fb.grad", op=hvd.Sum))
    assert got.tolist() == [3.0, 3.0], got
    assert counted.taken == before, "the one call took a case it declines"


def main():
    hvd.init()
    rank = hvd.rank()
    counted = Counted()
    core_calls.allreduce_tensor_async = counted
    check_taken(rank, counted)
    check_handles(rank, counted)
    check_declined(rank, counted)
    hvd.shutdown()
    print(f"rank {rank}: async one call OK", flush=True)


if __name__ == "__main__":
    main()
