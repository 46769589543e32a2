"""The fake CUDA runtime and NCCL themselves (tests/common/fake_gpu): their
race detector (ordering decided by vector clocks when work is queued, never by
timing), contexts per device, stream capture, cudaMemcpyBatchAsync of CUDA 12.8
and 13.0, and the fake NCCL's finalize, in-progress enqueues and misuse
report. Each case is a small ctypes program in a fresh process: the fake's
state is per process, and a library once loaded stays loaded."""
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fake_gpu"))
import fake_gpu_build as fake_gpu  # noqa: E402

pytestmark = pytest.mark.skipif(fake_gpu.compiler() is None, reason="no C compiler to build the fake GPU")


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    out = tmp_path_factory.mktemp("fake_gpu")
    return {"HVDLITE_CUDART_LIBRARY": str(fake_gpu.build(out, "fake_cudart.c", "libcudart.so.12",
                                                         "libcudart.so.12")),
            "HVDLITE_NCCL_LIBRARY": str(fake_gpu.build(out, "fake_nccl.c", "libnccl.so.2", "libnccl.so.2"))}


# What every program starts with: the libraries, with the signatures ctypes
# needs (pointers must not pass as C ints), and a few helpers.
PRELUDE = r'''
import ctypes, json, os, threading, time
P, I, U, L, F, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_long, ctypes.c_float, ctypes.c_size_t
PP, PI = ctypes.POINTER(P), ctypes.POINTER(I)
cuda = ctypes.CDLL(os.environ["HVDLITE_CUDART_LIBRARY"])
nccl = ctypes.CDLL(os.environ["HVDLITE_NCCL_LIBRARY"])
libc = ctypes.CDLL(None)
SIGNATURES = {
    "cudaSetDevice": (I, [I]), "cudaGetDevice": (I, [PI]), "cudaGetDeviceCount": (I, [PI]),
    "cudaRuntimeGetVersion": (I, [PI]), "cudaDriverGetVersion": (I, [PI]),
    "cudaGetErrorString": (ctypes.c_char_p, [I]),
    "cudaStreamCreateWithFlags": (I, [PP, U]), "cudaStreamSynchronize": (I, [P]), "cudaStreamQuery": (I, [P]),
    "cudaDeviceSynchronize": (I, []), "cudaEventCreateWithFlags": (I, [PP, U]), "cudaEventRecord": (I, [P, P]),
    "cudaStreamWaitEvent": (I, [P, P, U]), "cudaEventQuery": (I, [P]), "cudaEventSynchronize": (I, [P]),
    "cudaMalloc": (I, [PP, S]), "cudaMallocAsync": (I, [PP, S, P]), "cudaFree": (I, [P]),
    "cudaMallocHost": (I, [PP, S]), "cudaMemcpyAsync": (I, [P, P, S, I, P]),
    "cudaStreamBeginCapture": (I, [P, I]), "cudaStreamEndCapture": (I, [P, PP]),
    "cudaStreamIsCapturing": (I, [P, PI]), "cudaThreadExchangeStreamCaptureMode": (I, [PI]),
    "cudaGraphInstantiate": (I, [PP, P, ctypes.c_ulonglong]), "cudaGraphLaunch": (I, [P, P]),
    "cudaGraphDestroy": (I, [P]), "cudaGraphExecDestroy": (I, [P]),
    "fake_cuda_kernel_write": (I, [P, P, L, F]), "fake_cuda_kernel_read": (I, [P, P, S, P]),
    "fake_cuda_fill_later": (I, [P, P, L, F, L]),
    "fake_cuda_races": (L, []), "fake_cuda_race_report": (ctypes.c_char_p, []),
    "fake_cuda_reset_races": (None, []),
    "fake_cuda_context_count": (I, []), "fake_cuda_has_context": (I, [I]),
    "fake_cuda_context_report": (ctypes.c_char_p, []), "fake_cuda_invalidated_captures": (L, []),
    "fake_cuda_capture_report": (ctypes.c_char_p, []), "fake_cuda_batches": (L, []), "fake_cuda_copies": (L, [I]),
}
for name, (restype, argtypes) in SIGNATURES.items():
    getattr(cuda, name).restype, getattr(cuda, name).argtypes = restype, argtypes


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class Config(ctypes.Structure):  # ncclConfig_t's leading fields
    _fields_ = [("size", S), ("magic", U), ("version", U), ("blocking", I)]


for name, (restype, argtypes) in {
    "ncclGetUniqueId": (I, [ctypes.POINTER(UniqueId)]), "ncclCommInitRank": (I, [PP, I, UniqueId, I]),
    "ncclCommInitRankConfig": (I, [PP, I, UniqueId, I, ctypes.POINTER(Config)]),
    "ncclCommGetAsyncError": (I, [P, PI]), "ncclCommFinalize": (I, [P]), "ncclCommDestroy": (I, [P]),
    "ncclCommAbort": (I, [P]), "ncclAllReduce": (I, [P, P, S, I, I, P, P]),
    "ncclRedOpCreatePreMulSum": (I, [PI, P, I, I, P]), "ncclRedOpDestroy": (I, [I, P]),
    "fake_nccl_finalized": (I, []), "fake_nccl_unfinalized_destroys": (I, []), "fake_nccl_misuse_count": (I, []),
    "fake_nccl_misuse_report": (ctypes.c_char_p, []),
}.items():
    getattr(nccl, name).restype, getattr(nccl, name).argtypes = restype, argtypes

NON_BLOCKING, D2D, FLOAT32, SUM = 1, 3, 7, 0


def new_stream(flags=0):
    handle = P()
    assert cuda.cudaStreamCreateWithFlags(ctypes.byref(handle), flags) == 0
    return handle.value


def new_event():
    handle = P()
    assert cuda.cudaEventCreateWithFlags(ctypes.byref(handle), 2) == 0
    return handle.value


def device_malloc(nbytes):
    pointer = P()
    assert cuda.cudaMalloc(ctypes.byref(pointer), nbytes) == 0
    return pointer.value


def floats(pointer, n):
    return list((ctypes.c_float * n).from_address(pointer))


def host(n):
    buffer = (ctypes.c_float * n)()
    return buffer, ctypes.addressof(buffer)


def races():
    return cuda.fake_cuda_races()


def report():
    return cuda.fake_cuda_race_report().decode()


def in_thread(name, fn):
    """fn() on a new thread named `name` (its pthread name); returns its result."""
    result = {}

    def run():
        libc.prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
        result["value"] = fn()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return result["value"]


def comm_of_one(blocking=True):
    uid = UniqueId()
    assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    comm = P()
    if blocking:
        assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
    else:
        config = Config(ctypes.sizeof(Config), 0xcafebeef, 21400, 0)
        assert nccl.ncclCommInitRankConfig(ctypes.byref(comm), 1, uid, 0, ctypes.byref(config)) == 7
        settle(comm.value)
    return comm.value


def async_error(comm):
    error = I()
    assert nccl.ncclCommGetAsyncError(comm, ctypes.byref(error)) == 0
    return error.value


def settle(comm):
    """Polls a non-blocking communicator until it no longer reports ncclInProgress."""
    for _ in range(2000):
        if async_error(comm) != 7:
            return async_error(comm)
        time.sleep(0.001)
    raise AssertionError("still ncclInProgress after 2 s")


def done(**values):
    print(json.dumps(values), flush=True)
'''


def _run(libs, *parts, env=None, timeout=60):
    """Runs PRELUDE and then the parts of a program (each indented as it likes)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "HVDLITE_"))}
    full.update(libs)
    full.update(env or {})
    code = PRELUDE + "".join(textwrap.dedent(part) for part in parts)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                          timeout=timeout)


def _values(libs, *parts, env=None):
    """What the program passed to done(), once it exited cleanly."""
    result = _run(libs, *parts, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# ---- races: ordered by stream order, event waits, host synchronisation ----

def test_a_read_on_another_stream_without_a_wait_is_one_race_naming_both_streams(libs):
    got = _values(libs, """
        a, b = new_stream(NON_BLOCKING), new_stream(NON_BLOCKING)
        buf = device_malloc(16384)
        cuda.fake_cuda_kernel_write(a, buf, 4096, 1.0)
        _, seen = host(1024)
        in_thread("reader", lambda: cuda.fake_cuda_kernel_read(b, buf + 4096, 4096, seen))
        done(races=races(), report=report(), a=hex(a), b=hex(b), buf=hex(buf + 4096),
             main=open("/proc/self/comm").read().strip())
        # Drain the streams before the interpreter exits: a stream thread still
        # running then crashed the process once (exit -11) after done().
        cuda.cudaDeviceSynchronize()
    """)
    assert got["races"] == 1, got
    message = got["report"].strip()
    assert message.startswith(f"race: fake_cuda_kernel_read on stream {got['b']} at position 1 "
                              f'(thread "reader") reads [{got["buf"]}+4096) of a 16384-byte allocation '
                              f'(cudaMalloc on thread "{got["main"]} (main)") written by fake_cuda_kernel_write '
                              f"on stream {got['a']} at position 1"), message
    assert message.endswith("with no event wait or host synchronize ordering it after that write"), message


# How the host or the reading stream learns that the write is done.
ORDERINGS = {
    "event wait": "e = new_event(); cuda.cudaEventRecord(e, a); cuda.cudaStreamWaitEvent(b, e, 0)",
    "stream synchronize": "cuda.cudaStreamSynchronize(a)",
    "event synchronize": "e = new_event(); cuda.cudaEventRecord(e, a); cuda.cudaEventSynchronize(e)",
    "event query": "e = new_event(); cuda.cudaEventRecord(e, a); "
                   "[time.sleep(0.001) for _ in iter(lambda: cuda.cudaEventQuery(e), 0)]",
    "device synchronize": "cuda.cudaDeviceSynchronize()",
    "copy into pageable memory": "_, page = host(1); cuda.cudaMemcpyAsync(page, buf, 4, 2, a)",
}


@pytest.mark.parametrize("how", list(ORDERINGS))
def test_a_wait_or_host_synchronize_orders_the_read(libs, how):
    got = _values(libs, f"""
        a, b = new_stream(NON_BLOCKING), new_stream(NON_BLOCKING)
        buf = device_malloc(4096)
        cuda.fake_cuda_kernel_write(a, buf, 1024, 2.5)
        {ORDERINGS[how]}
        values, seen = host(1024)
        cuda.fake_cuda_kernel_read(b, buf, 4096, seen)
        cuda.cudaStreamSynchronize(b)
        done(races=races(), report=report(), seen=sorted(set(values)))
    """)
    assert got["races"] == 0, got["report"]
    assert got["seen"] == [2.5], got


def test_the_legacy_stream_is_ordered_with_blocking_streams_and_not_with_non_blocking_ones(libs):
    got = _values(libs, """
        blocking, other, non_blocking = new_stream(0), new_stream(0), new_stream(NON_BLOCKING)
        x, y = device_malloc(4096), device_malloc(4096)
        seen = [host(1024) for _ in range(3)]
        cuda.fake_cuda_fill_later(blocking, x, 1024, 3.0, 100000)  # runs 0.1 s
        cuda.fake_cuda_kernel_read(None, x, 4096, seen[0][1])  # after it: same device, blocking stream
        cuda.fake_cuda_kernel_write(None, x, 1024, 4.0)
        cuda.fake_cuda_kernel_read(other, x, 4096, seen[1][1])  # after the legacy stream's write
        cuda.fake_cuda_kernel_write(2, y, 1024, 1.0)  # cudaStreamPerThread: blocking too
        cuda.fake_cuda_kernel_read(None, y, 4096, seen[2][1])
        cuda.cudaDeviceSynchronize()
        ordered = races()
        values_seen = [values[0] for values, _ in seen]
        _, seen = host(1024)
        cuda.fake_cuda_kernel_write(non_blocking, x, 1024, 5.0)
        cuda.fake_cuda_kernel_read(None, x, 4096, seen)  # not ordered: a race
        cuda.cudaDeviceSynchronize()
        cuda.fake_cuda_kernel_write(None, y, 1024, 6.0)
        cuda.fake_cuda_kernel_read(non_blocking, y, 4096, seen)  # nor this way
        cuda.cudaDeviceSynchronize()
        done(ordered=ordered, races=races(), report=report(), values_seen=values_seen)
    """)
    assert got["ordered"] == 0, got["report"]
    assert got["races"] == 2, got["report"]
    lines = got["report"].splitlines()
    assert "fake_cuda_kernel_read on the legacy default stream of device 0" in lines[0], lines
    assert "written by fake_cuda_kernel_write on stream" in lines[0], lines
    assert "written by fake_cuda_kernel_write on the legacy default stream of device 0" in lines[1], lines
    assert got["values_seen"] == [3.0, 4.0, 1.0], got  # each read waited for the write before it


def test_a_write_after_a_read_on_another_stream_is_a_race(libs):
    got = _values(libs, """
        a, b = new_stream(NON_BLOCKING), new_stream(NON_BLOCKING)
        buf = device_malloc(4096)
        cuda.fake_cuda_kernel_write(a, buf, 1024, 1.0)
        cuda.cudaStreamSynchronize(a)
        _, seen = host(1024)
        cuda.fake_cuda_kernel_read(b, buf, 4096, seen)
        cuda.fake_cuda_kernel_write(a, buf, 512, 2.0)  # b may still be reading
        values = dict(races=races(), report=report(), b=hex(b))
        # b's read into `seen` must end before the process frees it (a
        # segfault at exit in CI otherwise), and after the race was judged.
        cuda.cudaStreamSynchronize(b)
        done(**values)
    """)
    assert got["races"] == 1, got["report"]
    assert "fake_cuda_kernel_write on stream" in got["report"] and " writes [" in got["report"], got
    assert "+2048) of a 4096-byte allocation" in got["report"], got
    assert f"read by fake_cuda_kernel_read on stream {got['b']} at position 1" in got["report"], got
    assert got["report"].strip().endswith("ordering it after that read"), got


def test_stream_ordered_allocation_is_a_write_on_its_stream(libs):
    got = _values(libs, """
        a, b = new_stream(NON_BLOCKING), new_stream(NON_BLOCKING)
        pointer = P()
        assert cuda.cudaMallocAsync(ctypes.byref(pointer), 256, a) == 0
        cuda.fake_cuda_kernel_write(b, pointer.value, 64, 1.0)
        done(races=races(), report=report())
    """)
    assert got["races"] == 1, got["report"]
    assert "allocated (stream-ordered) by cudaMallocAsync on stream" in got["report"], got


def test_a_copy_of_what_an_nccl_allreduce_writes_needs_a_wait(libs):
    got = _values(libs, """
        comm = comm_of_one()
        nccl_stream, copy_stream = new_stream(NON_BLOCKING), new_stream(NON_BLOCKING)
        send, recv, out = device_malloc(64), device_malloc(64), device_malloc(64)
        cuda.fake_cuda_kernel_write(nccl_stream, send, 16, 1.5)
        assert nccl.ncclAllReduce(send, recv, 16, FLOAT32, SUM, comm, nccl_stream) == 0
        cuda.cudaMemcpyAsync(out, recv, 64, D2D, copy_stream)  # no wait: a race
        unordered = races()
        message = report()
        e = new_event()
        cuda.cudaEventRecord(e, nccl_stream)
        cuda.cudaStreamWaitEvent(copy_stream, e, 0)
        cuda.cudaMemcpyAsync(out, recv, 64, D2D, copy_stream)
        cuda.cudaStreamSynchronize(copy_stream)
        done(unordered=unordered, races=races(), report=message, out=floats(out, 16))
    """)
    assert got["unordered"] == 1, got["report"]
    assert "race: cudaMemcpyAsync on stream" in got["report"], got
    assert "reads [" in got["report"] and "written by ncclAllReduce on stream" in got["report"], got
    assert got["races"] == 1, got  # the copy after the event wait is ordered
    assert got["out"] == [1.5] * 16, got


RACY = """
    a, b = new_stream(NON_BLOCKING), new_stream(NON_BLOCKING)
    buf = device_malloc(64)
    cuda.fake_cuda_kernel_write(a, buf, 16, 1.0)
    cuda.fake_cuda_kernel_write(b, buf, 16, 2.0)
    cuda.fake_cuda_fill_later(b, buf, 16, 3.0, 30 * 1000000)  # still queued at exit
"""


def test_fake_cuda_race_check_fails_a_racy_process_with_status_97_and_the_report(libs):
    started = time.monotonic()
    result = _run(libs, RACY, "print('end of main', flush=True)\n", env={"FAKE_CUDA_RACE_CHECK": "1"})
    assert result.returncode == 97, result
    assert "end of main" in result.stdout
    assert "fake CUDA (FAKE_CUDA_RACE_CHECK=1): 1 race(s) in process" in result.stderr, result.stderr
    assert "race: fake_cuda_kernel_write on stream" in result.stderr and "written by" in result.stderr
    assert time.monotonic() - started < 20, "exiting waited for the stream threads"
    # Without the variable the races are only counted; a clean process exits 0 with it.
    assert _run(libs, RACY).returncode == 0
    clean = _run(libs, "new_stream(); device_malloc(64)\n", env={"FAKE_CUDA_RACE_CHECK": "1"})
    assert clean.returncode == 0 and clean.stderr == "", clean


def test_reset_forgets_recorded_races(libs):
    got = _values(libs, RACY, """
        before = races()
        cuda.fake_cuda_reset_races()
        done(before=before, after=races(), report=report())
    """)
    assert got == {"before": 1, "after": 0, "report": ""}


# ---- contexts ----

def test_a_thread_that_never_set_a_device_creates_device_0s_context_with_its_first_event_query(libs):
    got = _values(libs, """
        count, device = I(), I()
        cuda.cudaGetDeviceCount(ctypes.byref(count)); cuda.cudaGetDevice(ctypes.byref(device))
        cuda.cudaGetErrorString(2); cuda.cudaRuntimeGetVersion(ctypes.byref(count))
        cuda.cudaDriverGetVersion(ctypes.byref(count))
        before = cuda.fake_cuda_context_count()
        cuda.cudaSetDevice(1)
        e = new_event()
        cuda.cudaEventRecord(e, None)
        cuda.cudaEventSynchronize(e)
        query = in_thread("watchdog", lambda: cuda.cudaEventQuery(e))
        done(before=before, count=cuda.fake_cuda_context_count(), query=query,
             has=[cuda.fake_cuda_has_context(d) for d in range(4)],
             report=cuda.fake_cuda_context_report().decode(), main=open("/proc/self/comm").read().strip())
    """)
    assert got["before"] == 0, got  # those calls need no context
    assert got["query"] == 0 and got["count"] == 2 and got["has"] == [1, 1, 0, 0], got
    assert got["report"] == ('device 0: created by cudaEventQuery on thread "watchdog" '
                             '(which had not called cudaSetDevice)\n'
                             f'device 1: created by cudaSetDevice on thread "{got["main"]} (main)"\n'), got


def test_a_thread_that_set_device_2_first_creates_only_that_context(libs):
    got = _values(libs, """
        def work():
            cuda.cudaSetDevice(2)
            buf = device_malloc(64)
            s = new_stream()
            cuda.cudaMemcpyAsync(buf, buf, 64, D2D, s)
            return cuda.cudaStreamSynchronize(s)
        in_thread("worker", work)
        done(count=cuda.fake_cuda_context_count(), has=[cuda.fake_cuda_has_context(d) for d in range(4)],
             report=cuda.fake_cuda_context_report().decode())
    """)
    assert got["count"] == 1 and got["has"] == [0, 0, 1, 0], got
    assert got["report"] == 'device 2: created by cudaSetDevice on thread "worker"\n', got


# ---- stream capture ----

CAPTURE = """
    s = new_stream(NON_BLOCKING)
    buf = device_malloc(64)
    e = new_event()
    cuda.cudaEventRecord(e, new_stream(NON_BLOCKING))
    cuda.cudaEventSynchronize(e)
    assert cuda.cudaStreamBeginCapture(s, 0) == 0  # global mode
    status = I()
    cuda.cudaStreamIsCapturing(s, ctypes.byref(status))
    capturing = status.value
    assert cuda.fake_cuda_kernel_write(s, buf, 16, 7.0) == 0  # recorded, not run
"""


def test_a_global_capture_is_invalidated_by_an_event_query_on_another_global_mode_thread(libs):
    got = _values(libs, CAPTURE, """
        query = in_thread("poller", lambda: cuda.cudaEventQuery(e))
        cuda.cudaStreamIsCapturing(s, ctypes.byref(status))
        graph = P()
        end = cuda.cudaStreamEndCapture(s, ctypes.byref(graph))
        cuda.cudaStreamIsCapturing(s, ctypes.byref(status))
        done(capturing=capturing, query=query, end=end, graph=graph.value, after=status.value,
             invalidated=cuda.fake_cuda_invalidated_captures(), why=cuda.fake_cuda_capture_report().decode(),
             value=floats(buf, 1)[0])
    """)
    assert got["capturing"] == 1 and got["query"] == 900, got
    assert got["end"] == 901 and got["graph"] is None and got["after"] == 0, got  # 901: invalidated
    assert got["invalidated"] == 1, got
    why = 'cudaEventQuery on thread "poller" (in global capture mode) is not allowed while it captures'
    assert why in got["why"], got
    assert got["value"] != 7.0, "a captured kernel ran"


def test_a_thread_in_thread_local_mode_may_query_while_another_captures_and_the_graph_replays(libs):
    got = _values(libs, CAPTURE, """
        def poll():
            mode = I(1)  # thread-local
            assert cuda.cudaThreadExchangeStreamCaptureMode(ctypes.byref(mode)) == 0
            return [mode.value, cuda.cudaEventQuery(e), cuda.cudaMalloc(ctypes.byref(P()), 8)]
        previous, query, malloc = in_thread("poller", poll)
        time.sleep(0.01)
        not_run = floats(buf, 1)[0]
        graph, exec_ = P(), P()
        end = cuda.cudaStreamEndCapture(s, ctypes.byref(graph))
        assert cuda.cudaGraphInstantiate(ctypes.byref(exec_), graph, 0) == 0
        assert cuda.cudaGraphLaunch(exec_, s) == 0
        cuda.cudaStreamSynchronize(s)
        cuda.cudaGraphExecDestroy(exec_); cuda.cudaGraphDestroy(graph)
        done(previous=previous, query=query, malloc=malloc, end=end, not_run=not_run, value=floats(buf, 1)[0],
             invalidated=cuda.fake_cuda_invalidated_captures())
    """)
    assert got["previous"] == 0 and got["query"] == 0 and got["malloc"] == 0, got
    assert got["end"] == 0 and got["invalidated"] == 0, got
    assert got["not_run"] != 7.0 and got["value"] == 7.0, got


def test_the_capturing_thread_may_not_malloc_unless_its_capture_is_relaxed(libs):
    got = _values(libs, """
        def capture(mode):
            s = new_stream(NON_BLOCKING)
            assert cuda.cudaStreamBeginCapture(s, mode) == 0
            malloc = cuda.cudaMalloc(ctypes.byref(P()), 8)
            return [malloc, cuda.cudaStreamEndCapture(s, ctypes.byref(P()))]
        done(global_=capture(0), thread_local=capture(1), relaxed=capture(2))
    """)
    assert got["global_"] == [900, 901], got
    assert got["thread_local"] == [900, 901], got
    assert got["relaxed"] == [0, 0], got


def test_legacy_stream_work_while_a_blocking_stream_captures_is_refused(libs):
    got = _values(libs, """
        s = new_stream(0)
        buf = device_malloc(64)
        mode = I(2)
        cuda.cudaThreadExchangeStreamCaptureMode(ctypes.byref(mode))  # relaxed: only the legacy rule applies
        assert cuda.cudaStreamBeginCapture(s, 2) == 0
        legacy = cuda.fake_cuda_kernel_write(None, buf, 16, 1.0)
        done(legacy=legacy, end=cuda.cudaStreamEndCapture(s, ctypes.byref(P())),
             why=cuda.fake_cuda_capture_report().decode())
    """)
    assert got["legacy"] == 906 and got["end"] == 901, got
    assert "would make it wait for capturing stream" in got["why"], got


def test_a_capturing_stream_may_not_wait_for_an_event_recorded_outside_the_capture(libs):
    got = _values(libs, CAPTURE, """
        wait = cuda.cudaStreamWaitEvent(s, e, 0)  # as a collective's ready wait would
        later = cuda.fake_cuda_kernel_write(s, buf, 16, 1.0)
        done(wait=wait, later=later, end=cuda.cudaStreamEndCapture(s, ctypes.byref(P())),
             why=cuda.fake_cuda_capture_report().decode())
    """)
    assert got["wait"] == 905, got  # cudaErrorStreamCaptureIsolation
    assert got["later"] == 901 and got["end"] == 901, got
    assert "wait for an event recorded outside the capture" in got["why"], got


# ---- cudaMemcpyBatchAsync, CUDA 12.8 and 13.0 ----

BATCH = """
    version = I()
    cuda.cudaRuntimeGetVersion(ctypes.byref(version))

    class Location(ctypes.Structure):
        _fields_ = [("type", I), ("id", I)]

    class Attributes(ctypes.Structure):
        _fields_ = [("srcAccessOrder", I), ("srcLocHint", Location), ("dstLocHint", Location), ("flags", U)]

    def batch(dsts, srcs, sizes, orders, idxs, stream):
        n, m = len(dsts), len(orders)
        args = [(P * n)(*dsts), (P * n)(*srcs), (S * n)(*sizes), S(n),
                (Attributes * m)(*[Attributes(o) for o in orders]), (S * m)(*idxs), S(m)]
        fail = S(12345)
        if version.value < 13000:
            args.append(ctypes.byref(fail))
        rc = cuda.cudaMemcpyBatchAsync(*args, P(stream))
        return rc, fail.value
"""


@pytest.mark.parametrize("version", [12080, 13000])
def test_memcpy_batch_copies_every_pair_as_one_stream_item(libs, tmp_path, version):
    cudart = fake_gpu.build_cudart(tmp_path, version)
    assert cudart.name == ("libcudart.so.13" if version >= 13000 else "libcudart.so.12")
    got = _values({**libs, "HVDLITE_CUDART_LIBRARY": str(cudart)}, BATCH, """
        s = new_stream(NON_BLOCKING)
        srcs = [device_malloc(64) for _ in range(3)]
        dsts = [device_malloc(64) for _ in range(3)]
        for i, src in enumerate(srcs):
            (ctypes.c_float * 16).from_address(src)[:] = [float(i + 1)] * 16
        pinned = P()
        cuda.cudaMallocHost(ctypes.byref(pinned), 64)
        staged = (ctypes.c_float * 16).from_address(pinned.value)
        staged[:] = [9.0] * 16
        dsts.append(device_malloc(64))
        started = time.monotonic()
        rc, fail = batch(dsts, srcs + [pinned.value], [64] * 4, [1, 2], [0, 3], s)
        staged[:] = [0.0] * 16  # srcAccessOrder 2: read during the call
        cuda.cudaStreamSynchronize(s)
        took = time.monotonic() - started
        done(version=version.value, rc=rc, took=took, batches=cuda.fake_cuda_batches(),
             kinds=[cuda.fake_cuda_copies(k) for k in range(4)], values=[floats(d, 16) for d in dsts],
             races=races())
    """, env={"FAKE_CUDA_KERNEL_US": "200000"})
    assert got["version"] == version and got["rc"] == 0, got
    assert got["values"] == [[1.0] * 16, [2.0] * 16, [3.0] * 16, [9.0] * 16], got
    assert got["batches"] == 1 and got["kinds"] == [0, 1, 0, 3], got  # by the kind CUDA infers
    assert 0.2 <= got["took"] < 0.55, got  # one kernel's time (0.2 s), not four
    assert got["races"] == 0, got


@pytest.mark.parametrize("version", [12080, 13000])
def test_memcpy_batch_is_checked_like_cuda_and_its_accesses_tracked(libs, tmp_path, version):
    cudart = fake_gpu.build_cudart(tmp_path, version)
    got = _values({**libs, "HVDLITE_CUDART_LIBRARY": str(cudart)}, BATCH, """
        a, s = new_stream(NON_BLOCKING), new_stream(NON_BLOCKING)
        x, y = device_malloc(64), device_malloc(64)
        refused = {
            "order 0": batch([y], [x], [64], [0], [0], s),
            "first index not 0": batch([y, x], [x, y], [64, 64], [1], [1], s),
            "indices not increasing": batch([y, x], [x, y], [64, 64], [1, 1], [0, 0], s),
            "legacy stream": batch([y], [x], [64], [1], [0], None),
        }
        cuda.fake_cuda_kernel_write(a, x, 16, 1.0)
        rc, _ = batch([y], [x], [64], [1], [0], s)  # reads x: not ordered after that write
        done(refused=refused, rc=rc, batches=cuda.fake_cuda_batches(), report=report())
    """)
    want_fail = 0 if version < 13000 else 12345  # failIdx exists before 13.0 only
    assert got["refused"]["order 0"] == [1, want_fail], got
    assert all(rc == 1 for rc, _ in got["refused"].values()), got  # cudaErrorInvalidValue
    assert got["rc"] == 0 and got["batches"] == 1, got
    assert "race: cudaMemcpyBatchAsync on stream" in got["report"], got
    assert "written by fake_cuda_kernel_write" in got["report"], got


def test_a_cuda_12_4_runtime_has_no_memcpy_batch(libs, tmp_path):
    cudart = fake_gpu.build_cudart(tmp_path, 12040)
    got = _values({**libs, "HVDLITE_CUDART_LIBRARY": str(cudart)}, """
        runtime, driver = I(), I()
        cuda.cudaRuntimeGetVersion(ctypes.byref(runtime)); cuda.cudaDriverGetVersion(ctypes.byref(driver))
        done(runtime=runtime.value, driver=driver.value, batch=hasattr(cuda, "cudaMemcpyBatchAsync"))
    """)
    assert got == {"runtime": 12040, "driver": 13000, "batch": False}


# ---- the fake NCCL ----

def test_finalize_then_destroy_counts_as_finalized_and_destroy_alone_does_not(libs):
    got = _values(libs, """
        s = new_stream(NON_BLOCKING)
        buf = device_malloc(64)
        blocking = comm_of_one()
        cuda.fake_cuda_fill_later(s, buf, 16, 1.0, 50000)  # keeps the allreduce queued a while
        assert nccl.ncclAllReduce(buf, buf, 16, FLOAT32, SUM, blocking, s) == 0
        finalize_blocking = nccl.ncclCommFinalize(blocking)  # returns once the allreduce has run
        idle = cuda.cudaStreamQuery(s)
        nccl.ncclCommDestroy(blocking)
        counts = [nccl.fake_nccl_finalized(), nccl.fake_nccl_unfinalized_destroys()]
        non_blocking = comm_of_one(blocking=False)
        # 1 s: still queued when finalize is asked, however loaded the machine
        cuda.fake_cuda_fill_later(s, buf, 16, 1.0, 1000000)
        assert nccl.ncclAllReduce(buf, buf, 16, FLOAT32, SUM, non_blocking, s) == 0
        finalize = nccl.ncclCommFinalize(non_blocking)
        in_progress = async_error(non_blocking)
        settled = settle(non_blocking)
        nccl.ncclCommDestroy(non_blocking)
        nccl.ncclCommDestroy(comm_of_one())
        done(finalize_blocking=finalize_blocking, idle=idle, counts=counts, finalize=finalize,
             in_progress=in_progress, settled=settled, finalized=nccl.fake_nccl_finalized(),
             unfinalized=nccl.fake_nccl_unfinalized_destroys(), misuses=nccl.fake_nccl_misuse_count())
    """)
    assert got["finalize_blocking"] == 0 and got["idle"] == 0 and got["counts"] == [1, 0], got
    assert got["finalize"] == 7 and got["in_progress"] == 7 and got["settled"] == 0, got
    assert got["finalized"] == 2 and got["unfinalized"] == 1 and got["misuses"] == 0, got


def test_in_progress_enqueues_and_calls_made_before_they_complete_are_misuse(libs):
    got = _values(libs, """
        s = new_stream(NON_BLOCKING)
        buf = device_malloc(64)
        cuda.fake_cuda_kernel_write(s, buf, 16, 2.0)
        comm = comm_of_one(blocking=False)
        op, scale = I(), F(0.5)
        assert nccl.ncclRedOpCreatePreMulSum(ctypes.byref(op), ctypes.byref(scale), FLOAT32, 1, comm) == 0
        first = nccl.ncclAllReduce(buf, buf, 16, FLOAT32, op.value, comm, s)
        pending = async_error(comm)
        destroy_op = nccl.ncclRedOpDestroy(op.value, comm)  # too early
        second = nccl.ncclAllReduce(buf, buf, 16, FLOAT32, SUM, comm, s)  # too early
        settled = settle(comm)
        cuda.cudaStreamSynchronize(s)
        done(first=first, pending=pending, destroy_op=destroy_op, second=second, settled=settled,
             value=floats(buf, 1)[0], misuses=nccl.fake_nccl_misuse_count(),
             report=nccl.fake_nccl_misuse_report().decode(), races=races())
    """, env={"FAKE_NCCL_INPROGRESS": "500"})  # in progress for 0.5 s: seen however loaded the machine
    assert got["first"] == 7 and got["pending"] == 7 and got["settled"] == 0, got
    assert got["destroy_op"] == 5 and got["second"] == 5, got  # ncclInvalidUsage
    assert got["value"] == 1.0, got  # 2.0 scaled by 0.5, once: the refused allreduce did not run
    assert got["misuses"] == 2 and got["races"] == 0, got
    lines = got["report"].splitlines()
    assert lines[0].startswith("ncclRedOpDestroy on communicator 0x"), lines
    assert "while it still reports ncclInProgress (from ncclAllReduce)" in lines[0], lines
    assert lines[1].startswith("ncclAllReduce on communicator"), lines


def test_abort_from_another_thread_while_a_creation_or_an_enqueue_is_pending(libs):
    got = _values(libs, """
        uid = UniqueId()
        nccl.ncclGetUniqueId(ctypes.byref(uid))
        lonely = P()
        config = Config(ctypes.sizeof(Config), 0xcafebeef, 21400, 0)
        created = nccl.ncclCommInitRankConfig(ctypes.byref(lonely), 2, uid, 0, ctypes.byref(config))
        time.sleep(0.01)  # rank 1 never comes: the creation stays pending
        in_thread("aborter", lambda: nccl.ncclCommAbort(lonely))
        s = new_stream(NON_BLOCKING)
        buf = device_malloc(64)
        comm = comm_of_one(blocking=False)
        enqueue = nccl.ncclAllReduce(buf, buf, 16, FLOAT32, SUM, comm, s)
        in_thread("aborter", lambda: nccl.ncclCommAbort(comm))
        time.sleep(0.05)  # the helper thread finds the communicator aborted
        cuda.cudaStreamSynchronize(s)
        done(created=created, enqueue=enqueue)
    """, env={"FAKE_NCCL_INPROGRESS": "1"})
    assert got == {"created": 7, "enqueue": 7}


def test_a_one_rank_scaled_sum_leaves_a_tail_unwritten_as_nccl_before_2_29_7_does(libs):
    """NVIDIA/nccl#1950, reproduced so that the core's workaround (Note
    [One-rank scaled sums] in csrc/transport/nccl/nccl_communicator.cc) is
    tested: 100003 floats run on 25 blocks of 4000, the last 3 left as they were."""
    got = _values(libs, """
        comm = comm_of_one()
        s = new_stream(NON_BLOCKING)
        n = 100003
        buf = device_malloc(4 * n)
        data = (ctypes.c_float * n).from_address(buf)
        for i in range(n):
            data[i] = 1.0
        op, three = I(), ctypes.c_float(3.0)
        assert nccl.ncclRedOpCreatePreMulSum(ctypes.byref(op), ctypes.byref(three), FLOAT32, 1, comm) == 0
        assert nccl.ncclAllReduce(buf, buf, n, FLOAT32, op.value, comm, s) == 0
        cuda.cudaStreamSynchronize(s)
        whole = list(data[n - 5:n])
        for i in range(n):
            data[i] = 1.0
        assert nccl.ncclAllReduce(buf, buf, 4096, FLOAT32, op.value, comm, s) == 0  # 16 KiB: one block
        cuda.cudaStreamSynchronize(s)
        done(whole=whole, small=data[4095], plain=data[4096])
    """)
    assert got["whole"] == [3.0, 3.0, 1.0, 1.0, 1.0], got
    assert got["small"] == 3.0 and got["plain"] == 1.0, got
