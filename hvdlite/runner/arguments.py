"""hvdliterun's command line: horovodrun's common flags with the same
meaning, an optional YAML --config-file with the same keys, and checks that
turn bad input into a clear message and exit code 2."""
import argparse

import yaml

from hvdlite.version import __version__

DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_SSH_PORT = None  # ssh's own default (22, or the ssh config's Port)
DEFAULT_ELASTIC_TIMEOUT_S = 600.0
DEFAULT_DISCOVERY_INTERVAL_S = 1.0
LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="hvdliterun",
        usage="hvdliterun -np N [-H host1:2,host2:2 | --hostfile FILE] [options] "
              "command [args ...]",
        description="Run a command as the N ranks of one hvdlite (Horovod-compatible) job, "
                    "on this host, on several hosts over ssh, or through mpirun.")
    parser.add_argument("--version", action="version", version=f"hvdlite {__version__}")
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=int, metavar="N",
                        help="number of ranks to start")
    parser.add_argument("--check-build", action="store_true",
                        help="print which frameworks, transports and controllers this "
                             "install has, and exit")
    parser.add_argument("--config-file", metavar="FILE",
                        help="YAML file whose keys are these flags' long names (e.g. "
                             "fusion-threshold-mb: 32); flags on the command line win")
    parser.add_argument("--verbose", action="store_true", help="print what the launcher does")
    parser.add_argument("--horovod-alias", dest="horovod_alias", action="store_const", const="on",
                        help="in every rank, `import horovod.torch as hvd` (and horovod's "
                             "tensorflow, keras, elastic and common modules) resolves to hvdlite, "
                             "unless a real Horovod is installed; --horovod-alias=force: even "
                             "then [HOROVOD_ALIAS]")
    # An option of its own: with an optional value, `--horovod-alias python
    # train.py` would take `python` for the value.
    parser.add_argument("--horovod-alias=force", dest="horovod_alias", action="store_const",
                        const="force", help=argparse.SUPPRESS)

    where = parser.add_argument_group("hosts")
    hosts = where.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", metavar="HOST:SLOTS,...",
                       help="hosts and their slots, e.g. host1:2,host2:4 (default: "
                            "localhost with -np slots)")
    hosts.add_argument("--hostfile", metavar="FILE",
                       help="file with one `hostname slots=N` line per host")
    where.add_argument("-p", "--ssh-port", type=int, metavar="PORT",
                       help="ssh port of the remote hosts")
    where.add_argument("-i", "--ssh-identity-file", metavar="FILE",
                       help="private key ssh uses to log in to the remote hosts")
    where.add_argument("--network-interface", metavar="NIC[,NIC...]",
                       help="network interface(s) for rendezvous and data between hosts "
                            "(default: the address each host uses to reach the launcher)")
    where.add_argument("--start-timeout", type=float, default=DEFAULT_START_TIMEOUT_S,
                       metavar="S", help="seconds to reach every host and for the ranks to "
                       f"find each other (default {DEFAULT_START_TIMEOUT_S:g})")
    where.add_argument("--output-filename", metavar="DIR",
                       help="also write each rank's output to DIR/rank.<r>/stdout and "
                            "DIR/rank.<r>/stderr")
    controller = where.add_mutually_exclusive_group()
    controller.add_argument("--mpi", action="store_true",
                            help="hand the job to mpirun (OpenMPI or MPICH) instead of "
                                 "starting ranks over ssh")
    controller.add_argument("--tcp", "--gloo", dest="tcp", action="store_true",
                            help="start ranks with hvdliterun and use the built-in TCP "
                                 "transport (the default)")

    elastic = parser.add_argument_group(
        "elastic training (the job continues at a new size when hosts come and go or ranks "
        "fail; the script uses hvd.elastic.run)")
    elastic.add_argument("--min-np", "--min-num-proc", dest="min_np", type=int, metavar="N",
                         help="stop the job when fewer than N slots stay usable "
                              "(default: -np); giving it makes the job elastic")
    elastic.add_argument("--max-np", "--max-num-proc", dest="max_np", type=int, metavar="N",
                         help="never run more than N ranks (default: every discovered slot)")
    elastic.add_argument("--host-discovery-script", metavar="SCRIPT",
                         help="command that prints the usable hosts, one `host` or "
                              "`host:slots` per line; run every --discovery-interval s")
    elastic.add_argument("--slots", "--slots-per-host", dest="slots", type=int, default=1,
                         metavar="N", help="slots of a discovered host printed without "
                         "`:slots` (default 1)")
    elastic.add_argument("--reset-limit", type=int, metavar="N",
                         help="stop the job instead of re-forming it an (N+1)-th time")
    elastic.add_argument("--blacklist-cooldown-range", type=float, nargs=2,
                         metavar=("LOW", "HIGH"),
                         help="a host where a rank failed comes back after LOW s, doubling "
                              "with each further failure up to HIGH s (default: never)")
    elastic.add_argument("--elastic-timeout", type=float, default=DEFAULT_ELASTIC_TIMEOUT_S,
                         metavar="S", help="how long to wait for --min-np slots before "
                         f"stopping (default {DEFAULT_ELASTIC_TIMEOUT_S:g})")
    elastic.add_argument("--discovery-interval", type=float,
                         default=DEFAULT_DISCOVERY_INTERVAL_S, metavar="S",
                         help="seconds between runs of the discovery script (default "
                              f"{DEFAULT_DISCOVERY_INTERVAL_S:g})")

    tuning = parser.add_argument_group("tuning (each sets the HVDLITE_* variable in brackets)")
    tuning.add_argument("--fusion-threshold-mb", type=float, metavar="MB",
                        help="fuse allreduces up to this many MiB [FUSION_THRESHOLD]")
    tuning.add_argument("--cycle-time-ms", type=float, metavar="MS",
                        help="ms between negotiation cycles [CYCLE_TIME]")
    tuning.add_argument("--cache-capacity", type=int, metavar="N",
                        help="response cache slots [CACHE_CAPACITY]")
    tuning.add_argument("--disable-cache", action="store_true",
                        help="turn the response cache off [CACHE_CAPACITY=0]")
    tuning.add_argument("--timeline-filename", metavar="FILE",
                        help="write a Chrome-trace timeline [TIMELINE]")
    tuning.add_argument("--timeline-mark-cycles", action="store_true",
                        help="mark negotiation cycles in the timeline [TIMELINE_MARK_CYCLES]")
    tuning.add_argument("--autotune", action="store_true",
                        help="tune fusion threshold and cycle time at run time [AUTOTUNE]")
    tuning.add_argument("--autotune-log-file", metavar="FILE",
                        help="where the autotuner logs its trials [AUTOTUNE_LOG]")
    tuning.add_argument("--stall-check-warning-time-seconds", type=float, metavar="S",
                        help="warn about stalled tensors after S s [STALL_CHECK_TIME_SECONDS]")
    tuning.add_argument("--stall-check-shutdown-time-seconds", type=float, metavar="S",
                        help="fail stalled tensors after S s [STALL_SHUTDOWN_TIME_SECONDS]")
    tuning.add_argument("--log-level", choices=LOG_LEVELS, type=str.lower,
                        help="core log level [LOG_LEVEL]")

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
        _apply_config_file(parser, args.config_file)
        args = parser.parse_args(argv)
    if args.check_build:
        return args
    _validate(parser, args)
    return args


def _validate(parser, args):
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if args.horovod_alias is True:  # `horovod-alias: true` in a --config-file
        args.horovod_alias = "on"
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
    if args.start_timeout <= 0:
        parser.error(f"--start-timeout must be positive, got {args.start_timeout:g}")
    if args.ssh_port is not None and not 0 < args.ssh_port < 65536:
        parser.error(f"-p/--ssh-port must be a port number, got {args.ssh_port}")
    for name in ("fusion_threshold_mb", "cycle_time_ms", "cache_capacity",
                 "stall_check_warning_time_seconds", "stall_check_shutdown_time_seconds"):
        value = getattr(args, name)
        if value is not None and value < 0:
            parser.error(f"--{name.replace('_', '-')} must not be negative, got {value:g}")


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
        parser.error(f"--slots must be at least 1, got {args.slots}")
    if args.reset_limit is not None and args.reset_limit < 0:
        parser.error(f"--reset-limit must not be negative, got {args.reset_limit}")
    if args.blacklist_cooldown_range is not None:
        low, high = args.blacklist_cooldown_range
        if not 0 < low <= high:
            parser.error(f"--blacklist-cooldown-range needs 0 < LOW <= HIGH, got {low:g} "
                         f"{high:g}")
    if args.elastic_timeout <= 0 or args.discovery_interval <= 0:
        parser.error("--elastic-timeout and --discovery-interval must be positive")


def _apply_config_file(parser, path):
    """Makes the file's values the parser's defaults, so that flags given on
    the command line still win."""
    try:
        with open(path, encoding="utf-8") as f:
            values = yaml.safe_load(f) or {}
    except OSError as error:
        parser.error(f"cannot read --config-file {path!r}: {error.strerror or error}")
    except yaml.YAMLError as error:
        parser.error(f"--config-file {path!r} is not valid YAML: {error}")
    if not isinstance(values, dict):
        parser.error(f"--config-file {path!r} must be a mapping of flag names to values")
    actions = {action.dest: action for action in parser._actions
               if action.dest not in ("help", "version", "command", "config_file")}
    defaults = {}
    for key, value in values.items():
        dest = str(key).lstrip("-").replace("-", "_")
        dest = {"np": "num_proc", "gloo": "tcp"}.get(dest, dest)
        action = actions.get(dest)
        if action is None:
            parser.error(f"--config-file {path!r}: unknown key {key!r}; keys are the long "
                         f"flag names, e.g. num-proc, hosts, fusion-threshold-mb")
        defaults[dest] = _config_value(parser, path, key, action, value)
    parser.set_defaults(**defaults)


def _config_value(parser, path, key, action, value):
    if action.nargs == 0:  # store_true flags
        if not isinstance(value, bool):
            parser.error(f"--config-file {path!r}: {key!r} must be true or false, "
                         f"got {value!r}")
        return value
    if isinstance(action.nargs, int) and action.nargs > 1:  # e.g. blacklist-cooldown-range
        if not isinstance(value, list) or len(value) != action.nargs:
            parser.error(f"--config-file {path!r}: {key!r} must be a list of "
                         f"{action.nargs} values, got {value!r}")
        try:
            return [action.type(item) for item in value]
        except (TypeError, ValueError):
            parser.error(f"--config-file {path!r}: {key!r} has an invalid value {value!r}")
    try:
        converted = action.type(value) if action.type else str(value)
    except (TypeError, ValueError):
        parser.error(f"--config-file {path!r}: {key!r} has an invalid value {value!r}")
    if action.choices and converted not in action.choices:
        parser.error(f"--config-file {path!r}: {key!r} must be one of "
                     f"{', '.join(action.choices)}, got {value!r}")
    return converted
