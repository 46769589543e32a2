"""CPU a rank uses while it waits for peers that do not come, per case:

    python bench/waiting.py [--np 2] [--seconds 30] [--cases late,disagreement,stall]

Starts `hvdliterun -np N python bench/waiting.py --worker CASE` for each case;
every rank measures its process's CPU time (all threads: the framework's,
blocked in synchronize(), and hvdlite's background thread) over --seconds of
waiting:

  late          rank 0 allreduces; the other ranks sleep through the window
                (computing, loading data), then submit theirs
  disagreement  rank 1 allgathers 'b' while the others allreduce 'a': nothing
                can complete until the stall shutdown fails both
  stall         rank 1 is frozen (SIGSTOP) while rank 0 allreduces: rank 0
                waits inside a transport call (rank 1 cannot measure)

Prints one table row per case: the CPU % of one core each rank used. --counts
preloads the wait counter (bench/wait_counts.py) and adds a row per case of
each rank's shared-memory yields, futex sleeps and health checks (/proc
reads) per second of the window.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import wait_counts

CASES = ("late", "disagreement", "stall")
SETTLE = 1.0  # past the back-off's ramp (Note [Backing off a stall])
RESULT = re.compile(r"^\[(\d+)\]<stdout>:waiting (\S+) cpu ([0-9.]+) s over ([0-9.]+) s(.*)$")
COUNTED = ("shm_yields", "futex_waits", "futex_timeouts", "futex_wakes", "proc_reads")


def measure(seconds):
    """(CPU seconds, wall seconds, wait counts or None) of this process over
    `seconds` of sleep."""
    counted, cpu, wall = wait_counts.read(), time.process_time(), time.monotonic()
    time.sleep(seconds)
    after = wait_counts.read()
    return (time.process_time() - cpu, time.monotonic() - wall,
            wait_counts.since(counted, after) if counted else None)


def report(case, used, span, counts):
    extra = "".join(f" {name} {counts[name]}" for name in COUNTED) if counts else ""
    print(f"waiting {case} cpu {used:.3f} s over {span:.2f} s{extra}", flush=True)


def blocked_in(wait, case, seconds, after=None):
    """Calls wait() (a blocking hvdlite call) while another thread measures
    this process's CPU over `seconds` of it, then calls after()."""
    def window():
        time.sleep(SETTLE)
        report(case, *measure(seconds))
        if after:
            after()

    meter = threading.Thread(target=window)
    meter.start()
    try:
        wait()
    finally:
        meter.join()


def worker(case, seconds):
    import hvdlite.numpy as hvd

    hvd.init()
    rank = hvd.rank()
    pids = hvd.allgather(np.array([os.getpid()], np.int64), name="pids")
    if case == "late":
        if rank == 0:
            handle = hvd.allreduce_async(np.ones(4, np.float32), name="late")
            blocked_in(lambda: hvd.synchronize(handle), case, seconds)
        else:
            time.sleep(SETTLE)
            report(case, *measure(seconds))  # computing, loading data
            time.sleep(0.5)
            hvd.allreduce(np.ones(4, np.float32), name="late")
    elif case == "disagreement":
        if rank == 1:
            handle = hvd.allgather_async(np.ones((2, 3), np.float32), name="b")
        else:
            handle = hvd.allreduce_async(np.ones(4, np.float32), name="a")

        def wait():
            try:
                hvd.synchronize(handle)  # ends at the stall shutdown time
            except hvd.HvdliteInternalError:
                pass

        blocked_in(wait, case, seconds)
    elif rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
        hvd.allreduce(np.ones(4, np.float32), name="frozen")
    else:
        handle = hvd.allreduce_async(np.ones(4, np.float32), name="frozen")
        resume = (lambda: os.kill(int(pids[1]), signal.SIGCONT)) if rank == 0 else None
        blocked_in(lambda: hvd.synchronize(handle), case, seconds, resume)
    hvd.shutdown()


def run_case(case, np_, seconds, counts=False):
    """{rank: (CPU %, {counter: per second} or None)}."""
    env = wait_counts.preload(os.environ) if counts else dict(os.environ)
    env.pop("PYTHONPATH", None)
    # The disagreement ends a few seconds after the window; nothing else stalls
    # long enough to be reported (default check time 60 s).
    env["HVDLITE_STALL_SHUTDOWN_TIME_SECONDS"] = f"{seconds + 4:g}"
    command = [sys.executable, "-m", "hvdlite.runner", "-np", str(np_), sys.executable,
               os.path.abspath(__file__), "--worker", case, "--seconds", f"{seconds:g}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=seconds + 120)
    rows = {}
    for line in done.stdout.splitlines():
        found = RESULT.match(line)
        if found and found.group(2) == case:
            span = float(found.group(4))
            words = found.group(5).split()
            rates = {name: int(value) / span for name, value in zip(words[::2], words[1::2])}
            rows[int(found.group(1))] = (100.0 * float(found.group(3)) / span, rates or None)
    if not rows:
        raise SystemExit(f"{case}: no measurement (exit {done.returncode})\n{done.stdout}\n{done.stderr}")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--counts", action="store_true",
                        help="also count the shm waits' system calls (bench/wait_counts.py)")
    parser.add_argument("--worker", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.seconds)
        return
    print(f"CPU % of one core while waiting, {args.np} ranks, {args.seconds:g} s window")
    print(f"{'case':<14}" + "".join(f"{'rank ' + str(r):>10}" for r in range(args.np)))
    for case in args.cases.split(","):
        rows = run_case(case, args.np, args.seconds, args.counts)
        cells = "".join(f"{rows[r][0]:>9.1f}%" if r in rows else f"{'-':>10}" for r in range(args.np))
        print(f"{case:<14}{cells}", flush=True)
        for r, (_, rates) in sorted(rows.items()):
            if rates:
                print(f"{'':<14}rank {r} per second: "
                      + ", ".join(f"{name} {rate:.1f}" for name, rate in rates.items()), flush=True)


if __name__ == "__main__":
    main()
