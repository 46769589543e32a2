"""Bad requests through every front door (hvdlite._core, hvdlite.numpy,
hvdlite.torch, the C API of libhvdlite through ctypes) fail the call in the
caller's thread with an error naming the tensor and the bad value; nothing is
queued, no rank aborts, and the next collectives work on every rank."""
import ctypes
import threading

import numpy as np
import torch

import hvdlite.numpy as hvd
import hvdlite.torch as hvd_torch
from hvdlite.common import basics
from hvdlite.common.ops import DataType, OpType, ReduceOp
from c_api import DONE, Request, library  # noqa: E402 (the worker's folder)


def refused(call, *needles, error_type=ValueError):
    try:
        call()
    except error_type as error:
        text = str(error)
        for needle in needles:
            assert needle in text, f"'{needle}' not in: {text}"
        return
    raise AssertionError(f"accepted, though it should fail with {needles}")


def through_core(core, size):
    x = np.ones(4, np.float32)
    fields = dict(input=x, output=x, dtype=int(DataType.FLOAT32), shape=x.shape)
    allreduce = int(OpType.ALLREDUCE)
    refused(lambda: core.enqueue(op=99, name="core.op", **fields),
            "request 'core.op': unknown op code 99; use one of 0 (allreduce)")
    refused(lambda: core.enqueue(op=allreduce, name="core.reduce", reduce_op=99, **fields),
            "allreduce of 'core.reduce': unknown reduce op code 99", "5 (adasum)")
    refused(lambda: core.enqueue(op=allreduce, name="core.reduce", reduce_op=-1, **fields),
            "unknown reduce op code -1")
    refused(lambda: core.enqueue(op=allreduce, name="core.dtype", input=x, output=x, dtype=42,
                                 shape=x.shape), "allreduce of 'core.dtype': unknown dtype code 42")
    refused(lambda: core.enqueue(op=int(OpType.BROADCAST), name="core.root", root_rank=-2,
                                 **fields), "broadcast of 'core.root': root_rank -2 is negative")
    refused(lambda: core.enqueue(op=allreduce, name="core.scale", prescale=float("nan"),
                                 **fields), "prescale factor nan is not a finite number")
    refused(lambda: core.enqueue(op=allreduce, name="core.null", input=None, output=x,
                                 dtype=int(DataType.FLOAT32), shape=x.shape),
            "input is NULL for a tensor of shape [4]")
    refused(lambda: core.enqueue(op=int(OpType.REMOVE_PROCESS_SET), name="core.remove"),
            "process set 0 cannot be removed")
    # Keywords only, named as api.h's fields.
    refused(lambda: core.enqueue(allreduce, "core.positional"), "keyword arguments only",
            error_type=TypeError)
    refused(lambda: core.enqueue(op=allreduce, name="core.kw", reduce=1, **fields),
            "unexpected keyword argument 'reduce'", error_type=TypeError)
    refused(lambda: core.enqueue(op=allreduce, name="core.kw", root_rank="0", **fields),
            "root_rank must be an int, not str", error_type=TypeError)
    refused(lambda: core.enqueue(name="core.kw", **fields), "missing required keyword argument 'op'",
            error_type=TypeError)
    # run() queues and waits in one call, so it takes no output it would have to hand back.
    refused(lambda: core.run(op=int(OpType.ALLGATHER), name="core.run", input=x, dtype=int(DataType.FLOAT32),
                             shape=x.shape),
            "run(): the output of allgather 'core.run' is sized by negotiation (pass output and output_bytes, or use enqueue() and wait()",
            error_type=TypeError)
    refused(lambda: core.run(op=allreduce, name="core.run", reduce_op=99, **fields),
            "allreduce of 'core.run': unknown reduce op code 99")
    # Semantic checks stay in core/entry_validation.cc, still in the caller's thread.
    refused(lambda: core.enqueue(op=int(OpType.BROADCAST), name="core.root", root_rank=size + 3,
                                 **fields),
            f"broadcast of 'core.root': root_rank {size + 3} is not a member of process set 0")


def through_bindings(size):
    x = np.ones(4, np.float32)
    refused(lambda: hvd.allreduce(x, op=99, name="numpy.op"), "op=99 is not a reduce op")
    refused(lambda: hvd.allreduce(np.ones(4, np.int32), op=hvd.Adasum, name="numpy.adasum"),
            "allreduce of 'numpy.adasum'", "floating-point")
    refused(lambda: hvd.broadcast(x, root_rank=size, name="numpy.root"),
            f"broadcast of 'numpy.root': root_rank {size} is not a member")
    refused(lambda: hvd.alltoall(np.ones(4, np.float32), splits=[4], name="numpy.splits"),
            "alltoall of 'numpy.splits': splits has 1 entries but the process set has")
    refused(lambda: hvd.allreduce(x, prescale_factor="big", name="numpy.scale"),
            "prescale_factor must be a number, got 'big'")
    t = torch.ones(4)
    refused(lambda: hvd_torch.allreduce(t.int(), op=ReduceOp.Adasum, name="torch.adasum"),
            "allreduce of 'torch.adasum'", "floating-point")
    refused(lambda: hvd_torch.broadcast_(t, root_rank=-1, name="torch.root"),
            "broadcast of 'torch.root': root_rank -1 is negative")
    refused(lambda: hvd_torch.alltoall(t, splits=[1, 1, 1, 1, 1][:size + 1], name="torch.splits"),
            f"alltoall of 'torch.splits': splits has {size + 1} entries")
    refused(lambda: hvd_torch.reducescatter(t, op=42, name="torch.op"), "op=42 is not a reduce op")


def through_c_api(core, rank, size):
    lib = library(core)  # checks that its Request matches api.h's (it once lacked the call site)
    finished = threading.Event()
    statuses = []

    @DONE
    def done(user, result):
        statuses.append(result.contents.status)
        finished.set()

    x = np.full(3, rank + 1.0, np.float64)
    shape = (ctypes.c_int64 * 1)(3)

    def request(tensor, **changes):
        fields = dict(op=int(OpType.ALLREDUCE), name=tensor.encode(), dtype=int(DataType.FLOAT64),
                      shape=shape, ndim=1, input=x.ctypes.data, output=x.ctypes.data,
                      reduce_op=int(ReduceOp.Sum), prescale=1.0, postscale=1.0, device=-1)
        fields.update(changes)
        return Request(**fields)

    error = ctypes.create_string_buffer(512)
    for bad, needle in [(dict(reduce_op=99), b"allreduce of 'c.bad': unknown reduce op code 99"),
                        (dict(op=-3), b"request 'c.bad': unknown op code -3"),
                        (dict(dtype=len(DataType)),  # the first code past the list
                         f"allreduce of 'c.bad': unknown dtype code {len(DataType)}".encode()),
                        (dict(ndim=-1), b"shape: negative length -1"),
                        (dict(op=int(OpType.ALLTOALL), num_splits=2), b"splits is NULL"),
                        (dict(name=None), b"has no tensor name")]:
        code = lib.hvdlite_enqueue(ctypes.byref(request("c.bad", **bad)), None, done, None,
                                   error, len(error))
        assert code == 1, (bad, code)  # HVDLITE_INVALID_ARGUMENT
        assert needle in error.value, (needle, error.value)
    assert not statuses, "a refused request called back"
    good = request("c.good")
    assert lib.hvdlite_enqueue(ctypes.byref(good), None, done, None, error, len(error)) == 0
    assert finished.wait(60), "the C API's allreduce never completed"
    assert statuses == [0], statuses
    assert np.array_equal(x, np.full(3, size * (size + 1) / 2)), x


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    core = basics.core()
    through_core(core, size)
    through_bindings(size)
    through_c_api(core, rank, size)
    # The job goes on, on every rank and through every binding.
    total = size * (size + 1) / 2
    got = hvd.allreduce(np.full(3, rank + 1.0), op=hvd.Sum, name="after")
    assert np.array_equal(got, np.full(3, total)), got
    got = hvd_torch.allreduce(torch.full((3,), rank + 1.0), op=hvd_torch.Sum, name="after.torch")
    assert torch.equal(got, torch.full((3,), total)), got
    print("bad requests OK", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
