"""The environment variables hvdliterun hands to each rank. Every topology
variable is set under both HVDLITE_* and Horovod's HOROVOD_* names, so
scripts and libraries written for Horovod find what they expect.

Note [NCCL's network]
Left to itself NCCL picks its network (InfiniBand, else the first interface
that is not loopback or docker*), which can be a bridge or a management
network that does not route between the hosts: ranks then hang in
ncclCommInitRank until the timeout. So, as horovodrun does, hvdliterun tells
NCCL the network hvdlite itself uses, unless the user set NCCL_SOCKET_IFNAME:
--network-interface (or HVDLITE_NETWORK_INTERFACE) for every rank, else, in
a job of several hosts, each host's ranks get the interface that host
reached the launcher through (remote hosts: the agent's connection to the
store; the launcher's host: the address the others reached it at). Every
NCCL_* variable of the launcher's environment reaches every rank (ssh: the
forwarded environment; mpirun: forwarded by name).
"""
import os

from hvdlite import alias
from hvdlite.store import network


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
    if args.network_interface:
        env.update(nccl_network(args.network_interface.split(","), os.environ))
    return env


def nccl_network(interfaces, environ):
    """{"NCCL_SOCKET_IFNAME": ...} naming `interfaces` (Note [NCCL's network]),
    or {} when `environ` (the rank's environment) sets it already or there
    are none."""
    if "NCCL_SOCKET_IFNAME" in environ or not interfaces:
        return {}
    return {"NCCL_SOCKET_IFNAME": ",".join(interfaces)}


def nccl_network_towards(bind_addr, environ):
    """nccl_network() for the interface holding `bind_addr`, this host's
    address that the job's other hosts reach it at; {} for loopback (one
    host: NCCL needs no network) or an address no interface holds."""
    if not bind_addr or bind_addr.startswith("127."):
        return {}
    found = [name for name, addresses in network.ipv4_addresses().items() if bind_addr in addresses]
    return nccl_network(found[:1], environ)


def describe_nccl_network(environ):
    """Lines for --check-build: the NCCL network settings of `environ` and
    what hvdliterun would set (Note [NCCL's network])."""
    chosen = environ.get("NCCL_SOCKET_IFNAME")
    lines = [f"    NCCL network: NCCL_SOCKET_IFNAME={chosen} (yours; hvdliterun leaves it)" if chosen else
             "    NCCL network: hvdliterun sets NCCL_SOCKET_IFNAME to --network-interface "
             "(HVDLITE_NETWORK_INTERFACE), else on each host of a multi-host job to the interface "
             "that host reaches the launcher through"]
    others = sorted(f"{name}={value}" for name, value in environ.items()
                    if name.startswith("NCCL_") and name != "NCCL_SOCKET_IFNAME")
    if others:
        lines.append(f"    NCCL settings passed to every rank: {' '.join(others)}")
    return lines


def _number(value):
    """`value` as the core parses it back exactly (1e+06 would lose digits)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)
