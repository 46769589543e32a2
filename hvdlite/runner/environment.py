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
    reads them at init()), and those of --horovod-alias."""
    env = {}
    if args.horovod_alias:
        env.update(alias.child_environment(args.horovod_alias))
    if args.fusion_threshold_mb is not None:
        env["HVDLITE_FUSION_THRESHOLD"] = str(int(args.fusion_threshold_mb * 1024 * 1024))
    if args.cycle_time_ms is not None:
        env["HVDLITE_CYCLE_TIME"] = f"{args.cycle_time_ms:g}"
    if args.cache_capacity is not None:
        env["HVDLITE_CACHE_CAPACITY"] = str(args.cache_capacity)
    if args.disable_cache:
        env["HVDLITE_CACHE_CAPACITY"] = "0"
    if args.timeline_filename:
        env["HVDLITE_TIMELINE"] = args.timeline_filename
    if args.timeline_mark_cycles:
        env["HVDLITE_TIMELINE_MARK_CYCLES"] = "1"
    if args.autotune:
        env["HVDLITE_AUTOTUNE"] = "1"
    if args.autotune_log_file:
        env["HVDLITE_AUTOTUNE_LOG"] = args.autotune_log_file
    if args.stall_check_warning_time_seconds is not None:
        env["HVDLITE_STALL_CHECK_TIME_SECONDS"] = f"{args.stall_check_warning_time_seconds:g}"
    if args.stall_check_shutdown_time_seconds is not None:
        env["HVDLITE_STALL_SHUTDOWN_TIME_SECONDS"] = \
            f"{args.stall_check_shutdown_time_seconds:g}"
    if args.log_level:
        env["HVDLITE_LOG_LEVEL"] = args.log_level
    if args.tcp:
        env["HVDLITE_CPU_OPERATIONS"] = "tcp"
    return env
