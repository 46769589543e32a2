"""What a rank's shared-memory waits cost, counted (bench/wait_counts.c):
yields, futex sleeps and wakes, health checks. Counts do not depend on how
loaded the machine is the way wall times do, so they compare two builds on a
shared machine.

A launcher calls preload(env) to have its ranks load the counter; a rank
calls read() (None when it was started without it) and subtracts two readings.
"""
import ctypes
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "wait_counts.c"
NAMES = ("shm_yields", "other_yields", "futex_waits", "futex_timeouts", "futex_wakes", "futex_woken",
         "proc_reads", "kill_probes", "slept_under_50us", "slept_under_200us", "slept_under_1ms",
         "slept_longer")


def library():
    """The counter's shared library, built from wait_counts.c once per version of it."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    built = Path(tempfile.gettempdir()) / f"hvdlite-wait-counts-{digest}.so"
    if not built.exists():
        partial = built.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(partial), str(SOURCE), "-ldl"], check=True)
        partial.replace(built)
    return built


def preload(env):
    """`env` with the counter preloaded into every process started with it."""
    env = dict(env)
    env["LD_PRELOAD"] = " ".join(filter(None, [str(library()), env.get("LD_PRELOAD", "")]))
    return env


def read():
    """{name: count so far} of this process, or None without the counter."""
    try:
        function = ctypes.CDLL(None).hvdlite_wait_counts
    except AttributeError:
        return None
    values = (ctypes.c_longlong * len(NAMES))()
    function(values)
    return dict(zip(NAMES, values))


def since(before, after):
    return {name: after[name] - before[name] for name in NAMES}


def thread_times(tid):
    """(ns on a CPU, ns waiting on a run queue) of thread `tid` of this process
    so far (/proc's schedstat: nanoseconds, where /proc's stat counts ticks)."""
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        ran, waited, _ = f.read().split()
    return int(ran), int(waited)


def thread_named(name):
    """The id of this process's thread called `name` (its comm)."""
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            if f.read().strip() == name:
                return int(tid)
    raise LookupError(f"no thread named {name!r} in this process")


if __name__ == "__main__":
    print(library())  # LD_PRELOAD=$(python bench/wait_counts.py) hvdliterun ...
