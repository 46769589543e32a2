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
import os
import queue
import sys

from hvdlite.common import logs
from hvdlite.runner import build_info, mpi
from hvdlite.runner.arguments import ignored_flag_notes, parse_args
from hvdlite.runner.elastic.launch import run_elastic
from hvdlite.runner.environment import tuning_environment
from hvdlite.runner.hosts import Host, HostError, is_local, parse_host_list, parse_hostfile, \
    place_ranks
from hvdlite.runner.job import Job
from hvdlite.runner.job_setup import JobSetup
from hvdlite.runner.output import Console
from hvdlite.runner.processes import LaunchError
from hvdlite.runner.signals import forwarded_signals
from hvdlite.runner.supervisor import Supervisor

USAGE_ERROR = 2


class _Stop(Exception):
    """Ends the launcher before any rank started: a message and an exit code."""

    def __init__(self, message, exit_code):
        super().__init__(message)
        self.exit_code = exit_code


def main(argv=None):
    """Entry point of `hvdliterun` and `python -m hvdlite.runner`; returns the
    exit code."""
    args = parse_args(argv)
    if args.log_level:
        logs.set_level(args.log_level)  # the launcher's own messages, as the ranks'
    console = Console(timestamps=args.prefix_output_with_timestamp)
    if args.check_build:
        print(build_info.describe())
        return 0
    return launch(args, console)


def launch(args, console, function_job=None):
    """Runs the job that parsed hvdliterun arguments describe, to its end;
    returns the launcher's exit code. function_job: hvdlite.run's
    (function.FunctionJob), attached to the job's store for the job's whole
    run: it hands the ranks their function and collects their results."""
    for note in ignored_flag_notes(args):
        console.message(note)
    if getattr(args, "hostfile_variable", None):
        console.message(f"no -H/--hostfile given: the hosts of {args.hostfile} "
                        f"({args.hostfile_variable}, mpirun's default hostfile)")
    try:
        if args.elastic:
            _check_script(args.command, local=True)
        else:
            hosts, placements = _check_inputs(args)
            if args.verbose:
                console.message(f"hosts: {_describe_placements(placements)}")
        _prepare_output_directory(args)
    except _Stop as stop:
        if function_job is not None:  # hvdlite.run: the caller's mistake, raised to it
            raise ValueError(f"hvdlite.run: {str(stop).replace('error: ', '', 1)}") from None
        console.write_line("stderr", f"hvdliterun: {stop}")
        return stop.exit_code
    if args.elastic:
        return run_elastic(args, console, function_job)
    # A function job needs the store even where the ranks find each other
    # through MPI: its function and results travel through it.
    all_local = all(is_local(p.name) for p in placements)
    if args.mpi and function_job is None and \
            mpi.core_does_rendezvous(tuning_environment(args), all_local):
        return mpi.run(args, hosts, tuning_environment(args), console)
    setup = JobSetup(args, console, remote=not all_local, function_job=function_job)
    if setup.network_error is not None:
        console.message(str(setup.network_error))
        return 1
    with setup:
        if args.mpi:
            # Each rank picks its own address towards the store (common/rendezvous.py).
            job_env = setup.job_environment()
            job_env["HVDLITE_STORE_ADDR"] = setup.candidates[0]
            del job_env["HVDLITE_BIND_ADDR"]
            return mpi.run(args, hosts, job_env, console,
                           forward_output=function_job is not None)
        return _run_job(placements, console, setup, function_job)


def _describe_placements(placements):
    """E.g. "server1 ranks 0-3, server2 ranks 4-7"."""
    parts = []
    for placement in placements:
        first, last = placement.ranks[0], placement.ranks[-1]
        ranks = f"rank {first}" if first == last else f"ranks {first}-{last}"
        parts.append(f"{placement.name} {ranks}")
    return ", ".join(parts)


def _check_inputs(args):
    """(hosts, placements), or _Stop with exit code 2 for bad input."""
    try:
        hosts = _hosts(args)
        placements = place_ranks(hosts, args.num_proc)
    except HostError as error:
        raise _Stop(f"error: {error}", USAGE_ERROR) from error
    _check_script(args.command, local=is_local(placements[0].name))
    return hosts, placements


def _check_script(command, local):
    missing = _missing_script(command)
    if missing and local:
        raise _Stop(f"error: the script {missing!r} does not exist (looked in "
                    f"{os.getcwd()})", USAGE_ERROR)


def _prepare_output_directory(args):
    if not args.output_filename:
        return
    try:
        os.makedirs(args.output_filename, exist_ok=True)
    except OSError as error:
        raise _Stop(f"cannot create --output-filename directory {args.output_filename!r}: "
                    f"{error.strerror or error}", 1) from error


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


def _run_job(placements, console, setup, function_job=None):
    events = queue.SimpleQueue()
    job = Job(placements, setup.starter(events))
    # Handlers go in before the first rank starts, so that no signal can
    # leave a rank behind.
    with forwarded_signals(events):
        try:
            job.start()
            supervisor = Supervisor(job, console, events, certainty_of=function_job and
                                    function_job.certainty_of)
            code = supervisor.run()
            if function_job is not None:
                function_job.first_failure = supervisor.first_failure
            return code
        except LaunchError as error:
            console.message(str(error))
            return error.exit_code
        finally:
            job.kill()
            job.wait()


if __name__ == "__main__":
    sys.exit(main())
