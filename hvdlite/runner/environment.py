"""The environment variables hvdliterun hands to each rank. Every topology
variable is set under both HVDLITE_* and Horovod's HOROVOD_* names, so
scripts and libraries written for Horovod find what they expect."""


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
