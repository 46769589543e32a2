"""hvdliterun: runs a command as the N ranks of one job on this host.

    hvdliterun -np 4 python train.py --lr 0.1

It starts the job's rendezvous store, gives each rank its place in the job
through HVDLITE_*/HOROVOD_* variables, prefixes every output line with its
rank, forwards SIGINT/SIGTERM, stops the whole job when one rank fails, and
exits with that rank's exit code.
"""
import argparse
import contextlib
import os
import queue
import signal
import socket
import sys
import threading

from hvdlite.runner.environment import job_environment
from hvdlite.runner.job import Job, LaunchError
from hvdlite.runner.output import Console
from hvdlite.runner.secret import make_job_id, make_secret
from hvdlite.runner.store import StoreServer
from hvdlite.runner.supervisor import Supervisor

# One host only for now: the store and every data connection stay on loopback.
LOCAL_ADDR = "127.0.0.1"
DEFAULT_START_TIMEOUT_S = 30.0
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def parse_args(argv=None):
    """Parses hvdliterun's flags; everything from the first positional
    argument on is the command, its own flags included. Exits with code 2
    on bad input."""
    parser = argparse.ArgumentParser(
        prog="hvdliterun",
        usage="hvdliterun -np N [options] command [args ...]",
        description="Run a command as the N ranks of one hvdlite (Horovod-compatible) job.")
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=int, required=True,
                        metavar="N", help="number of ranks to start")
    parser.add_argument("--verbose", action="store_true",
                        help="print what the launcher starts")
    parser.add_argument("--start-timeout", type=float, default=DEFAULT_START_TIMEOUT_S,
                        metavar="S", help="seconds the ranks wait for each other at "
                        f"start-up (default {DEFAULT_START_TIMEOUT_S:g})")
    parser.add_argument("--output-filename", metavar="DIR",
                        help="also write each rank's output to DIR/rank.<r>/stdout "
                        "and DIR/rank.<r>/stderr")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program every rank runs, and its arguments")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("missing the command to run, e.g. `hvdliterun -np 2 python train.py`")
    if args.num_proc < 1:
        parser.error(f"-np must be at least 1, got {args.num_proc}")
    if args.start_timeout <= 0:
        parser.error(f"--start-timeout must be positive, got {args.start_timeout:g}")
    return args


def main(argv=None):
    """Entry point of `hvdliterun` and `python -m hvdlite.runner`; returns the
    exit code."""
    args = parse_args(argv)
    console = Console()
    if args.output_filename:
        try:
            os.makedirs(args.output_filename, exist_ok=True)
        except OSError as error:
            console.message(f"cannot create --output-filename directory "
                            f"{args.output_filename!r}: {error.strerror or error}")
            return 1
    secret, job_id = make_secret(), make_job_id()
    store = StoreServer(secret, host=LOCAL_ADDR).start()
    try:
        if args.verbose:
            console.message(f"job {job_id}: rendezvous store on {LOCAL_ADDR}:{store.port}")
        return _run_job(args, console, job_environment(
            store_addr=LOCAL_ADDR, store_port=store.port, secret=secret, job_id=job_id,
            bind_addr=LOCAL_ADDR, start_timeout=f"{args.start_timeout:g}"))
    finally:
        store.stop()


def _run_job(args, console, job_env):
    events = queue.SimpleQueue()
    environment = dict(os.environ)
    environment.update(job_env)
    job = Job(args.command, args.num_proc, environment, socket.gethostname(), console,
              events, output_directory=args.output_filename, verbose=args.verbose)
    # Handlers go in before the first rank starts, so that no signal can
    # leave a rank behind.
    with _forwarded_signals(events):
        try:
            job.start()
            return Supervisor(job, console, events).run()
        except LaunchError as error:
            console.message(str(error))
            return error.exit_code
        finally:
            job.kill()
            job.wait()


@contextlib.contextmanager
def _forwarded_signals(events):
    """Turns SIGINT/SIGTERM/SIGHUP into ("signal", signum) events while the
    job runs. SimpleQueue.put is safe to call from a signal handler."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    handler = lambda signum, frame: events.put(("signal", signum))  # noqa: E731
    previous = {signum: signal.signal(signum, handler) for signum in FORWARDED_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


if __name__ == "__main__":
    sys.exit(main())
