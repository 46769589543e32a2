"""The environment variables hvdliterun hands to each rank. Every topology
variable is set under both HVDLITE_* and Horovod's HOROVOD_* names, so
scripts and libraries written for Horovod find what they expect."""
from hvdlite import alias


def job_environment(store_addr, store_port, secret, job_id, bind_addr, start_timeout):
    """Variables that are the same on every rank of one job."""
    return {
        "HVDLITE_STORE_ADDR": store_addr,
        "HVDLITE_STORE_PORT": str(store_port),
        # Only ever in the environment: a command line is visible to every
        # user through ps and /proc/<pid>/cmdline.
        "HVDLITE_SECRET": secret,
        "HVDLITE_JOB_ID": job_id,
        "HVDLITE_BIND_ADDR": bind_addr,
        "HVDLITE_START_TIMEOUT": str(start_timeout),
        "PYTHONUNBUFFERED": "1",
    }


def rank_environment(rank, size, local_rank, local_size, cross_rank, cross_size, hostname):
    """Variables that place one rank in the job."""
    values = {
        "RANK": rank,
        "SIZE": size,
        "LOCAL_RANK": local_rank,
        "LOCAL_SIZE": local_size,
        "CROSS_RANK": cross_rank,
        "CROSS_SIZE": cross_size,
        "HOSTNAME": hostname,
    }
    return {f"{prefix}_{name}": str(value)
            for prefix in ("HVDLITE", "HOROVOD") for name, value in values.items()}


def tuning_environment(args):
    """HVDLITE_* variables for the tuning flags that were given (the core
    reads them at init()), and those of --horovod-alias. A --no-X flag sets
    its variable to 0, so that it also overrides the launcher's environment."""
    env = {}
    if args.horovod_alias:
        env.update(alias.child_environment(args.horovod_alias))
    if args.fusion_threshold_mb is not None:
        env["HVDLITE_FUSION_THRESHOLD"] = _number(int(args.fusion_threshold_mb * 1024 * 1024))
    numbers = (("cycle_time_ms", "CYCLE_TIME"), ("cache_capacity", "CACHE_CAPACITY"),
               ("autotune_warmup_samples", "AUTOTUNE_WARMUP_SAMPLES"),
               ("autotune_steps_per_sample", "AUTOTUNE_STEPS_PER_SAMPLE"),
               ("stall_check_warning_time_seconds", "STALL_CHECK_TIME_SECONDS"),
               ("stall_check_shutdown_time_seconds", "STALL_SHUTDOWN_TIME_SECONDS"),
               ("gloo_timeout_seconds", "START_TIMEOUT"))
    for name, variable in numbers:
        if getattr(args, name) is not None:
            env[f"HVDLITE_{variable}"] = _number(getattr(args, name))
    switches = (("hierarchical_allreduce", "HIERARCHICAL_ALLREDUCE", True),
                ("hierarchical_allgather", "HIERARCHICAL_ALLGATHER", True),
                ("autotune", "AUTOTUNE", True),
                ("timeline_mark_cycles", "TIMELINE_MARK_CYCLES", True),
                ("stall_check", "STALL_CHECK_DISABLE", False),
                ("log_with_timestamp", "LOG_HIDE_TIME", False))
    for name, variable, same in switches:
        value = getattr(args, name)
        if value is not None:
            env[f"HVDLITE_{variable}"] = "1" if value == same else "0"
    for name, variable in (("timeline_filename", "TIMELINE"),
                           ("autotune_log_file", "AUTOTUNE_LOG"), ("log_level", "LOG_LEVEL")):
        if getattr(args, name):
            env[f"HVDLITE_{variable}"] = getattr(args, name)
    if args.tcp:
        env["HVDLITE_CPU_OPERATIONS"] = "tcp"
        env["NCCL_IB_DISABLE"] = "1"
    return env


def _number(value):
    """`value` as the core parses it back exactly (1e+06 would lose digits)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)
