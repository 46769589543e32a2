"""hvdliterun: runs a command as the N ranks of one job.

    hvdliterun -np 4 python train.py --lr 0.1
    hvdliterun -np 8 -H host1:4,host2:4 python train.py
    hvdliterun -np 8 --hostfile hosts.txt --mpi python train.py

It starts the job's rendezvous store, starts the ranks (here, over ssh, or
through mpirun), gives each its place in the job through HVDLITE_*/HOROVOD_*
variables, prefixes every output line with its rank, forwards
SIGINT/SIGTERM, stops the whole job when one rank fails, and exits with that
rank's exit code.
"""
import contextlib
import os
import queue
import signal
import sys
import threading

from hvdlite.runner import build_info, mpi, network
from hvdlite.runner.arguments import parse_args
from hvdlite.runner.environment import job_environment, tuning_environment
from hvdlite.runner.hosts import Host, HostError, is_local, parse_host_list, parse_hostfile, \
    place_ranks
from hvdlite.runner.job import Job
from hvdlite.runner.output import Console
from hvdlite.runner.processes import LaunchError
from hvdlite.runner.remote import RemoteOptions
from hvdlite.runner.secret import make_job_id, make_secret
from hvdlite.runner.store import StoreServer
from hvdlite.runner.supervisor import Supervisor

LOCAL_ADDR = "127.0.0.1"
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
USAGE_ERROR = 2


def main(argv=None):
    """Entry point of `hvdliterun` and `python -m hvdlite.runner`; returns the
    exit code."""
    args = parse_args(argv)
    console = Console()
    if args.check_build:
        print(build_info.describe())
        return 0
    try:
        hosts = _hosts(args)
        placements = place_ranks(hosts, args.num_proc)
    except HostError as error:
        console.write_line("stderr", f"hvdliterun: error: {error}")
        return USAGE_ERROR
    missing = _missing_script(args.command)
    if missing and is_local(placements[0].name):
        console.write_line("stderr", f"hvdliterun: error: the script {missing!r} does not "
                                     f"exist (looked in {os.getcwd()})")
        return USAGE_ERROR
    if args.output_filename:
        try:
            os.makedirs(args.output_filename, exist_ok=True)
        except OSError as error:
            console.message(f"cannot create --output-filename directory "
                            f"{args.output_filename!r}: {error.strerror or error}")
            return 1
    if args.autotune:
        console.message("warning: this hvdlite core has no autotuner yet; --autotune sets "
                        "HVDLITE_AUTOTUNE but fusion threshold and cycle time stay as given")
    interfaces = args.network_interface.split(",") if args.network_interface else None
    all_local = all(is_local(p.name) for p in placements)
    try:
        candidates = [LOCAL_ADDR] if all_local else network.store_candidates(interfaces)
    except network.NetworkError as error:
        console.message(str(error))
        return 1
    secret, job_id = make_secret(), make_job_id()
    if args.mpi and mpi.core_does_rendezvous():
        return mpi.run(args, hosts, {}, console)
    # With remote hosts the store must be reachable from them: listen on
    # every interface (each connection still has to prove the job secret).
    store = StoreServer(secret, host=LOCAL_ADDR if all_local else "0.0.0.0").start()
    try:
        if args.verbose:
            console.message(f"job {job_id}: rendezvous store on "
                            f"{' / '.join(candidates)}:{store.port}")
        job_env = job_environment(
            store_addr=LOCAL_ADDR, store_port=store.port, secret=secret, job_id=job_id,
            bind_addr=LOCAL_ADDR, start_timeout=f"{args.start_timeout:g}")
        job_env.update(tuning_environment(args))
        if args.mpi:
            store_addr = interfaces and network.interface_address(interfaces) or candidates[0]
            # Each rank picks its own address towards the store (common/environment.py).
            job_env["HVDLITE_STORE_ADDR"] = store_addr
            del job_env["HVDLITE_BIND_ADDR"]
            return mpi.run(args, hosts, job_env, console)
        remote_options = RemoteOptions(
            store_candidates=candidates, store_port=store.port,
            connect_timeout=args.start_timeout, network_interfaces=interfaces,
            ssh_port=args.ssh_port, ssh_identity_file=args.ssh_identity_file)
        return _run_job(args, placements, console, job_env, remote_options)
    finally:
        store.stop()


def _missing_script(command):
    """The script of a `python script.py ...` command, if it does not exist here."""
    if len(command) < 2 or not os.path.basename(command[0]).startswith("python"):
        return None
    script = command[1]
    if script.startswith("-") or not script.endswith(".py") or os.path.exists(script):
        return None
    return script


def _hosts(args):
    if args.hosts:
        return parse_host_list(args.hosts)
    if args.hostfile:
        return parse_hostfile(args.hostfile)
    return [Host("localhost", args.num_proc)]


def _run_job(args, placements, console, job_env, remote_options):
    events = queue.SimpleQueue()
    environment = dict(os.environ)
    environment.update(job_env)
    job = Job(args.command, placements, environment, console, events,
              output_directory=args.output_filename, verbose=args.verbose,
              remote_options=remote_options)
    # Handlers go in before the first rank starts, so that no signal can
    # leave a rank behind.
    with forwarded_signals(events):
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
def forwarded_signals(events):
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
