"""A rank that records its pid (and its child's) in PID_DIR/rank.<r>, then
sleeps; with --fail R:exit3 or R:sigkill, rank R instead fails once every
rank has recorded its pid."""
import argparse
import os
import signal
import subprocess
import sys
import time


def record_pids(pid_dir, rank, pids):
    path = os.path.join(pid_dir, f"rank.{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(" ".join(map(str, pids)))
    os.rename(path + ".tmp", path)  # readers never see a half-written file


def wait_for_all_ranks(pid_dir, size):
    deadline = time.monotonic() + 30
    while len([n for n in os.listdir(pid_dir) if not n.endswith(".tmp")]) < size:
        if time.monotonic() > deadline:
            sys.exit("timed out waiting for the other ranks to start")
        time.sleep(0.02)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("pid_dir")
    parser.add_argument("--fail", default="", help="RANK:exit3 or RANK:sigkill")
    parser.add_argument("--ignore-signals", action="store_true")
    parser.add_argument("--child", action="store_true", help="also start `sleep 60`")
    args = parser.parse_args()
    rank, size = int(os.environ["HVDLITE_RANK"]), int(os.environ["HVDLITE_SIZE"])
    if args.ignore_signals:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pids = [os.getpid()]
    if args.child:
        pids.append(subprocess.Popen(["sleep", "60"]).pid)
    record_pids(args.pid_dir, rank, pids)
    fail_rank, _, how = args.fail.partition(":")
    if fail_rank and int(fail_rank) == rank:
        wait_for_all_ranks(args.pid_dir, size)
        print(f"rank {rank} is failing on purpose", file=sys.stderr, flush=True)
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(3)
    time.sleep(60)


if __name__ == "__main__":
    main()
