"""hvdliterun's command line: every flag of horovodrun 0.28.1 with the same
meaning (grouped as horovodrun's --help groups them), a few of hvdlite's
own, an optional YAML --config-file (config_file.py), and checks that turn
bad input into a clear message and exit code 2. Flags that have no effect
in hvdlite are accepted; ignored_flag_notes() says why for each."""
import argparse
import os

from hvdlite.common import config, defaults
from hvdlite.runner import config_file
from hvdlite.version import __version__

LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")
# mpirun's default hostfile, Open MPI 4's variable and PRRTE's (Open MPI 5): the
# Kubeflow MPI Operator sets the first in an MPIJob's launcher pod, naming
# /etc/mpi/hostfile. hvdliterun takes its hosts there when given none, as
# mpirun does, rather than run every rank on the launcher pod.
DEFAULT_HOSTFILE_VARIABLES = ("OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile")


class _Interfaces(argparse.Action):
    """--network-interface(s): comma-separated and repeatable, kept as one
    comma-separated string (the form the launcher reads)."""

    def __call__(self, parser, namespace, values, option_string=None):
        names = [name for name in (getattr(namespace, self.dest) or "").split(",") if name]
        names += [name for name in values.split(",") if name and name not in names]
        setattr(namespace, self.dest, ",".join(names))


def _switch(group, name, dest, help):
    """--name / --no-name on `dest` (None when neither is given, so the core's
    default or the environment decides)."""
    group.add_argument(f"--{name}", dest=dest, action=argparse.BooleanOptionalAction,
                       help=help)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="hvdliterun",
        usage="hvdliterun -np N [-H host1:2,host2:2 | --hostfile FILE] [options] "
              "command [args ...]",
        description="Run a command as the N ranks of one hvdlite (Horovod-compatible) job, "
                    "on this host, on several hosts over ssh, or through mpirun. Takes every "
                    "horovodrun flag; [NAME] is the HVDLITE_NAME variable a flag sets in "
                    "each rank.")
    parser.add_argument("-v", "--version", action="version", version=f"hvdlite {__version__}")
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=int, metavar="N",
                        help="number of ranks to start (elastic: to start with)")
    parser.add_argument("-cb", "--check-build", action="store_true",
                        help="print which frameworks, transports and controllers this "
                             "install has, and exit")
    parser.add_argument("--disable-cache", action="store_true",
                        help="horovodrun: do not cache its start-up checks; hvdliterun "
                             "caches none, so this changes nothing (the response cache is "
                             "--cache-capacity 0)")
    parser.add_argument("--start-timeout", type=float, metavar="S",
                        help="seconds to reach every host and for the ranks to find each "
                             f"other (default: HVDLITE_START_TIMEOUT, HOROVOD_START_TIMEOUT "
                             f"or {defaults.START_TIMEOUT_S:g}) [START_TIMEOUT]")
    parser.add_argument("--network-interfaces", "--network-interface", dest="network_interface",
                        action=_Interfaces, metavar="NIC[,NIC...]",
                        help="network interface(s) for rendezvous, data and NCCL between "
                             "hosts, comma-separated or repeated (default: "
                             "HVDLITE_NETWORK_INTERFACE, else the address each host uses to "
                             "reach the launcher) [BIND_ADDR, NCCL_SOCKET_IFNAME unless set]")
    parser.add_argument("--output-filename", metavar="DIR",
                        help="also write each rank's output to DIR/rank.<r>/stdout and "
                             "DIR/rank.<r>/stderr (--mpi: mpirun's own layout)")
    parser.add_argument("--verbose", action="store_true",
                        help="print what the launcher does: hosts and ranks, ssh and mpirun "
                             "commands, the store's address")
    parser.add_argument("--config-file", metavar="FILE",
                        help="YAML file: horovodrun's layout (params, autotune, timeline, "
                             "stall_check, library_options, logging, controller) and/or "
                             "these flags' long names as keys (fusion-threshold-mb: 32); "
                             "flags on the command line win")
    parser.add_argument("--horovod-alias", dest="horovod_alias", action="store_const", const="on",
                        help="in every rank, `import horovod.torch as hvd` (and horovod's "
                             "tensorflow, keras, elastic and common modules) resolves to hvdlite, "
                             "unless a real Horovod is installed; --horovod-alias=force: even "
                             "then [HOROVOD_ALIAS]")
    # An option of its own: with an optional value, `--horovod-alias python
    # train.py` would take `python` for the value.
    parser.add_argument("--horovod-alias=force", dest="horovod_alias", action="store_const",
                        const="force", help=argparse.SUPPRESS)

    ssh = parser.add_argument_group("SSH arguments")
    ssh.add_argument("-p", "--ssh-port", type=int, metavar="PORT",
                     help="ssh port of the remote hosts")
    ssh.add_argument("-i", "--ssh-identity-file", metavar="FILE",
                     help="private key ssh uses to log in to the remote hosts")

    params = parser.add_argument_group("tuneable parameter arguments")
    params.add_argument("--fusion-threshold-mb", type=float, metavar="MB",
                        help="fuse allreduces up to this many MiB; 0 disables fusion "
                             "(default 128) [FUSION_THRESHOLD]")
    params.add_argument("--cycle-time-ms", type=float, metavar="MS",
                        help="ms between negotiation cycles (default 1) [CYCLE_TIME]")
    params.add_argument("--cache-capacity", type=int, metavar="N",
                        help="response cache slots; 0 turns the cache off (default 1024) "
                             "[CACHE_CAPACITY]")
    _switch(params, "hierarchical-allreduce", "hierarchical_allreduce",
            "CUDA allreduce: NCCL inside each host, the CPU transport between hosts "
            "[HIERARCHICAL_ALLREDUCE]")
    _switch(params, "hierarchical-allgather", "hierarchical_allgather",
            "CPU allgather across hosts: shared memory inside each host, TCP between hosts "
            "(default where a set spans hosts of several ranks each) [HIERARCHICAL_ALLGATHER]")
    _switch(params, "torus-allreduce", "torus_allreduce",
            "accepted and ignored: hvdlite's NCCL allreduce has no 2D-torus variant")

    autotune = parser.add_argument_group("autotune arguments")
    _switch(autotune, "autotune", "autotune",
            "tune fusion threshold and cycle time at run time [AUTOTUNE]")
    autotune.add_argument("--autotune-log-file", metavar="FILE",
                          help="CSV of the autotuner's trials, written by rank 0 [AUTOTUNE_LOG]")
    autotune.add_argument("--autotune-warmup-samples", type=int, metavar="N",
                          help="samples discarded before tuning starts (default 3) "
                               "[AUTOTUNE_WARMUP_SAMPLES]")
    autotune.add_argument("--autotune-steps-per-sample", type=int, metavar="N",
                          help="training steps per scored sample (default 10) "
                               "[AUTOTUNE_STEPS_PER_SAMPLE]")
    autotune.add_argument("--autotune-bayes-opt-max-samples", type=int, metavar="N",
                          help="accepted and ignored: hvdlite's autotuner searches a grid, "
                               "not by Bayesian optimization")
    autotune.add_argument("--autotune-gaussian-process-noise", type=float, metavar="X",
                          help="accepted and ignored, as --autotune-bayes-opt-max-samples")

    elastic = parser.add_argument_group(
        "elastic arguments",
        "the job continues at a new size when hosts come and go or ranks fail; the script "
        "uses hvd.elastic.run")
    elastic.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int, metavar="N",
                         help="stop the job when fewer than N slots stay usable "
                              "(default: -np); giving it makes the job elastic")
    elastic.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int, metavar="N",
                         help="never run more than N ranks (default: every discovered slot)")
    elastic.add_argument("--slots-per-host", "--slots", dest="slots", type=int, default=1,
                         metavar="N", help="slots of a discovered host printed without "
                         "`:slots` (default 1)")
    elastic.add_argument("--elastic-timeout", type=float, metavar="S",
                         help="how long to wait for --min-np slots before stopping (default: "
                              "HVDLITE_ELASTIC_TIMEOUT, HOROVOD_ELASTIC_TIMEOUT or "
                              f"{defaults.ELASTIC_TIMEOUT_S:g})")
    elastic.add_argument("--reset-limit", type=int, metavar="N",
                         help="stop the job instead of re-forming it an (N+1)-th time "
                              f"(default {defaults.RESET_LIMIT}; every re-form counts)")
    elastic.add_argument("--blacklist-cooldown-range", type=float, nargs=2,
                         metavar=("LOW", "HIGH"),
                         help="a host where a worker failed (an exit code or a signal) "
                              "comes back after 2-3 x LOW s, doubling with each further "
                              "failure, at most HIGH s, as Horovod computes it (default: never)")
    elastic.add_argument("--discovery-interval", type=float,
                         default=defaults.DISCOVERY_INTERVAL_S, metavar="S",
                         help="seconds between runs of the discovery script (default "
                              f"{defaults.DISCOVERY_INTERVAL_S:g})")

    timeline = parser.add_argument_group("timeline arguments")
    timeline.add_argument("--timeline-filename", metavar="FILE",
                          help="write a Chrome-trace timeline [TIMELINE]")
    _switch(timeline, "timeline-mark-cycles", "timeline_mark_cycles",
            "mark negotiation cycles in the timeline [TIMELINE_MARK_CYCLES]")

    stall = parser.add_argument_group("stall check arguments")
    _switch(stall, "stall-check", "stall_check",
            "the stall inspector (default on); --no-stall-check turns it off "
            "[STALL_CHECK_DISABLE]")
    stall.add_argument("--stall-check-warning-time-seconds", type=float, metavar="S",
                       help="warn about stalled tensors after S s (default 60) "
                            "[STALL_CHECK_TIME_SECONDS]")
    stall.add_argument("--stall-check-shutdown-time-seconds", type=float, metavar="S",
                       help="fail stalled tensors after S s; 0 = never (default 10 x the "
                            "warning time) [STALL_SHUTDOWN_TIME_SECONDS]")

    library = parser.add_argument_group("library arguments")
    _switch(library, "mpi-threads-disable", "mpi_threads_disable",
            "accepted and ignored: hvdlite needs MPI_THREAD_MULTIPLE (a thread waiting "
            "for a result runs negotiation cycles itself)")
    library.add_argument("--mpi-args", metavar="\"ARGS\"",
                         help="extra mpirun arguments, e.g. --mpi-args=\"--map-by ppr:2:node\" "
                              "(with --mpi)")
    library.add_argument("--tcp", action="store_true",
                         help="only TCP: the built-in TCP transport also within a host, and "
                              "NCCL without InfiniBand [CPU_OPERATIONS=tcp, NCCL_IB_DISABLE=1]")
    library.add_argument("--binding-args", metavar="\"ARGS\"",
                         help="mpirun's process binding, replacing hvdliterun's "
                              "\"--bind-to none --map-by slot\", e.g. "
                              "--binding-args=\"--rankfile FILE\" (with --mpi)")
    library.add_argument("--num-nccl-streams", type=int, metavar="N",
                         help="accepted and ignored: hvdlite runs NCCL on one stream per GPU")
    library.add_argument("--thread-affinity", type=int, metavar="CORE",
                         help="accepted and ignored: hvdlite does not pin its background "
                              "thread to a core")
    library.add_argument("--gloo-timeout-seconds", type=float, metavar="S",
                         help="seconds the ranks' TCP transport waits to connect to every "
                              "peer at init() (default: --start-timeout) [START_TIMEOUT]")

    logging = parser.add_argument_group("logging arguments")
    logging.add_argument("--log-level", choices=LOG_LEVELS, type=str.lower,
                         help="the core's log level (default warning) [LOG_LEVEL]")
    stamps = logging.add_mutually_exclusive_group()
    stamps.add_argument("--log-with-timestamp", "--no-log-hide-timestamp",
                        dest="log_with_timestamp", action="store_const", const=True,
                        help="a timestamp on the core's log lines (the default) "
                             "[LOG_HIDE_TIME=0]")
    stamps.add_argument("--log-without-timestamp", "--log-hide-timestamp",
                        dest="log_with_timestamp", action="store_const", const=False,
                        help="no timestamp on the core's log lines [LOG_HIDE_TIME=1]")
    stamps.add_argument("-prefix-timestamp", "--prefix-output-with-timestamp",
                        dest="prefix_output_with_timestamp", action="store_true",
                        help="start each line of the ranks' output with the time")

    where = parser.add_argument_group("host arguments")
    hosts = where.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", metavar="HOST:SLOTS,...",
                       help="hosts and their slots, e.g. host1:2,host2:4 (default: "
                            "localhost with -np slots)")
    hosts.add_argument("-hostfile", "--hostfile", metavar="FILE",
                       help="file with one `hostname slots=N` line per host")
    where.add_argument("--host-discovery-script", metavar="SCRIPT",
                       help="elastic: command that prints the usable hosts, one `host` or "
                            "`host:slots` per line; run every --discovery-interval s")

    controller_group = parser.add_argument_group("controller arguments")
    controller = controller_group.add_mutually_exclusive_group()
    controller.add_argument("--gloo", action="store_true",
                            help="start ranks with hvdliterun and use the built-in transports "
                                 "(the default)")
    controller.add_argument("--mpi", action="store_true",
                            help="hand the job to mpirun (Open MPI or MPICH) instead of "
                                 "starting ranks over ssh")
    controller.add_argument("--jsrun", action="store_true",
                            help="refused: hvdliterun does not start ranks through LSF's jsrun "
                                 "(use --mpi, or ssh within the allocation)")

    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program every rank runs, and its arguments")
    return parser


def parse_args(argv=None):
    """Parses hvdliterun's flags; everything from the first positional
    argument on is the command, its own flags included. Exits with code 2
    on bad input."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.config_file:
        config_file.apply(parser, args.config_file)
        args = parser.parse_args(argv)
    if args.check_build:
        return args
    _fill_defaults(parser, args)
    _validate(parser, args)
    return args


def _fill_defaults(parser, args):
    """Defaults that come from the environment first, as in horovodrun."""
    args.hostfile_variable = None  # the variable that named args.hostfile, if one did
    if not (args.hosts or args.hostfile or args.host_discovery_script):
        for name in DEFAULT_HOSTFILE_VARIABLES:
            if os.environ.get(name):
                args.hostfile, args.hostfile_variable = os.environ[name], name
                break
    try:
        if args.start_timeout is None:  # horovodrun's 30 s, not a rank's own 60
            args.start_timeout = config.get("HVDLITE_START_TIMEOUT",
                                            default=defaults.START_TIMEOUT_S)
        if args.elastic_timeout is None:
            args.elastic_timeout = config.get("HVDLITE_ELASTIC_TIMEOUT")
        if not args.network_interface:
            args.network_interface = config.get("HVDLITE_NETWORK_INTERFACE")
    except config.SettingError as error:
        parser.error(str(error))


def _validate(parser, args):
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if args.horovod_alias is True:  # `horovod-alias: true` in a --config-file
        args.horovod_alias = "on"
    controller = getattr(args, "config_controller", None)  # from a --config-file
    if controller and not (args.gloo or args.mpi or args.jsrun):
        setattr(args, controller, True)
    if args.jsrun:
        _refuse_jsrun(parser)
    args.elastic = any(value is not None for value in (
        args.min_np, args.max_np, args.host_discovery_script, args.reset_limit,
        args.blacklist_cooldown_range))
    if args.elastic:
        _validate_elastic(parser, args)
    if args.num_proc is None:
        parser.error("the following arguments are required: -np")
    if not args.command:
        parser.error("missing the command to run, e.g. `hvdliterun -np 2 python train.py`")
    if args.num_proc < 1:
        parser.error(f"-np must be at least 1, got {args.num_proc}")
    for name in ("start_timeout", "gloo_timeout_seconds"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {value:g}")
    if args.ssh_port is not None and not 0 < args.ssh_port < 65536:
        parser.error(f"-p/--ssh-port must be a port number, got {args.ssh_port}")
    for name in ("fusion_threshold_mb", "cycle_time_ms", "cache_capacity",
                 "autotune_warmup_samples", "autotune_bayes_opt_max_samples",
                 "stall_check_warning_time_seconds", "stall_check_shutdown_time_seconds",
                 "num_nccl_streams", "thread_affinity"):
        value = getattr(args, name)
        if value is not None and value < 0:
            parser.error(f"--{name.replace('_', '-')} must not be negative, got {value:g}")
    if args.autotune_steps_per_sample is not None and args.autotune_steps_per_sample < 1:
        parser.error(f"--autotune-steps-per-sample must be at least 1, got "
                     f"{args.autotune_steps_per_sample}")
    noise = args.autotune_gaussian_process_noise
    if noise is not None and not 0 <= noise <= 1:
        parser.error(f"--autotune-gaussian-process-noise must be in [0, 1], got {noise:g}")


def _refuse_jsrun(parser):
    # Ignoring it would start the ranks some other way than the user asked.
    if not os.environ.get("LSB_JOBID"):
        parser.error("--jsrun needs an LSF job (LSB_JOBID is not set); leave it out to "
                     "start the ranks with hvdliterun, or use --mpi for mpirun")
    parser.error("--jsrun: hvdliterun does not start ranks through jsrun; inside the LSF "
                 "allocation use --mpi (mpirun) or -H with the allocation's hosts (ssh)")


def _validate_elastic(parser, args):
    """Fills -np/--min-np from each other and checks the elastic flags."""
    if args.num_proc is None and args.min_np is None:
        parser.error("an elastic job needs --min-np or -np (the number of ranks to start with)")
    if args.min_np is None:
        args.min_np = args.num_proc
    if args.num_proc is None:
        args.num_proc = args.min_np
    if args.min_np < 1:
        parser.error(f"--min-np must be at least 1, got {args.min_np}")
    if args.num_proc < args.min_np:
        parser.error(f"-np {args.num_proc} is below --min-np {args.min_np}")
    if args.max_np is not None and args.max_np < args.num_proc:
        parser.error(f"--max-np {args.max_np} is below -np {args.num_proc}")
    if args.host_discovery_script and (args.hosts or args.hostfile):
        parser.error("give either --host-discovery-script or -H/--hostfile, not both")
    if args.mpi:
        parser.error("elastic jobs start their ranks themselves; --mpi cannot be combined "
                     "with --min-np/--max-np/--host-discovery-script")
    if args.slots < 1:
        parser.error(f"--slots-per-host must be at least 1, got {args.slots}")
    if args.reset_limit is not None and args.reset_limit < 0:
        parser.error(f"--reset-limit must not be negative, got {args.reset_limit}")
    if args.blacklist_cooldown_range is not None:
        low, high = args.blacklist_cooldown_range
        if not 0 < low <= high:
            parser.error(f"--blacklist-cooldown-range needs 0 < LOW <= HIGH, got {low:g} "
                         f"{high:g}")
    if args.elastic_timeout <= 0 or args.discovery_interval <= 0:
        parser.error("--elastic-timeout and --discovery-interval must be positive")


def ignored_flag_notes(args):
    """One line per given flag that has no effect in hvdlite, saying why."""
    notes = []

    def note(given, flag, why):
        if given:
            notes.append(f"{flag} is ignored: {why}")

    note(args.disable_cache, "--disable-cache",
         "hvdliterun keeps no cache of start-up checks to disable (the response cache is "
         "--cache-capacity 0)")
    note(args.torus_allreduce, "--torus-allreduce",
         "hvdlite's NCCL allreduce has no 2D-torus variant (the result is the same)")
    note(args.autotune_bayes_opt_max_samples is not None, "--autotune-bayes-opt-max-samples",
         "hvdlite's autotuner searches a fixed grid, not by Bayesian optimization")
    note(args.autotune_gaussian_process_noise is not None,
         "--autotune-gaussian-process-noise",
         "hvdlite's autotuner searches a fixed grid, not by Bayesian optimization")
    note(args.mpi_threads_disable, "--mpi-threads-disable",
         "hvdlite needs MPI_THREAD_MULTIPLE: a thread waiting for a result runs "
         "negotiation cycles itself")
    note(args.num_nccl_streams is not None, "--num-nccl-streams",
         "hvdlite runs NCCL on one stream per GPU")
    note(args.thread_affinity is not None, "--thread-affinity",
         "hvdlite does not pin its background thread to a core")
    for flag, value in (("--mpi-args", args.mpi_args), ("--binding-args", args.binding_args)):
        note(value is not None and not args.mpi, flag,
             "it is passed to mpirun, which only --mpi runs")
    return notes
