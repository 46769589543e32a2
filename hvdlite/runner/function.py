"""hvdlite.run (also hvdlite.runner.run): runs a Python function as the ranks
of a job, from a script or a notebook, and returns what each rank returned.

    def train(lr):
        import hvdlite.torch as hvd
        hvd.init()
        ...
        return hvd.rank(), loss

    results = hvdlite.run(train, args=(0.1,), np=2)   # [(0, ...), (1, ...)]

Horovod's horovod.run, with the same arguments. The job is an hvdliterun
job (launch.launch: local ranks, ssh hosts, mpirun, the elastic driver)
whose ranks run `python -m hvdlite.runner.task`; the function, pickled with
cloudpickle, and the results travel through the job's rendezvous store
(function_job.py).
"""
import contextlib
import io
import logging
import sys

from hvdlite.common import logs
from hvdlite.runner.arguments import parse_args
from hvdlite.runner.function_job import FunctionJob, RankFailedError, pickled_function
from hvdlite.runner.launch import launch
from hvdlite.runner.output import Console

__all__ = ["run", "RankFailedError"]


class _RunConsole(Console):
    """The caller's sys.stdout/sys.stderr (a notebook cell's output when
    called from one); the launcher's own messages say who they are from."""

    def message(self, text, level=logging.WARNING):
        """As Console.message, at the "hvdlite.runner" logger's level."""
        if logs.get("runner").isEnabledFor(level):
            self.write_line("stderr", f"hvdlite.run: {text}")


def run(func, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None,
        slots=None, reset_limit=None, cooldown_range=None, hosts=None, hostfile=None,
        host_discovery_script=None, start_timeout=None, ssh_port=None, ssh_identity_file=None,
        disable_cache=None, output_filename=None, verbose=None, use_gloo=None, use_mpi=None,
        mpi_args=None, network_interface=None, network_interfaces=None, executable=None,
        np=None, min_np=None, max_np=None, elastic_timeout=None, discovery_interval=None):
    """Runs `func(*args, **kwargs)` on every rank of a new job and returns the
    ranks' return values as a list in rank order.

    num_proc/np: ranks to start (default 1; in an elastic job, min_num_proc).
    hosts ("host1:2,host2:2") or hostfile: where (default: this machine);
    other hosts are reached over ssh (ssh_port, ssh_identity_file), and must
    have hvdlite at the same Python path (executable: another one).
    use_mpi: hand the job to mpirun (mpi_args: extra mpirun arguments);
    use_gloo: the built-in TCP transport. network_interface(s), start_timeout,
    output_filename, disable_cache, verbose: as hvdliterun's flags.
    Elastic: min_num_proc/max_num_proc, with host_discovery_script (slots per
    host it prints without a count) or hosts, reset_limit (default 100),
    cooldown_range, elastic_timeout, discovery_interval; `func` calls
    hvd.init() and trains under hvd.elastic.run, and the results are those
    of the final round.

    Every rank's output reaches sys.stdout/sys.stderr as it happens,
    prefixed `[rank]<stdout>:`. When a rank raises, is killed or is lost,
    the other ranks are stopped and RankFailedError says which rank, on which
    host, with its traceback (and the original exception as __cause__ where
    it unpickles). Interrupting the caller (Ctrl-C, a notebook's interrupt)
    stops every rank and raises KeyboardInterrupt. A function or argument
    that cannot be pickled raises TypeError before any rank starts.
    """
    kwargs = dict(kwargs or {})
    argv = _launcher_argv(
        num_proc=_one_of("num_proc", num_proc, "np", np),
        min_np=_one_of("min_num_proc", min_num_proc, "min_np", min_np),
        max_np=_one_of("max_num_proc", max_num_proc, "max_np", max_np),
        slots=slots, reset_limit=reset_limit, cooldown_range=cooldown_range, hosts=hosts,
        hostfile=hostfile, host_discovery_script=host_discovery_script,
        start_timeout=start_timeout, ssh_port=ssh_port, ssh_identity_file=ssh_identity_file,
        disable_cache=disable_cache, output_filename=output_filename, verbose=verbose,
        use_gloo=use_gloo, use_mpi=use_mpi,
        network_interfaces=_interfaces(network_interface, network_interfaces),
        elastic_timeout=elastic_timeout, discovery_interval=discovery_interval)
    argv += [executable or sys.executable, "-m", "hvdlite.runner.task"]
    options = _parse(argv)
    options.mpi_args = mpi_args
    payload = pickled_function(func, tuple(args), kwargs)
    job = FunctionJob(payload, options.num_proc, options.elastic)
    exit_code = launch(options, _RunConsole(), function_job=job)
    return job.outcome(exit_code)


def _one_of(name, value, alias, alias_value):
    if value is not None and alias_value is not None and value != alias_value:
        raise ValueError(f"hvdlite.run: {name}={value} and {alias}={alias_value} disagree; "
                         f"give one of them")
    return value if value is not None else alias_value


def _interfaces(network_interface, network_interfaces):
    names = []
    for value in (network_interface, network_interfaces):
        if isinstance(value, str):
            names += value.split(",")
        elif value:
            names += list(value)
    return ",".join(names) or None


def _launcher_argv(num_proc, min_np, max_np, slots, reset_limit, cooldown_range, hosts,
                   hostfile, host_discovery_script, start_timeout, ssh_port, ssh_identity_file,
                   disable_cache, output_filename, verbose, use_gloo, use_mpi,
                   network_interfaces, elastic_timeout, discovery_interval):
    """hvdliterun's flags for run()'s arguments, so that both check and mean
    the same."""
    elastic = any(v is not None for v in (min_np, max_np, host_discovery_script, reset_limit,
                                          cooldown_range))
    if num_proc is None and not elastic:
        num_proc = 1
    if not isinstance(hosts, (str, type(None))):
        hosts = ",".join(hosts)  # a list of "host:slots"
    valued = {"-np": num_proc, "--min-np": min_np, "--max-np": max_np, "--slots": slots,
              "--reset-limit": reset_limit, "-H": hosts, "--hostfile": hostfile,
              "--host-discovery-script": host_discovery_script,
              "--start-timeout": start_timeout, "--ssh-port": ssh_port,
              "--ssh-identity-file": ssh_identity_file, "--output-filename": output_filename,
              "--network-interface": network_interfaces, "--elastic-timeout": elastic_timeout,
              "--discovery-interval": discovery_interval}
    argv = []
    for flag, value in valued.items():
        if value is not None:
            argv += [flag, str(value)]
    if cooldown_range is not None:
        argv += ["--blacklist-cooldown-range", *map(str, cooldown_range)]
    switches = {"--disable-cache": disable_cache, "--verbose": verbose, "--gloo": use_gloo,
                "--mpi": use_mpi}
    return argv + [flag for flag, on in switches.items() if on]


def _parse(argv):
    """parse_args(argv), with its usage errors raised as ValueError."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return parse_args(argv)
    except SystemExit:
        lines = errors.getvalue().strip().splitlines()
        message = lines[-1] if lines else "invalid arguments"
        raise ValueError(f"hvdlite.run: {message.replace('hvdliterun: error: ', '')} (the "
                         f"equivalent hvdliterun flags were: {' '.join(argv[:-3])})") from None
