"""The environment handed to the core: HVDLITE_*/HOROVOD_* variables as set
by hvdliterun (or by the user), or, when another tool started the job, its
variables translated into ours.

    mpirun (Open MPI)   OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE
    mpirun (MPICH, Intel MPI, Hydra)  PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
    torchrun            RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR/PORT
    srun (SLURM)        SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID, node list

Cross ranks are left for the core to derive from the hosts' names at
rendezvous. How those jobs find a rendezvous store is rendezvous.py's part.
"""
import re
from dataclasses import dataclass, field

from hvdlite.common import config

LAYOUT_NAMES = ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK", "CROSS_SIZE")


@dataclass
class ForeignJob:
    """A job started by mpirun, srun or torchrun rather than hvdliterun."""
    launcher: str  # "openmpi", "mpich", "torchrun" or "slurm"
    layout: dict  # HVDLITE_* layout variables
    job_key: str  # the same on every rank of this job, different for the next job
    single_host: bool
    details: dict = field(default_factory=dict)  # launcher-specific (e.g. MASTER_ADDR)


def core_environment(environ):
    """Returns the HVDLITE_*/HOROVOD_* variables the core reads, as a plain
    dict of strings (without the translated layout of another launcher:
    see detect_foreign_job), and CUDA_VISIBLE_DEVICES and the NCCL_*
    variables, which it only reports (messages, the info log)."""
    env = config.hvdlite_variables(environ)
    env.update({name: value for name, value in environ.items()
                if name.startswith("NCCL_") or name == "CUDA_VISIBLE_DEVICES"})
    return env


def detect_foreign_job(environ):
    """The launcher that started this process, if it was not hvdliterun and
    the user did not set HVDLITE_RANK/SIZE; else None."""
    if config.is_set("HVDLITE_RANK", environ) or config.is_set("HVDLITE_SIZE", environ):
        return None
    for detect in (_openmpi, _mpich, _torchrun, _slurm):
        job = detect(environ)
        if job is not None:
            return job
    return None


def _layout(rank, size, local_rank=None, local_size=None):
    values = {"RANK": rank, "SIZE": size, "LOCAL_RANK": local_rank, "LOCAL_SIZE": local_size}
    return {f"HVDLITE_{name}": str(int(value)) for name, value in values.items()
            if value is not None}


def _openmpi(env):
    if "OMPI_COMM_WORLD_RANK" not in env:
        return None
    size = int(env["OMPI_COMM_WORLD_SIZE"])
    local_size = env.get("OMPI_COMM_WORLD_LOCAL_SIZE")
    key = env.get("PMIX_NAMESPACE") or env.get("OMPI_MCA_ess_base_jobid") or \
        env.get("OMPI_MCA_orte_ess_jobid", "")
    return ForeignJob("openmpi", _layout(env["OMPI_COMM_WORLD_RANK"], size,
                                         env.get("OMPI_COMM_WORLD_LOCAL_RANK"), local_size),
                      job_key=f"ompi-{key}", single_host=local_size == str(size))


def _mpich(env):
    rank = env.get("PMI_RANK") or env.get("PMIX_RANK")
    if rank is None or "PMI_SIZE" not in env:
        return None
    size = int(env["PMI_SIZE"])
    local_size = env.get("MPI_LOCALNRANKS")
    key = env.get("PMI_KVSNAME") or env.get("PMIX_NAMESPACE") or env.get("PMI_FD", "")
    return ForeignJob("mpich", _layout(rank, size, env.get("MPI_LOCALRANKID"), local_size),
                      job_key=f"pmi-{key}", single_host=local_size == str(size))


def _torchrun(env):
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    if not all(name in env for name in names):
        return None
    size = int(env["WORLD_SIZE"])
    local_size = env.get("LOCAL_WORLD_SIZE")
    key = f"{env.get('TORCHELASTIC_RUN_ID', '')}/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return ForeignJob("torchrun", _layout(env["RANK"], size, env["LOCAL_RANK"], local_size),
                      job_key=f"torch-{key}", single_host=local_size == str(size),
                      details={"master_addr": env["MASTER_ADDR"],
                               "master_port": int(env["MASTER_PORT"])})


def _slurm(env):
    # SLURM_PROCID alone is also set in a batch script, where only one
    # process runs: only a job step (srun) has a step id.
    if "SLURM_PROCID" not in env or not (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")):
        return None
    size = int(env.get("SLURM_STEP_NUM_TASKS") or env["SLURM_NTASKS"])
    node_id = int(env.get("SLURM_NODEID", "0"))
    tasks = expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE")
                                  or env.get("SLURM_TASKS_PER_NODE", ""))
    local_size = tasks[node_id] if node_id < len(tasks) else None
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") \
        or env.get("SLURM_NODELIST", "")
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    return ForeignJob("slurm", _layout(env["SLURM_PROCID"], size, env.get("SLURM_LOCALID"),
                                       local_size),
                      job_key=f"slurm-{env.get('SLURM_JOB_ID', '')}.{step}",
                      single_host=int(env.get("SLURM_STEP_NUM_NODES")
                                      or env.get("SLURM_NNODES", "1")) == 1,
                      details={"first_node": first_host(nodes), "job_id": env.get("SLURM_JOB_ID"),
                               "step_id": step})


def expand_tasks_per_node(text):
    """SLURM's "2(x3),1" -> [2, 2, 2, 1]."""
    counts = []
    for item in filter(None, text.split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if not match:
            return []
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def first_host(nodelist):
    """The first host of a SLURM node list: "gpu[07-09,12],cpu1" -> "gpu07"."""
    match = re.match(r"([^,\[]+)(?:\[(\d+))?", nodelist.strip())
    if not match:
        return None
    return match.group(1) + (match.group(2) or "")
