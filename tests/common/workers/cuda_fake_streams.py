"""Stream order, contexts, graph capture and shutdown of the core's CUDA path,
read from the fake GPU's own bookkeeping (tests/common/fake_gpu: its race
detector decides by stream order, never by timing). One mode per run
(argv[1]); prints "<mode> OK".

  consumer      a result read on another stream after wait(handle, that
                stream) is right and race-free, and so is one read on the
                submitting stream; a read on a third stream that nobody
                ordered is a race the fake reports (the detector works here)
  side_ready    a ready event recorded on a side stream while the producer's
                write is still queued is a race (what a binding bug would do);
                the core's own ready point (the stream at enqueue) is not
  producer      nothing is queued into the producer's stream until a result
                is asked for: backward's later kernels never wait for an
                allreduce; then one wait per stream per batch
  contexts      one CUDA context per process, on the rank's own GPU (ranks use
                GPUs 1.., so a context on GPU 0 is a stray one), with the
                watchdog polling a batch that stays queued
  capture       a global-mode graph capture on a user stream survives the
                background thread and the watchdog working meanwhile; a
                collective on a capturing stream raises ValueError
  inprogress    FAKE_NCCL_INPROGRESS=1: every NCCL enqueue returns
                ncclInProgress; scaled sums settle before their operator is
                destroyed (the fake reports misuse)
  host_ops      HVDLITE_GPU_OPERATIONS=host, every rank on GPU 0 (NCCL would
                refuse it): each collective, int16 sums, no NCCL loaded
  buffers       a framework allocator makes the fusion buffers (background
                thread, NCCL's stream) and reducescatter outputs (the calling
                thread, at enqueue); its failure for a fusion buffer on one
                rank fails that batch everywhere, and the job goes on
  batched       a fused batch is packed and unpacked with one
                cudaMemcpyBatchAsync each where the runtime has it (else one
                copy per tensor); reducescatter copies nothing
  c_api         CUDA requests through api.h's hvdlite_enqueue with a done
                callback (as the TF GPU kernels and JAX's CUDA handler send
                them): by the time done runs, the request's stream waits for
                the batch (one wait per batch), so a read queued there after
                done is ordered after NCCL's write; without that wait the fake
                reports the read as a race
  late_output   through the C API, an allgather whose output the framework's
                allocator hands out while a kernel queued on the request's
                stream still writes that block (TF frees in its stream's
                order): with HVDLITE_REQUEST_OUTPUT_ON_STREAM NCCL's write is
                ordered after that kernel; without, the fake reports the race
  one_rank      at world size 1, scaled sums and reducescatters of a count
                NCCL < 2.29.7 would leave a tail of unscaled (Note [One-rank
                scaled sums]) are right to the last element
Every mode ends with a clean shutdown that finalizes NCCL before destroying it.
"""
import os
import sys
import threading
import time

import numpy as np

MODE = sys.argv[1]

import hvdlite.common.basics as basics  # noqa: E402
from hvdlite.common import init  # noqa: E402
from hvdlite.common.exceptions import HvdliteInternalError  # noqa: E402
from hvdlite.common.ops import DataType, OpType, ReduceOp  # noqa: E402
from fake_device import (NON_BLOCKING, Caller, assert_no_races, cudart, device_array, nccl,  # noqa: E402
                         new_event, new_stream, races, read_on, write_on)

init()
rank, size = basics.rank(), basics.size()
LOCAL = int(os.environ.get("HVDLITE_LOCAL_RANK", rank))
DEVICE = {"contexts": LOCAL + 1, "host_ops": 0}.get(MODE, LOCAL)
cudart.cudaSetDevice(DEVICE)
STREAM = new_stream()
caller = Caller(DEVICE, STREAM)
core = caller.core
F32 = int(DataType.FLOAT32)
SUM = int(ReduceOp.Sum)


def triangle(offset=1.0):
    return sum(r + offset for r in range(size))


def consumer():
    n = 4096
    x = device_array(n, np.float32)
    write_on(STREAM, x, rank + 1.0)  # the producer: a kernel still queued at enqueue
    other = new_stream(NON_BLOCKING)
    core.wait(caller.start(OpType.ALLREDUCE, "r1", x, reduce_op=SUM), F32, other)
    assert np.all(read_on(other, x) == triangle()), "wrong result on the consumer's stream"
    assert np.all(read_on(STREAM, x) == triangle()), "wrong result on the submitting stream"
    assert_no_races("reading results on the consumer's and the submitting stream")
    # The same read on a stream nothing ordered: the detector must see it.
    core.wait(caller.start(OpType.ALLREDUCE, "r2", x, reduce_op=SUM), F32, other)
    read_on(new_stream(NON_BLOCKING), x)
    count, report = races()
    assert count >= 1 and "fake_cuda_kernel_read" in report, ("an unordered read was not reported", report)
    cudart.fake_cuda_reset_races()
    cudart.cudaStreamSynchronize(other)


def side_ready():
    n = 1024
    x = device_array(n, np.float32)
    side = new_stream(NON_BLOCKING)
    event = new_event()
    write_on(STREAM, x, rank + 1.0)
    cudart.cudaEventRecord(event, side)  # a ready point on the wrong stream
    caller.finish(caller.start(OpType.ALLREDUCE, "wrong_ready", x, reduce_op=SUM, ready_event=event))
    count, report = races()
    assert count >= 1, "NCCL read a tensor whose write it was not ordered after, and no race was reported"
    assert "fake_cuda_kernel_write" in report, report
    cudart.fake_cuda_reset_races()
    write_on(STREAM, x, rank + 1.0)
    caller.finish(caller.start(OpType.ALLREDUCE, "core_ready", x, reduce_op=SUM))
    assert np.all(x == triangle()), x[:4]
    assert_no_races("the core's ready point")


def producer():
    k = 8
    grads = [device_array(64 + i, np.float32) for i in range(k)]
    for g in grads:
        write_on(STREAM, g, float(rank))
    before = cudart.fake_cuda_waits_by(STREAM)
    handles = [caller.start(OpType.ALLREDUCE, f"g.{i}", g, reduce_op=SUM) for i, g in enumerate(grads)]
    later = device_array(16, np.float32)
    write_on(STREAM, later, 5.0)  # backward goes on after the hooks fired
    deadline = time.monotonic() + 30
    while not all(core.poll(h) for h in handles):  # run by the background thread
        assert time.monotonic() < deadline, "the batch did not run"
        time.sleep(0.001)
    assert cudart.fake_cuda_waits_by(STREAM) == before, "a wait was queued into the producer's stream"
    for h in handles:
        core.wait(h, F32, STREAM)
    waits = cudart.fake_cuda_waits_by(STREAM) - before
    assert 1 <= waits <= k, f"{waits} waits on the producer's stream for {k} results"
    cudart.cudaStreamSynchronize(STREAM)
    for g in grads:
        assert np.all(g == triangle(0.0)), g[:4]
    print(f"rank {rank}: {k} results asked for on the producer's stream: {waits} wait(s)", flush=True)


def contexts():
    x = device_array(256, np.float32)
    caller.finish(caller.start(OpType.ALLREDUCE, "first", x, reduce_op=SUM))
    cudart.fake_cuda_fill_later(STREAM, device_array(4, np.float32).ctypes.data, 4, 1.0, 600000)
    handle = caller.start(OpType.ALLREDUCE, "queued", x, reduce_op=SUM)  # waits 0.6 s on the GPU
    core.wait(handle, F32)
    time.sleep(0.5)  # the watchdog polls the queued batch meanwhile
    cudart.cudaStreamSynchronize(STREAM)
    report = (cudart.fake_cuda_context_report() or b"").decode()
    assert cudart.fake_cuda_context_count() == 1 and cudart.fake_cuda_has_context(DEVICE), \
        f"rank {rank} on GPU {DEVICE} has these CUDA contexts:\n{report}"


def capture():
    x = device_array(4096, np.float32)
    caller.finish(caller.start(OpType.ALLREDUCE, "before", x, reduce_op=SUM))
    captured = new_stream(NON_BLOCKING)
    mine = device_array(64, np.float32)
    outcome = {}

    def capture_a_graph():
        assert cudart.cudaStreamBeginCapture(captured, 0) == 0  # global mode, torch.cuda.graph's default
        write_on(captured, mine, 7.0)
        time.sleep(0.6)
        graph = ctypes_graph()
        outcome["end"] = cudart.cudaStreamEndCapture(captured, graph)

    # Allocated first: a cudaMalloc of the test's own during the capture
    # would invalidate it (it is unsafe in global mode).
    ys = [device_array(1024 * (step + 1), np.float32) for step in range(4)]
    thread = threading.Thread(target=capture_a_graph)
    thread.start()
    time.sleep(0.05)
    # hvdlite works meanwhile: batches, staging and pinned memory for a
    # host-side scale, the watchdog's event queries.
    for step, y in enumerate(ys):
        handle = caller.start(OpType.ALLREDUCE, f"during.{step}", y, reduce_op=int(ReduceOp.Max), postscale=3.0)
        core.wait(handle, F32)  # no host synchronize here: that would be the test breaking the capture
    thread.join()
    assert outcome["end"] == 0 and cudart.fake_cuda_invalidated_captures() == 0, \
        ("hvdlite invalidated a graph capture", outcome, cudart.fake_cuda_capture_report())
    assert cudart.cudaStreamBeginCapture(captured, 0) == 0
    try:
        caller.start(OpType.ALLREDUCE, "inside", x, reduce_op=SUM, stream=captured)
        raise AssertionError("a collective on a capturing stream was accepted")
    except ValueError as error:
        assert "allreduce of 'inside'" in str(error) and "CUDA graph" in str(error), error
    cudart.cudaStreamEndCapture(captured, ctypes_graph())
    caller.finish(caller.start(OpType.ALLREDUCE, "after", x, reduce_op=SUM))


def ctypes_graph():
    import ctypes
    return ctypes.byref(ctypes.c_void_p())


def inprogress():
    for name, dtype, code in (("f32", np.float32, DataType.FLOAT32), ("f16", np.float16, DataType.FLOAT16)):
        x = device_array(33, dtype)
        x[:] = (np.arange(33) + rank).astype(dtype)
        caller.finish(caller.start(OpType.ALLREDUCE, f"avg.{name}", x, dtype=int(code),
                                   reduce_op=int(ReduceOp.Average), prescale=0.5, postscale=4.0), int(code))
        want = sum(np.arange(33) + r for r in range(size)) / size * 2.0
        assert np.allclose(x.astype(np.float64), want, rtol=1e-2), (name, x[:4], want[:4])
    rows = 2 * size + 1
    y = device_array(rows * 2, np.float32).reshape(rows, 2)
    y[:] = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (rank + 1)
    out, shape, _, _ = caller.finish(caller.start(OpType.REDUCESCATTER, "rs", y, reduce_op=SUM, prescale=2.0))
    counts = [rows // size + (1 if i < rows % size else 0) for i in range(size)]
    first = sum(counts[:rank])
    total = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * sum(range(1, size + 1)) * 2.0
    assert np.array_equal(read_output(out, shape), total[first:first + counts[rank]]), read_output(out, shape)
    misuse = (nccl.fake_nccl_misuse_report() or b"").decode()
    assert nccl.fake_nccl_misuse_count() == 0, misuse


def read_output(output, shape, dtype=np.float32):
    import ctypes
    raw = (ctypes.c_char * output.nbytes).from_address(output.data_ptr)
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def host_ops():
    found = basics.gpu_libraries()
    assert found["gpu_operations"] == "host" and found["nccl"] is None, found
    # A fused batch of averages with scales, and an int16 sum NCCL has no type for.
    parts = [device_array(10 + i, np.float32) for i in range(5)]
    for i, p in enumerate(parts):
        p[:] = rank + i
    handles = [caller.start(OpType.ALLREDUCE, f"avg.{i}", p, reduce_op=int(ReduceOp.Average), prescale=2.0,
                            postscale=0.25) for i, p in enumerate(parts)]
    for h in handles:
        caller.finish(h)
    for i, p in enumerate(parts):
        assert np.allclose(p, (triangle(0.0) / size + i) * 0.5), (i, p[:3])
    ints = device_array(7, np.int16)
    ints[:] = np.arange(7, dtype=np.int16) * (rank + 1)
    caller.finish(caller.start(OpType.ALLREDUCE, "int16", ints, reduce_op=SUM), int(DataType.INT16))
    assert np.array_equal(ints, np.arange(7) * sum(range(1, size + 1))), ints
    g = device_array((rank + 1) * 3, np.float32).reshape(rank + 1, 3)
    g[:] = rank
    out, shape, _, _ = caller.finish(caller.start(OpType.ALLGATHER, "uneven", g))
    want = np.concatenate([np.full((r + 1, 3), r, np.float32) for r in range(size)])
    assert np.array_equal(read_output(out, shape), want)
    b = device_array(6, np.float32)
    b[:] = rank
    caller.finish(caller.start(OpType.BROADCAST, "bcast", b, root_rank=size - 1))
    assert np.all(b == size - 1), b
    splits = [p + 1 for p in range(size)]
    a = device_array(sum(splits) * 2, np.float64).reshape(-1, 2)
    a[:] = np.arange(sum(splits) * 2).reshape(-1, 2) + 100 * rank
    out, shape, received, _ = caller.finish(caller.start(OpType.ALLTOALL, "a2a", a, splits=splits),
                                            int(DataType.FLOAT64))
    got = read_output(out, shape, np.float64)
    begin = sum(splits[:rank]) * 2
    want = np.concatenate([np.arange(begin, begin + (rank + 1) * 2).reshape(-1, 2) + 100 * p for p in range(size)])
    assert list(received) == [rank + 1] * size and np.array_equal(got, want), (received, got, want)
    rows = 2 * size + 1
    r = device_array(rows * 2, np.float32).reshape(rows, 2)
    r[:] = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * (rank + 1)
    out, shape, _, _ = caller.finish(caller.start(OpType.REDUCESCATTER, "rs", r, reduce_op=SUM))
    counts = [rows // size + (1 if i < rows % size else 0) for i in range(size)]
    first = sum(counts[:rank])
    total = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2) * sum(range(1, size + 1))
    assert np.array_equal(read_output(out, shape), total[first:first + counts[rank]])


def buffers():
    main = threading.get_ident()
    calls = []

    class Owner:
        def __init__(self, pointer):
            self.pointer = pointer

        def __del__(self):
            import ctypes
            cudart.cudaFree(ctypes.c_void_p(self.pointer))

    def allocate(nbytes, device, stream, nccl_stream):
        import ctypes
        calls.append((nbytes, stream, nccl_stream, threading.get_ident()))
        if rank == size - 1 and stream == nccl_stream and nbytes > 1 << 16:
            raise MemoryError(f"fake caching allocator has no {nbytes}-byte block")
        pointer = ctypes.c_void_p()
        assert cudart.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(max(nbytes, 1))) == 0
        return Owner(pointer.value), pointer.value

    core.set_device_allocator(allocate)
    small = [device_array(100, np.float32) for _ in range(4)]
    for s in small:
        s[:] = rank
    for h in [caller.start(OpType.ALLREDUCE, f"small.{i}", s, reduce_op=SUM, group="small", group_size=4)
              for i, s in enumerate(small)]:
        caller.finish(h)
    assert all(np.all(s == triangle(0.0)) for s in small)
    fusion = [c for c in calls if c[1] == c[2]]
    assert fusion and fusion[0][0] >= 400 * 4 - 1 and fusion[0][3] != main, calls  # background thread
    rows = 2 * size
    r = device_array(rows * 4, np.float32).reshape(rows, 4)
    r[:] = rank
    before = len(calls)
    handle = caller.start(OpType.REDUCESCATTER, "rs", r, reduce_op=SUM)
    assert len(calls) == before + 1 and calls[-1][3] == main and calls[-1][1] == STREAM, calls[before:]
    out, shape, _, _ = caller.finish(handle)
    assert np.all(read_output(out, shape) == triangle(0.0))
    del out
    big = [device_array(5000, np.float32) for _ in range(8)]  # one group: grows the fusion buffer past 64 KiB
    handles = [caller.start(OpType.ALLREDUCE, f"big.{i}", b, reduce_op=SUM, group="big", group_size=8)
               for i, b in enumerate(big)]
    failures = []
    for h in handles:
        try:
            caller.finish(h)
        except HvdliteInternalError as error:
            failures.append(str(error))
    assert failures and all(f"out of GPU memory on rank {size - 1}" in f for f in failures), failures
    if rank == size - 1:
        assert any("fake caching allocator has no" in f for f in failures), failures
    core.set_device_allocator(None)
    for h in [caller.start(OpType.ALLREDUCE, f"big2.{i}", b, reduce_op=SUM) for i, b in enumerate(big)]:
        caller.finish(h)


def batched():
    version = basics.gpu_libraries()["cuda_runtime_version"]
    k = 16
    grads = [device_array(50 + i, np.float32) for i in range(k)]
    for g in grads:
        g[:] = rank
    for round_ in range(2):  # the first grows the fusion buffer
        cudart.cudaStreamSynchronize(STREAM)
        batches, copies, calls = cudart.fake_cuda_batches(), cudart.fake_cuda_copies(3), cudart.fake_cuda_calls()
        created = cudart.fake_cuda_events_created()
        # One group: negotiated together, so always one fused batch.
        handles = [caller.start(OpType.ALLREDUCE, f"b.{i}", g, reduce_op=SUM, group="b", group_size=k)
                   for i, g in enumerate(grads)]
        for h in handles:
            core.wait(h, F32)
        # Not counted: events created while the pool had no spare one (the
        # watchdog returns them every 0.1 s, later on a loaded machine).
        calls = cudart.fake_cuda_calls() - calls - (cudart.fake_cuda_events_created() - created)
        cudart.cudaStreamSynchronize(STREAM)
        if round_ == 0:
            for g in grads:
                g[:] = rank
    new_batches = cudart.fake_cuda_batches() - batches
    new_copies = cudart.fake_cuda_copies(3) - copies  # device-to-device, batched or not
    assert all(np.all(g == triangle(0.0)) for g in grads)
    assert new_copies == 2 * k, new_copies
    if version >= 12080:
        # One cudaMemcpyBatchAsync to pack and one to unpack each fused
        # batch; the calls left per tensor are the capture check and the
        # ready event at enqueue.
        assert new_batches == 2, new_batches
        assert calls <= 2 * k + 8, calls
    else:
        assert new_batches == 0 and calls >= 4 * k, (new_batches, calls)
    rows = 2 * size
    r = device_array(rows * 3, np.float32).reshape(rows, 3)
    r[:] = 1.0
    copies = cudart.fake_cuda_copies(3)
    out, shape, _, _ = caller.finish(caller.start(OpType.REDUCESCATTER, "rs", r, reduce_op=SUM))
    assert cudart.fake_cuda_copies(3) == copies, "reducescatter copied its input"
    assert np.all(read_output(out, shape) == size)
    print(f"rank {rank}: CUDA {version}: a fused batch of {k} cost {calls} CUDA calls, "
          f"{new_batches} of them batched copies", flush=True)


def c_api():
    import ctypes
    import threading

    from c_api import DONE, Request, library
    lib = library(core)
    k, n = 6, 257
    tensors = [device_array(n, np.float32) for _ in range(k)]
    for i, t in enumerate(tensors):
        write_on(STREAM, t, rank + 1.0 + i)  # still queued at enqueue
    lock, all_done, statuses = threading.Lock(), threading.Event(), []

    @DONE
    def done(user, result):  # on the background thread
        with lock:
            statuses.append((result.contents.status, result.contents.message))
            if len(statuses) == k:
                all_done.set()

    shape = (ctypes.c_int64 * 1)(n)
    error = ctypes.create_string_buffer(512)
    before = cudart.fake_cuda_waits_by(STREAM)
    for i, t in enumerate(tensors):
        request = Request(op=int(OpType.ALLREDUCE), name=f"c_api.{i}".encode(), dtype=F32, shape=shape,
                          ndim=1, input=t.ctypes.data, output=t.ctypes.data, reduce_op=SUM, prescale=1.0,
                          postscale=1.0, device=DEVICE, stream=STREAM)
        code = lib.hvdlite_enqueue(ctypes.byref(request), None, done, None, error, len(error))
        assert code == 0, (code, error.value)
    assert all_done.wait(60), f"{len(statuses)} of {k} C API requests completed"
    assert all(status == 0 for status, _ in statuses), statuses
    waits = cudart.fake_cuda_waits_by(STREAM) - before
    for i, t in enumerate(tensors):  # queued after done: what a framework's next kernel reads
        read_on(STREAM, t)
    assert_no_races("results read on the request's stream once done ran")
    for i, t in enumerate(tensors):
        assert np.all(t == triangle(1.0 + i)), (i, t[:4])
    assert 1 <= waits <= k, f"{waits} waits on the request's stream for {k} results"
    print(f"rank {rank}: {k} C API results ordered on the request's stream by {waits} wait(s)", flush=True)


def late_output():
    import ctypes
    import threading

    from c_api import ALLOCATE, CALLER_WAITS, DONE, OUTPUT_ON_STREAM, Request, library
    lib = library(core)
    n = 300
    x = device_array(n, np.float32)
    write_on(STREAM, x, rank + 1.0)
    shape = (ctypes.c_int64 * 1)(n)
    error = ctypes.create_string_buffer(512)

    def gather(name, flags):
        block = device_array(n * size, np.float32)
        finished, statuses = threading.Event(), []

        @ALLOCATE
        def allocate(user, dims, ndim):  # on the background thread
            # The block was freed by the host while a kernel queued on the
            # framework's stream still writes it: what TF's allocator allows.
            write_on(STREAM, block, -1.0)
            return block.ctypes.data

        @DONE
        def done(user, result):
            statuses.append(result.contents.status)
            finished.set()

        request = Request(op=int(OpType.ALLGATHER), name=name.encode(), dtype=F32, shape=shape, ndim=1,
                          input=x.ctypes.data, prescale=1.0, postscale=1.0, device=DEVICE, stream=STREAM,
                          flags=CALLER_WAITS | flags)
        assert lib.hvdlite_enqueue(ctypes.byref(request), ctypes.cast(allocate, ctypes.c_void_p), done, None, error,
                                   len(error)) == 0, error.value
        assert finished.wait(60) and statuses == [0], statuses
        return block

    block = gather("late.ordered", OUTPUT_ON_STREAM)
    read_on(STREAM, block)
    assert_no_races("an output allocated late, with the core's stream ordered after the allocation")
    assert np.array_equal(block, np.repeat(np.arange(size, dtype=np.float32) + 1.0, n)), block[::n]
    gather("late.unordered", 0)  # the detector must see what the flag prevents
    count, report = races()
    assert count >= 1 and "fake_cuda_kernel_write" in report, ("the late write was not reported", report)
    cudart.fake_cuda_reset_races()
    cudart.cudaStreamSynchronize(STREAM)
    print(f"rank {rank}: a late output is ordered after the framework's stream", flush=True)


def one_rank():
    assert size == 1
    n = 100003  # 25 blocks of 4000 floats in a buggy NCCL: the last 3 left out
    x = device_array(n, np.float32)
    x[:] = np.arange(n, dtype=np.float32) % 97
    caller.finish(caller.start(OpType.ALLREDUCE, "scaled", x, reduce_op=SUM, prescale=3.0))
    want = (np.arange(n, dtype=np.float32) % 97) * 3.0
    bad = np.nonzero(x != want)[0]
    assert bad.size == 0, f"{bad.size} elements unscaled, the first at {bad[0]}"
    y = device_array(n, np.float64)
    y[:] = np.arange(n) % 89
    out, shape, _, _ = caller.finish(caller.start(OpType.REDUCESCATTER, "rs", y, reduce_op=int(ReduceOp.Average),
                                                  postscale=2.0), int(DataType.FLOAT64))
    got = read_output(out, shape, np.float64)
    assert np.array_equal(got, (np.arange(n) % 89) * 2.0), np.nonzero(got != (np.arange(n) % 89) * 2.0)[0][:5]


{"consumer": consumer, "one_rank": one_rank, "side_ready": side_ready, "producer": producer, "contexts": contexts,
 "capture": capture, "inprogress": inprogress, "host_ops": host_ops, "buffers": buffers,
 "batched": batched, "c_api": c_api, "late_output": late_output}[MODE]()
assert_no_races(MODE)
basics.shutdown()
if nccl is not None and MODE != "host_ops":
    assert nccl.fake_nccl_unfinalized_destroys() == 0 and nccl.fake_nccl_aborted() == 0, \
        (nccl.fake_nccl_unfinalized_destroys(), nccl.fake_nccl_aborted())
    assert nccl.fake_nccl_finalized() >= 1, "NCCL was not finalized at a clean shutdown"
print(f"{MODE} OK", flush=True)
