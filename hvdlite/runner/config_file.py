"""hvdliterun --config-file: a YAML mapping in horovodrun's layout, in
hvdlite's flat one, or both in one file.

    params: {fusion_threshold_mb: 32, cycle_time_ms: 2}   # horovodrun's sections
    stall_check: {enabled: false}
    num-proc: 4                                           # flat: long flag names

The values become the parser's defaults, so flags on the command line win
(horovodrun's rule). A key or value that means nothing is an error naming
it, never silently dropped."""
import argparse

import yaml

# horovodrun's sections: section -> {key: the flag it sets}.
SECTIONS = {
    "params": {"fusion_threshold_mb": "--fusion-threshold-mb",
               "cycle_time_ms": "--cycle-time-ms",
               "cache_capacity": "--cache-capacity",
               "hierarchical_allreduce": "--hierarchical-allreduce",
               "hierarchical_allgather": "--hierarchical-allgather",
               "torus_allreduce": "--torus-allreduce"},
    "autotune": {"enabled": "--autotune",
                 "log_file": "--autotune-log-file",
                 "warmup_samples": "--autotune-warmup-samples",
                 "steps_per_sample": "--autotune-steps-per-sample",
                 "bayes_opt_max_samples": "--autotune-bayes-opt-max-samples",
                 "gaussian_process_noise": "--autotune-gaussian-process-noise"},
    "timeline": {"filename": "--timeline-filename",
                 "mark_cycles": "--timeline-mark-cycles"},
    "stall_check": {"enabled": "--stall-check",
                    "warning_time_seconds": "--stall-check-warning-time-seconds",
                    "shutdown_time_seconds": "--stall-check-shutdown-time-seconds"},
    "library_options": {"mpi_threads_disable": "--mpi-threads-disable",
                        "num_nccl_streams": "--num-nccl-streams",
                        "ccl_bgt_affinity": "--thread-affinity",
                        "thread_affinity": "--thread-affinity",
                        "gloo_timeout_seconds": "--gloo-timeout-seconds"},
    "logging": {"level": "--log-level",
                "with_timestamp": "--log-with-timestamp"},
}
CONTROLLERS = {"gloo": "--gloo", "mpi": "--mpi"}
_NOT_FROM_A_FILE = {"help", "version", "command", "config_file"}


def apply(parser, path):
    """Makes the file's values the parser's defaults."""
    values = _load(parser, path)
    flags = {option: action for action in parser._actions
             if action.dest not in _NOT_FROM_A_FILE for option in action.option_strings}
    defaults = {}

    def set_flag(key, flag, value):
        action = flags[flag]
        value = _value(parser, path, key, action, value, flag)
        if flag in CONTROLLERS.values():
            # Applied only when the command line names no controller (arguments.py).
            if value:
                defaults["config_controller"] = action.dest
        else:
            defaults[action.dest] = value

    for key, value in values.items():
        key = str(key)
        if key in SECTIONS:
            if value is None:
                continue
            if not isinstance(value, dict):
                parser.error(f"--config-file {path!r}: section {key!r} must be a mapping, "
                             f"got {value!r}")
            for inner, inner_value in value.items():
                flag = SECTIONS[key].get(str(inner))
                if flag is None:
                    parser.error(f"--config-file {path!r}: unknown key {inner!r} in section "
                                 f"{key!r}; its keys are {', '.join(SECTIONS[key])}")
                set_flag(f"{key}.{inner}", flag, inner_value)
        elif key == "controller":
            flag = CONTROLLERS.get(str(value).lower())
            if flag is None:
                parser.error(f"--config-file {path!r}: controller must be gloo or mpi, "
                             f"got {value!r}")
            set_flag(key, flag, True)
        else:
            name = key.lstrip("-").replace("_", "-")
            flag = next((f for f in (f"--{name}", f"-{name}") if f in flags), None)
            if flag is None:
                parser.error(f"--config-file {path!r}: unknown key {key!r}; keys are "
                             f"horovodrun's sections ({', '.join(SECTIONS)}, controller) or "
                             f"long flag names, e.g. num-proc, hosts, fusion-threshold-mb")
            set_flag(key, flag, value)
    parser.set_defaults(**defaults)


def _load(parser, path):
    try:
        with open(path, encoding="utf-8") as f:
            values = yaml.safe_load(f) or {}
    except OSError as error:
        parser.error(f"cannot read --config-file {path!r}: {error.strerror or error}")
    except yaml.YAMLError as error:
        parser.error(f"--config-file {path!r} is not valid YAML: {error}")
    if not isinstance(values, dict):
        parser.error(f"--config-file {path!r} must be a mapping of flag names to values")
    return values


def _value(parser, path, key, action, value, flag):
    if action.nargs == 0:  # store_true, store_const and --x/--no-x switches
        if not isinstance(value, bool):
            parser.error(f"--config-file {path!r}: {key!r} must be true or false, "
                         f"got {value!r}")
        if isinstance(action, argparse.BooleanOptionalAction):
            return value != flag.startswith("--no-")
        if isinstance(action.const, bool):
            return action.const if value else not action.const
        return action.const if value else None
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
