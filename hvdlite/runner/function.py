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
    """Runs `func(*args, **kwargs)` on every rank of a new job; returns the ranks' results.

    Every rank's output reaches sys.stdout/sys.stderr as it happens, prefixed
    `[rank]<stdout>:`. Interrupting the caller (Ctrl-C, a notebook's interrupt) stops every
    rank and raises KeyboardInterrupt.

    Args:
        func (Callable): pickled (cloudpickle) and called on each rank; it calls `hvd.init()`.
        args (tuple): positional arguments for `func`.
        kwargs (dict | None): keyword arguments for `func`.
        num_proc (int | None): ranks to start (default 1; elastic: min_num_proc).
        min_num_proc (int | None): elastic: the fewest ranks to train with.
        max_num_proc (int | None): elastic: the most ranks.
        slots (int | None): elastic: slots of a discovered host printed without a count
            (default 1).
        reset_limit (int | None): elastic: the most re-formations (default 100).
        cooldown_range (tuple | None): elastic: (min, max) seconds a failed host is left out.
        hosts (str | None): "host1:2,host2:2" (default: this machine); other hosts are reached
            over ssh and need hvdlite at the same Python path (else `executable`).
        hostfile (str | None): a file of `host slots=N` lines, instead of `hosts`.
        host_discovery_script (str | None): elastic: prints the hosts available now.
        start_timeout (float | None): seconds the ranks have to start, as hvdliterun's flag.
        ssh_port (int | None): ssh port of the other hosts.
        ssh_identity_file (str | None): ssh key for the other hosts.
        disable_cache (bool | None): as hvdliterun's --disable-cache.
        output_filename (str | None): also write each rank's output under this folder.
        verbose (bool | None): the launcher says what it does.
        use_gloo (bool | None): the built-in TCP transport.
        use_mpi (bool | None): hand the job to mpirun.
        mpi_args (str | None): extra mpirun arguments.
        network_interface (str | None): interface(s) the ranks talk over.
        executable (str | None): the Python the ranks run (default: this one).
        elastic_timeout (float | None): elastic: seconds to wait for min_num_proc ranks.
        discovery_interval (float | None): elastic: seconds between host discoveries.
        network_interfaces (str | None): Horovod's other spelling of `network_interface`.
        np (int | None): Horovod's other spelling of `num_proc`.
        min_np (int | None): Horovod's other spelling of `min_num_proc`.
        max_np (int | None): Horovod's other spelling of `max_num_proc`.

    Returns:
        list: `func`'s return values in rank order (elastic: those of the final round).

    Raises:
        RankFailedError: a rank raised, was killed or was lost: which rank, on which host,
            with its traceback (the original exception as `__cause__` where it unpickles).
        TypeError: `func` or an argument cannot be pickled (before any rank starts).
        ValueError: contradictory or malformed arguments.

    Example:
        ```python
        def train(lr):
            import hvdlite.torch as hvd
            hvd.init()
            return hvd.rank()

        hvdlite.run(train, args=(0.1,), np=2)   # [0, 1]
        ```
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
