"""The core's CUDA path where the fake GPU (tests/common/fake_gpu) behaves like
a real one: streams run later, collectives meet across processes, NCCL can be
aborted. One mode per run (argv[1]); prints "<mode> OK".

  ordering  results read through the framework's stream are right, and read
            before it waited they are stale (so a missing wait is seen);
            the number of CUDA calls of one fused batch
  oom       one rank's GPU out of memory fails that op on every rank, naming
            the rank; the next collective works; the same with a binding's
            output allocator (core.set_device_allocator) that raises
  join      a rank that joins before its first CUDA collective binds NCCL to
            its own GPU (local rank), not the lowest rank's
  scale     float16/bfloat16 average with pre/post scale, a broadcast in a
            sub-set with a non-zero root
  hierarchical  HVDLITE_HIERARCHICAL_ALLREDUCE on 2 fake hosts x 2 ranks
  hier_empty    the same: zero-element allreduces (no memory at all, and
            fused beside others) are right on every rank and cost no NCCL call
  hier_flat_shutdown  the same: shutdown while a flat broadcast still runs
            waits for it before finalizing NCCL (fake_nccl_busy_finalizes),
            quickly and cleanly (no abort)
  hier_flat_hang  the same: a flat broadcast that hangs at shutdown is found
            by the watchdog (HVDLITE_NCCL_TIMEOUT_SECONDS) and aborted
  overlap   an allreduce enqueued without a ready event waits only for what
            was queued before it, finishing while a long kernel queued on
            the producer's stream right after still runs; enqueue leaves the
            caller's current device as it was
  fused_rs  uneven reducescatters queued together, their inputs written on
            the framework's stream: fused (Note [Fused reducescatter] in
            csrc/core/fusion.cc), each rank reads its rows of every member on
            that stream, float Average with scales folded into NCCL and
            integer Sum with a postscale finished on the host, no race
  killed    the last rank dies mid-allreduce: the others fail, naming it,
            and their streams do not hang
  hang      the last rank's NCCL kernel hangs (FAKE_NCCL_HANG_AFTER): every
            rank fails within HVDLITE_NCCL_TIMEOUT_SECONDS
"""
import ctypes
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

MODE = sys.argv[1]
RANK = int(os.environ["HVDLITE_RANK"])
if MODE.startswith("hier"):  # 2 fake hosts of 2 ranks: set before init()
    os.environ.update(HVDLITE_HOSTNAME=f"fakehost{RANK // 2}", HVDLITE_LOCAL_RANK=str(RANK % 2),
                      HVDLITE_LOCAL_SIZE="2", HVDLITE_CROSS_RANK=str(RANK // 2), HVDLITE_CROSS_SIZE="2")

import hvdlite.common.basics as basics  # noqa: E402
from hvdlite.common import init  # noqa: E402
from hvdlite.common.exceptions import HvdliteInternalError  # noqa: E402
from hvdlite.common.ops import DataType, OpType, ReduceOp  # noqa: E402
from fake_device import (CODES, DEVICE_TO_HOST, HOST_TO_DEVICE, Caller, assert_no_races,  # noqa: E402
                         cudart, current_device, device_array, nccl, new_event, new_stream, pinned, read_on)

SIZE = int(os.environ["HVDLITE_SIZE"])
SUBSET = list(range(1, SIZE))  # "scale": a process set without rank 0 (id 1)
init(process_sets=[SUBSET] if MODE == "scale" and SIZE > 2 else None)
core = basics.core()
rank, size = basics.rank(), basics.size()
assert rank == RANK
DEVICE = int(os.environ.get("HVDLITE_LOCAL_RANK", rank))  # one fake GPU per local rank
cudart.cudaSetDevice(DEVICE)
STREAM = new_stream()
caller = Caller(DEVICE, STREAM)
start, finish = caller.start, caller.finish


def ordering():
    # The producer: a copy on the framework's stream writes the input later,
    # behind a 0.3 s kernel (so that the stale read below is before the result
    # even on a loaded machine); NCCL must wait for the ready event recorded
    # after it.
    n = 1 << 14
    source = pinned(n, np.float32)
    source[:] = rank + 1
    x = device_array(n, np.float32)
    x[:] = -1000.0
    event = new_event()
    cudart.fake_cuda_fill_later(STREAM, x.ctypes.data, n, -1000.0, 300000)
    cudart.cudaMemcpyAsync(x.ctypes.data, source.ctypes.data, x.nbytes, HOST_TO_DEVICE, STREAM)
    cudart.cudaEventRecord(event, STREAM)
    handle = start(OpType.ALLREDUCE, "ordered", x, ready_event=event, reduce_op=int(ReduceOp.Sum))
    core.wait(handle, int(DataType.FLOAT32))
    stale = x[0]  # queued, not finished: the fake's kernels take a while
    cudart.cudaStreamSynchronize(STREAM)
    want = size * (size + 1) / 2
    assert np.all(x == want), (x[:4], want)
    assert stale != want, "the result was there before the stream waited for it: the fake is not async"

    # One fused batch of k gradients from one stream: one ready wait, one done
    # event, one stream wait, k copies in and k out, one cudaSetDevice.
    k = 16
    grads = [device_array(100 + i, np.float32) for i in range(k)]
    for g in grads:
        g[:] = rank
    # A first round grows the fusion buffer; the second is counted.
    for round_ in range(2):
        cudart.cudaStreamSynchronize(STREAM)
        before_cuda, before_nccl = cudart.fake_cuda_calls(), nccl.fake_nccl_calls()
        before_created = cudart.fake_cuda_events_created()
        handles = [start(OpType.ALLREDUCE, f"fused.{i}", g, reduce_op=int(ReduceOp.Sum))
                   for i, g in enumerate(grads)]
        for h in handles:
            core.wait(h, int(DataType.FLOAT32))
        if round_ == 0:
            cudart.cudaStreamSynchronize(STREAM)
            for g in grads:
                g[:] = rank
    # Events created because the pool had no spare one yet are not counted:
    # how many depends on when the watchdog (every 0.1 s) last returned
    # round 0's events, which on a loaded machine can be after round 1.
    calls = cudart.fake_cuda_calls() - before_cuda - (cudart.fake_cuda_events_created() - before_created)
    nccl_calls = nccl.fake_nccl_calls() - before_nccl
    cudart.cudaStreamSynchronize(STREAM)
    for g in grads:
        assert np.all(g == size * (size - 1) / 2), g[:4]
    batches = nccl_calls  # one ncclAllReduce per batch
    # Per member a device-to-device copy in and out (this runtime, 12.4, has
    # no batched copies), and at enqueue the capture check and the ready event
    # (Note [Ready at enqueue]); per batch cudaSetDevice, one ready wait,
    # record (done), and the consumer's wait (done) when results are asked
    # for. A wait per member at enqueue and per member at the result would
    # add 2 more per member.
    assert 1 <= batches <= k and calls <= 4 * k + 12 * batches, (calls, batches, k)
    print(f"rank {rank}: {k} fused gradients cost {calls} CUDA calls in {batches} batch(es)", flush=True)


def oom():
    if rank == size - 1:
        os.environ["FAKE_CUDA_MALLOC_FAIL_BYTES"] = str(1 << 20)  # read at each cudaMalloc
    big = np.full((1 << 17, 4), rank, np.float32)  # 2 MiB: its allgather output is over the limit
    try:
        finish(start(OpType.ALLGATHER, "too_big", big))
        raise AssertionError("the allgather succeeded")
    except HvdliteInternalError as error:
        text = str(error)
        assert "allgather of 'too_big' failed: out of GPU memory on rank %d" % (size - 1) in text, text
        if rank == size - 1:
            assert "out of memory" in text and "CUDA error 2" in text, text
    os.environ.pop("FAKE_CUDA_MALLOC_FAIL_BYTES", None)
    x = np.full(8, rank + 1.0, np.float32)
    finish(start(OpType.ALLREDUCE, "after_oom", x, reduce_op=int(ReduceOp.Sum)))
    assert np.all(x == size * (size + 1) / 2), x
    framework_allocator()


def read(output, shape):
    """A DeviceOutput's float32 values (fake "device" memory is host memory)."""
    raw = (ctypes.c_char * output.nbytes).from_address(output.data_ptr)
    return np.frombuffer(raw, dtype=np.float32).reshape(shape).copy()


def framework_allocator():
    # Note [Outputs from the framework's allocator] (csrc/api/session.h): a
    # binding's allocator makes the outputs, told the entry's stream and the
    # NCCL stream; if it raises on one rank, that op fails on every rank as
    # out of memory, and the job goes on.
    calls, freed = [], []

    class Owner:
        def __init__(self, pointer):
            self.pointer = pointer

        def __del__(self):
            freed.append(self.pointer)
            cudart.cudaFree(ctypes.c_void_p(self.pointer))

    def allocate(nbytes, device, stream, nccl_stream):
        calls.append((nbytes, device, stream, nccl_stream))
        if rank == size - 1 and nbytes > 1 << 10:
            raise MemoryError(f"fake caching allocator has no block of {nbytes} bytes")
        pointer = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(max(nbytes, 1))) == 0
        return Owner(pointer.value), pointer.value

    core.set_device_allocator(allocate)
    rows = np.full((rank + 1, 3), rank, np.float32)
    out, shape, _, _ = finish(start(OpType.ALLGATHER, "via_allocator", rows))
    want = np.concatenate([np.full((r + 1, 3), r, np.float32) for r in range(size)])
    assert isinstance(out.owner, Owner) and out.data_ptr == out.owner.pointer, (out.owner, out.data_ptr)
    assert np.array_equal(read(out, shape), want), (read(out, shape), want)
    nbytes, device, stream, nccl_stream = calls[-1]
    assert (nbytes, device, stream) == (want.nbytes, DEVICE, STREAM), calls[-1]
    assert nccl_stream not in (0, STREAM), nccl_stream
    del out
    assert len(freed) == 1, freed  # released with the output, on this thread

    big = np.full((1 << 10, 4), rank, np.float32)  # 16 KiB each: too much for the last rank
    try:
        finish(start(OpType.ALLGATHER, "allocator_fails", big))
        raise AssertionError("the allgather succeeded")
    except HvdliteInternalError as error:
        text = str(error)
        assert f"allgather of 'allocator_fails' failed: out of GPU memory on rank {size - 1}" in text, text
        if rank == size - 1:
            assert "MemoryError: fake caching allocator has no block of" in text, text

    x = np.arange(size * 2, dtype=np.float32) * (rank + 1)
    out, shape, _, _ = finish(start(OpType.REDUCESCATTER, "after_allocator_failure", x,
                                    reduce_op=int(ReduceOp.Sum)))
    total = np.arange(size * 2, dtype=np.float32) * sum(range(1, size + 1))
    assert np.array_equal(read(out, shape), total[2 * rank:2 * rank + 2]), read(out, shape)
    del out
    core.set_device_allocator(None)
    allocated = sum(1 for c in calls if not (rank == size - 1 and c[0] > 1 << 10))
    assert len(calls) == 3 and len(freed) == allocated, (freed, calls)  # none leaked, nor the failed op's


def join():
    # The last rank joins at once; the others reduce on their own GPUs.
    if rank == size - 1:
        core.wait(core.enqueue(op=int(OpType.JOIN), name="__join"), int(DataType.INT32))
        assert nccl.fake_nccl_last_comm_device() == DEVICE, (nccl.fake_nccl_last_comm_device(), DEVICE)
    else:
        x = np.full(4, rank + 1.0, np.float32)
        finish(start(OpType.ALLREDUCE, "joined", x, reduce_op=int(ReduceOp.Sum)))
        assert np.all(x == sum(range(1, size))), x
        core.wait(core.enqueue(op=int(OpType.JOIN), name="__join"), int(DataType.INT32))


def scale():
    import ml_dtypes
    values = np.linspace(-2.0, 3.0, 7)
    for name, dtype, code in (("f16", np.float16, DataType.FLOAT16),
                              ("bf16", ml_dtypes.bfloat16, DataType.BFLOAT16)):
        x = ((values + rank) / 4).astype(dtype)
        finish(start(OpType.ALLREDUCE, f"avg.{name}", x, dtype=int(code), reduce_op=int(ReduceOp.Average),
                     prescale=0.5, postscale=3.0), int(code))
        want = sum(((values + r) / 4).astype(dtype).astype(np.float64) for r in range(size)) / size * 1.5
        assert np.allclose(x.astype(np.float64), want, rtol=2e-2, atol=2e-2), (name, x, want)
    # A broadcast inside the set of every rank but rank 0, from its last rank.
    if size > 2 and rank in SUBSET:
        y = np.arange(5, dtype=np.float32) + 10 * rank
        finish(start(OpType.BROADCAST, "sub.bcast", y, root_rank=SUBSET[-1], process_set_id=1))
        assert np.all(y == np.arange(5) + 10 * SUBSET[-1]), y
    # Rank 0 must not shut down while the sub-set still works.
    z = np.ones(2, np.float32)
    finish(start(OpType.ALLREDUCE, "end", z, reduce_op=int(ReduceOp.Sum)))
    assert np.all(z == size), z


def hierarchical():
    n = 11  # not a multiple of the 2 local ranks: padded
    x = np.arange(n, dtype=np.float32) * (rank + 1)
    finish(start(OpType.ALLREDUCE, "hier", x, reduce_op=int(ReduceOp.Average), postscale=2.0))
    want = np.arange(n) * sum(r + 1 for r in range(size)) / size * 2.0
    assert np.allclose(x, want), (x, want)
    ints = np.arange(n, dtype=np.int32) + rank
    finish(start(OpType.ALLREDUCE, "hier.int", ints, reduce_op=int(ReduceOp.Sum), postscale=2.0),
           int(DataType.INT32))
    assert np.all(ints == 2 * (size * np.arange(n) + sum(range(size)))), ints


def hier_empty():
    x = np.ones(3, np.float32)  # binds the two levels: NCCL's set-up calls are not counted below
    finish(start(OpType.ALLREDUCE, "before_empty", x, reduce_op=int(ReduceOp.Sum)))
    # A tensor of no elements may have no memory at all (a framework's empty
    # tensor: null pointers), alone (no fusion buffer: reduced in its output)
    # on each way the two levels reduce: a plain sum, a scaled sum (float
    # average) and a host finish (int average). Each is a no-op on every
    # rank: no NCCL call, no host round trip (which would copy from null).
    nccl_calls, staged = nccl.fake_nccl_calls(), cudart.fake_cuda_copies(DEVICE_TO_HOST)
    for name, code, op in (("sum", DataType.FLOAT32, ReduceOp.Sum), ("avg", DataType.FLOAT32, ReduceOp.Average),
                           ("int_avg", DataType.INT32, ReduceOp.Average)):
        handle = core.enqueue(op=int(OpType.ALLREDUCE), name=f"empty.{name}", input=0, output=0, dtype=int(code),
                              shape=[0], device=DEVICE, stream=STREAM, reduce_op=int(op), postscale=2.0)
        finish(handle, int(code))
    assert nccl.fake_nccl_calls() == nccl_calls, f"{nccl.fake_nccl_calls() - nccl_calls} NCCL calls for nothing"
    assert cudart.fake_cuda_copies(DEVICE_TO_HOST) == staged, "an empty allreduce went through the host"
    # Fused beside tensors with elements.
    tensors = [np.zeros(0, np.float32), np.arange(5, dtype=np.float32) + rank, np.zeros((3, 0), np.float32),
               np.arange(11, dtype=np.float32) * (rank + 1)]
    handles = [start(OpType.ALLREDUCE, f"fused.{i}", t, reduce_op=int(ReduceOp.Sum)) for i, t in enumerate(tensors)]
    for h in handles:
        finish(h)
    assert np.all(tensors[1] == size * np.arange(5) + sum(range(size))), tensors[1]
    assert np.all(tensors[3] == np.arange(11) * sum(r + 1 for r in range(size))), tensors[3]
    finish(start(OpType.ALLREDUCE, "after_empty", x, reduce_op=int(ReduceOp.Sum)))  # and the job goes on
    assert np.all(x == size * size), x


def flat_broadcast_at_shutdown(name, kernel_s, flat_env=None, idle_s=0.0):
    """Binds the two levels (an allreduce: the local NCCL communicator), runs
    a flat allgather (creating the flat one, with `flat_env` set), then
    queues a flat broadcast behind a `kernel_s` kernel on the producer's
    stream and shuts down `idle_s` later, while the broadcast still waits or
    runs. Returns the broadcast's array and the seconds shutdown() took."""
    x = np.ones(4, np.float32)
    finish(start(OpType.ALLREDUCE, "bind", x, reduce_op=int(ReduceOp.Sum)))
    assert np.all(x == size), x
    os.environ.update(flat_env or {})  # the fake NCCL reads it when a communicator is created
    rows = np.full((2, 3), rank, np.float32)
    out, shape, _, _ = finish(start(OpType.ALLGATHER, "flat.allgather", rows))
    want = np.concatenate([np.full((2, 3), r, np.float32) for r in range(size)])
    assert np.array_equal(read(out, shape), want), read(out, shape)
    del out
    n = 64
    y = device_array(n, np.float32)
    y[:] = -1.0
    ready = new_event()
    cudart.fake_cuda_fill_later(STREAM, y.ctypes.data, n, 10.0 + rank, int(kernel_s * 1e6))
    cudart.cudaEventRecord(ready, STREAM)
    core.wait(start(OpType.BROADCAST, name, y, ready_event=ready, root_rank=1), int(DataType.FLOAT32))
    time.sleep(idle_s)
    started = time.monotonic()
    basics.shutdown()
    return y, time.monotonic() - started


def hier_flat_shutdown():
    # Note [Failing, not hanging]: the flat communicator finalizes NCCL only
    # once every rank's flat kernels finished, so shutdown waits the
    # broadcast out (about kernel_s) and no rank aborts.
    kernel_s = 1.0
    y, took = flat_broadcast_at_shutdown("flat.bcast", kernel_s)
    cudart.cudaStreamSynchronize(STREAM)
    assert np.all(y == 11.0), y[:4]
    busy = nccl.fake_nccl_busy_finalizes()
    assert busy == 0, f"{busy} NCCL communicator(s) finalized with kernels still queued: close() voted too early"
    assert nccl.fake_nccl_aborted() == 0, "a communicator was aborted at a clean shutdown"
    assert nccl.fake_nccl_finalized() == 2 and nccl.fake_nccl_unfinalized_destroys() == 0, "flat + local"
    assert nccl.fake_nccl_misuse_count() == 0, nccl.fake_nccl_misuse_report().decode()
    assert took < kernel_s + 2.0, f"shutdown took {took:.2f} s"
    print(f"rank {rank}: shutdown took {took:.2f} s with a flat broadcast running", flush=True)


def hier_flat_hang():
    # The flat communicator hangs its second kernel (the broadcast) on every
    # rank. Shutdown starts 1 s after it was queued, so the watchdog (the
    # batch's age: HVDLITE_NCCL_TIMEOUT_SECONDS=2) finds it halfway through
    # close()'s own wait, and aborts; shutdown ends instead of waiting forever.
    _, took = flat_broadcast_at_shutdown("flat.hung", 0.0, {"FAKE_NCCL_HANG_AFTER": "1"}, idle_s=1.0)
    cudart.cudaStreamSynchronize(STREAM)  # hangs forever unless NCCL was aborted
    assert nccl.fake_nccl_aborted() >= 1, "the hung flat communicator was not aborted"
    print(f"rank {rank}: shutdown took {took:.2f} s with a hung flat broadcast", flush=True)


def wait_for_value(array, want, seconds):
    """Seconds until every element of `array` ("device" memory the fake's
    streams write) equals `want`, or None if it did not within `seconds`."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if np.all(array == want):
            return time.monotonic() - started
        time.sleep(0.001)
    return None


def overlap():
    # Note [Ready at enqueue] (csrc/transport/device_communicator.h): backward
    # queues later layers' kernels on the producer's stream right after a
    # gradient's allreduce is enqueued; the allreduce must wait only for what
    # was queued before it. Here the later "kernel" runs 1.5 s (writing
    # another layer's buffer): an allreduce whose ready point were taken on
    # the background thread after negotiation would finish only after it.
    # (That the allreduce reads its input as it was at enqueue, and not
    # later, is the race detector's to see: cuda_fake_streams.py side_ready.)
    kernel_s = 1.5
    n = 1024
    x = device_array(n, np.float32)
    y = device_array(n, np.float32)
    later = device_array(n, np.float32)
    x[:] = rank + 1
    y[:] = -1.0
    other = (DEVICE + 1) % 4  # the caller's current device, not the tensor's
    cudart.cudaSetDevice(other)
    started = time.monotonic()
    handle = start(OpType.ALLREDUCE, "overlap", x, out=y, reduce_op=int(ReduceOp.Sum))
    cudart.fake_cuda_fill_later(STREAM, later.ctypes.data, n, 1000.0 + rank, int(kernel_s * 1e6))
    assert current_device() == other, ("enqueue changed the current device", current_device(), other)
    core.wait(handle, int(DataType.FLOAT32))  # queued on the GPU, not finished
    want = size * (size + 1) / 2
    finished = wait_for_value(y, want, 3 * kernel_s)
    cudart.cudaStreamSynchronize(STREAM)
    kernel_done = time.monotonic() - started
    assert np.all(later == 1000.0 + rank), later[:4]
    assert finished is not None, ("no right allreduce result", y[:4], want)
    # Overlap: done while the producer's long kernel still ran.
    assert finished < kernel_done - kernel_s / 2, (finished, kernel_done)
    print(f"rank {rank}: allreduce done {finished:.3f} s after enqueue, the producer's later kernel "
          f"{kernel_done:.3f} s", flush=True)

    # The legacy default stream (null) is the tensor's device's, whichever
    # device is current at enqueue.
    cudart.cudaSetDevice(DEVICE)
    x[:] = -5.0
    cudart.fake_cuda_fill_later(None, x.ctypes.data, n, rank + 2.0, 300000)  # writes x, then ready
    cudart.cudaSetDevice(other)
    handle = start(OpType.ALLREDUCE, "overlap.default_stream", x, out=y, stream=0,
                   reduce_op=int(ReduceOp.Sum))
    assert current_device() == other, ("enqueue changed the current device", current_device(), other)
    core.wait(handle, int(DataType.FLOAT32))
    want = size * (size + 3) / 2
    assert wait_for_value(y, want, 5.0) is not None, ("the allreduce did not wait for the default stream",
                                                      y[:4], want)
    cudart.cudaSetDevice(DEVICE)


def fused_rs():
    shapes = [(1,), (size - 1, 3), (2 * size + 1,), (5, 4), (3 * size + 2, 2)]
    kinds = [(np.float32, ReduceOp.Average, 0.5, 3.0), (np.int32, ReduceOp.Sum, 1.0, 2.0)]
    members = []
    for i in range(20):
        shape = shapes[i % len(shapes)]
        dtype, op, prescale, postscale = kinds[i % 2]
        n = int(np.prod(shape))
        host = pinned(n, dtype)
        host[:] = np.arange(n) % 7 * (rank + 1) + i
        x = device_array(n, dtype).reshape(shape)
        x[:] = -1000  # stale until the copy on the framework's stream runs
        cudart.cudaMemcpyAsync(x.ctypes.data, host.ctypes.data, x.nbytes, HOST_TO_DEVICE, STREAM)
        members.append((x, shape, dtype, op, prescale, postscale))
    before = nccl.fake_nccl_calls()
    handles = [start(OpType.REDUCESCATTER, f"rs.{i}", x, reduce_op=int(op), prescale=prescale,
                     postscale=postscale)
               for i, (x, shape, dtype, op, prescale, postscale) in enumerate(members)]
    for i, (handle, (x, shape, dtype, op, prescale, postscale)) in enumerate(zip(handles, members)):
        out, out_shape, _, _ = core.wait(handle, int(CODES[np.dtype(dtype)]))
        n = int(np.prod(shape))
        total = sum((np.arange(n) % 7 * (r + 1) + i).astype(np.float64) * prescale for r in range(size))
        if op == ReduceOp.Average:
            total = total / size
        rows = shape[0]
        per = [rows // size + (r < rows % size) for r in range(size)]
        first = sum(per[:rank]) * (n // rows)
        want = (total.reshape(-1)[first:first + per[rank] * (n // rows)] * postscale).astype(dtype)
        assert tuple(out_shape) == (per[rank],) + tuple(shape[1:]), (i, out_shape, shape)
        raw = (ctypes.c_char * (want.size * want.itemsize)).from_address(out.data_ptr) if want.size else b""
        got = read_on(STREAM, np.frombuffer(raw, dtype=dtype)) if want.size else want
        assert np.allclose(got, want, rtol=1e-6), (i, got, want)
    calls = nccl.fake_nccl_calls() - before
    assert_no_races("fused reducescatters")
    print(f"rank {rank}: 20 reducescatters cost {calls} NCCL calls", flush=True)


def wait_for_every_rank_to_fail(directory, seconds=30.0):
    """Every rank finds the hang on its own (its watchdog); the first to exit
    would start the launcher's 5 s countdown for the others, which on a
    loaded machine measures the machine, not them (each rank's own time is
    what the test checks). So each rank leaves a file in `directory` once it
    failed and exits when every rank has, or after `seconds` (the test then
    finds the rank that never failed)."""
    Path(directory, str(rank)).touch()
    deadline = time.monotonic() + seconds
    while len(os.listdir(directory)) < size and time.monotonic() < deadline:
        time.sleep(0.05)


def failure(kill):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # see the core's own detection (SIGKILL follows)
    victim = size - 1
    if not kill and rank == victim:
        os.environ["FAKE_NCCL_HANG_AFTER"] = "3"  # read when its communicator is created
    x = np.ones(64, np.float32)
    for step in range(1000):
        started = time.monotonic()
        try:
            handle = start(OpType.ALLREDUCE, f"step.{step % 3}", x, reduce_op=int(ReduceOp.Sum))
            core.wait(handle, int(DataType.FLOAT32))
            if kill and rank == victim and step == 5:
                os.kill(os.getpid(), signal.SIGKILL)  # its NCCL kernel may be queued, not run
            cudart.cudaStreamSynchronize(STREAM)  # hangs forever if NCCL is never aborted
        except HvdliteInternalError as error:
            waited = time.monotonic() - started
            print(f"rank {rank} failed after {waited:.2f} s: {error}", flush=True)
            if not kill:
                wait_for_every_rank_to_fail(os.environ["CUDA_FAKE_FAILED_DIR"])
            sys.exit(17)
        x[:] = 1.0
    print("no failure seen", flush=True)
    sys.exit(0)


if MODE in ("killed", "hang"):
    failure(kill=MODE == "killed")
{"ordering": ordering, "oom": oom, "join": join, "scale": scale, "hierarchical": hierarchical,
 "hier_empty": hier_empty, "hier_flat_shutdown": hier_flat_shutdown, "hier_flat_hang": hier_flat_hang,
 "overlap": overlap, "fused_rs": fused_rs}[MODE]()
basics.shutdown()
print(f"{MODE} OK", flush=True)
