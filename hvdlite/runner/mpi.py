"""`hvdliterun --mpi`: hands the job to mpirun (Open MPI or MPICH) with the
host list, slots and environment, for clusters where MPI starts processes.

Ranks learn their place from mpirun's own variables (see
hvdlite/common/environment.py). The job's variables, the secret included,
reach them through mpirun's environment forwarding by name (`-x NAME`,
`-genvlist NAME,...`), never as values on a command line.
"""
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import threading

from hvdlite.common import config
from hvdlite.runner.processes import signal_group
from hvdlite.runner.signals import forwarded_signals

FORWARDED_VARIABLES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONUNBUFFERED",
                       "NCCL_IB_DISABLE")


class MpiError(RuntimeError):
    """mpirun is missing or of an unknown kind."""


def core_does_rendezvous(job_env, single_host):
    """True when the ranks of this mpirun job will negotiate and move data
    over MPI (an MPI build, several hosts or MPI selected, and neither
    os.environ nor job_env selects the built-in transport): they then find
    each other through MPI and need no store."""
    try:
        from hvdlite.common import basics, mpi_selection
        if not basics.mpi_built():
            return False
    except ImportError:
        return False
    env = {**os.environ, **job_env}
    return mpi_selection.all_over_mpi({**env, **mpi_selection.mpirun_choices(env, single_host)})


def forwarded_variables(environment):
    """The names mpirun forwards to every rank: hvdlite's, FORWARDED_VARIABLES
    and every NCCL_* (Note [NCCL's network] in environment.py)."""
    return set(config.hvdlite_variables(environment)) | \
        {name for name in environment if name in FORWARDED_VARIABLES or name.startswith("NCCL_")}


def implementation(mpirun):
    """("openmpi", major version) or ("mpich", None), from `mpirun --version`."""
    try:
        text = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        raise MpiError(f"cannot run `{mpirun} --version`: {error}") from error
    match = re.search(r"(?:Open MPI|OpenRTE)\)?\s+(\d+)", text)
    if match:
        return "openmpi", int(match.group(1))
    if re.search(r"HYDRA|MPICH|Intel", text, re.IGNORECASE):
        return "mpich", None
    raise MpiError(f"`{mpirun} --version` names neither Open MPI nor MPICH/Hydra: "
                   f"{text.strip()[:200]!r}")


# Open MPI's options that place or bind ranks (4.x and 5.x spellings, one or
# two dashes). mpirun refuses one given twice ("bind-to listed more than
# once"), so a user's option in --mpi-args replaces hvdliterun's default of
# the same kind instead of being added to it (--binding-args replaces both,
# as in Horovod). A rankfile both places and binds.
_OPEN_MPI_BINDING = {"bind-to", "bind-to-core", "bind-to-socket", "cpu-set", "cpus-per-proc",
                     "cpus-per-rank", "rankfile", "rf"}
_OPEN_MPI_MAPPING = {"map-by", "rankfile", "rf", "npernode", "N", "npersocket", "ppr",
                     "bynode", "byslot", "pernode"}


def _option_names(words):
    """The option names among mpirun arguments ("--bind-to=core" -> "bind-to")."""
    return {word.lstrip("-").split("=", 1)[0] for word in words if word.startswith("-")}


def _open_mpi_placement(user_words):
    """hvdliterun's default placement for Open MPI (every slot a rank, no
    binding: the core's threads and the framework's need all the cores),
    less what the user's own options set."""
    given = _option_names(user_words)
    defaults = []
    if not given & _OPEN_MPI_MAPPING:
        defaults += ["--map-by", "slot"]
    if not given & _OPEN_MPI_BINDING:
        defaults += ["--bind-to", "none"]
    return defaults


def mpirun_command(args, hosts, variables, mpirun="mpirun", kind=("openmpi", 5)):
    """The mpirun command line for `args` on `hosts` (hosts.Host list)."""
    host_list = ",".join(f"{host.name}:{host.slots}" for host in hosts)
    names = sorted(variables)
    binding = shlex.split(args.binding_args) if args.binding_args else None
    extra = shlex.split(args.mpi_args) if args.mpi_args else []
    if kind[0] == "openmpi":
        command = [mpirun, "-np", str(args.num_proc), "--host", host_list]
        command += binding or _open_mpi_placement(extra)
        if os.geteuid() == 0:
            command.append("--allow-run-as-root")
        ssh_args = _ssh_args(args)
        if ssh_args:
            parameter = ["--prtemca", "plm_ssh_args"] if kind[1] >= 5 else \
                ["--mca", "plm_rsh_args"]
            command += [*parameter, ssh_args]
        command += _open_mpi_output(args, kind[1])
        for name in names:
            command += ["-x", name]
    else:
        command = [mpirun, "-np", str(args.num_proc), "-hosts", host_list, *(binding or []),
                   "-genvlist", ",".join(names)]
        ssh_args = _ssh_args(args)
        if ssh_args:
            command += ["-launcher", "ssh", "-launcher-exec", f"ssh {ssh_args}"]
    return command + extra + list(args.command)


def _open_mpi_output(args, major):
    """Open MPI's flags for --output-filename and -prefix-timestamp."""
    if major >= 5:
        # Open MPI's own layout: DIR/<job>/rank.N/stdout.
        options = (["timestamp"] if args.prefix_output_with_timestamp else []) + \
            ([f"dir={args.output_filename}"] if args.output_filename else [])
        return ["--output", ",".join(options)] if options else []
    return (["--timestamp-output"] if args.prefix_output_with_timestamp else []) + \
        (["--output-filename", args.output_filename] if args.output_filename else [])  # DIR/1/rank.N


def run(args, hosts, job_env, console, forward_output=False):
    """Runs the job under mpirun until it ends; returns its exit code.
    forward_output: pass mpirun's output on through `console` (hvdlite.run,
    whose caller may be a notebook) instead of letting it inherit ours."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        console.message("--mpi needs `mpirun` on PATH (Open MPI or MPICH); install one, or "
                        "leave out --mpi to start ranks over ssh")
        return 127
    try:
        kind = implementation(mpirun)
    except MpiError as error:
        console.message(str(error))
        return 1
    environment = dict(os.environ)
    environment.update(job_env)
    variables = forwarded_variables(environment)
    command = mpirun_command(args, hosts, variables, mpirun, kind)
    if args.verbose:
        console.message(f"running {shlex.join(command)}")
    if args.prefix_output_with_timestamp and kind[0] != "openmpi":
        console.message("-prefix-timestamp is ignored: MPICH's mpirun has no option to "
                        "timestamp the ranks' output")
    events = queue.SimpleQueue()
    with forwarded_signals(events):
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE} if forward_output else {}
        process = subprocess.Popen(command, env=environment, start_new_session=True, **pipes)
        forwarders = [_forward(pipe, name, console) for name, pipe in
                      (("stdout", process.stdout), ("stderr", process.stderr)) if pipe]
        interrupt = _watch(process, events, console)
    for thread in forwarders:
        thread.join(5.0)
    code = process.returncode
    if interrupt is not None:
        # mpirun exits 1 after forwarding a signal, which reads like a failure.
        console.message(f"the job was stopped by {signal.Signals(interrupt).name} "
                        f"(mpirun exited with code {code})")
        return 128 + interrupt
    return 128 - code if code < 0 else code


def _watch(process, events, console):
    """Waits for mpirun, passing the launcher's signals on to it; returns
    the first signal received, or None."""
    interrupt = None
    while process.poll() is None:
        try:
            _, signum = events.get(timeout=0.1)
        except queue.Empty:
            continue
        name = signal.Signals(signum).name
        if interrupt is None:
            interrupt = signum
            console.message(f"received {name}; mpirun stops every rank (send it again to "
                            f"kill mpirun at once)")
            # mpirun passes SIGINT/SIGTERM on to every rank and stops the job.
            signal_group(process.pid, signum)
        else:
            console.message(f"received {name} while stopping; killing mpirun.")
            signal_group(process.pid, signal.SIGKILL)
    return interrupt


def _forward(pipe, name, console):
    def forward():
        with pipe:
            for raw in iter(pipe.readline, b""):
                console.write_line(name, raw.rstrip(b"\n").decode("utf-8", "replace"))

    thread = threading.Thread(target=forward, name=f"hvdlite-mpirun-{name}", daemon=True)
    thread.start()
    return thread


def _ssh_args(args):
    parts = []
    if args.ssh_port:
        parts += ["-p", str(args.ssh_port)]
    if args.ssh_identity_file:
        parts += ["-i", args.ssh_identity_file]
    return shlex.join(parts)
