"""A rendezvous store for jobs that mpirun, srun or torchrun started
without hvdliterun: rank 0 hosts one in-process (hvdlite.store) and
the other ranks learn where it is, by the first of these that applies:

1. HVDLITE_STORE_ADDR and HVDLITE_STORE_PORT set by the user: rank 0 listens
   on that port, the others connect to that address.
2. torchrun: rank 0 listens on a free port and publishes its address (never
   the secret) in torchrun's own store at MASTER_ADDR:MASTER_PORT, which
   torchrun's agent already serves; that port itself is taken.
3. mpirun with mpi4py importable: rank 0 listens on a free port and
   broadcasts the address (never the secret) over MPI_COMM_WORLD.
4. srun: rank 0 listens on the first node of the step (srun's default block
   distribution puts rank 0 there), on a port derived from the job and step
   ids and the secret.
5. mpirun on one host: 127.0.0.1 and a port derived from the MPI job's id
   and the secret.

Otherwise init() fails saying what to set. When the core has the MPI
transport, mpirun jobs need no store (the core finds its peers over MPI).

Note [No computable secret]: the ranks cannot hand each other a secret
privately before they meet, and everything they both know of the job (ids,
node lists) other users see too (squeue, ps). So the secret is one only
this user has: HVDLITE_SECRET, or the user's secret file
(hvdlite/common/user_secret.py). Torchrun's store is open to anyone who
reaches MASTER_PORT, and MPI's own connections (Open MPI's and MPICH's TCP
transports) are neither authenticated nor private, so they carry the
address only; a rogue address leads to a store that cannot prove the
secret. A job of more than one rank without a secret does not start.

The store listens on the address it announces only: 127.0.0.1 for a job
on one host.
"""
import hashlib
import hmac
import os
import socket
import threading

from hvdlite.common import config, defaults, environment, user_secret
from hvdlite.store import StoreServer, network

_DERIVED_PORTS = (20000, 50000)
LOOPBACK = "127.0.0.1"

_lock = threading.Lock()
_hosted = None  # this process's StoreServer, when it is rank 0
_translated = {}  # what foreign_job_environment last returned


def translated_environment():
    """The HVDLITE_* variables the last init() derived from another launcher's
    environment (not in os.environ), for diagnostics."""
    return dict(_translated)


def job_secret():
    """The secret of the job this process runs in (hvdliterun's, or the one
    init() took for another launcher's job); None where there is none (one
    rank, or a job over MPI only)."""
    return config.get("HVDLITE_SECRET") or config.get("HVDLITE_SECRET", _translated) or None


def foreign_job_environment(environ, mpi_transport=False):
    """HVDLITE_* variables for a job another launcher started (its layout and
    a rendezvous store, hosted here if this is rank 0); {} for hvdliterun jobs."""
    env = _translate(environ, mpi_transport)
    _translated.clear()
    _translated.update(env)
    return env


def _translate(environ, mpi_transport):
    job = environment.detect_foreign_job(environ)
    if job is None:
        return {}
    env = dict(job.layout)
    if config.get("HVDLITE_SIZE", env) == 1:
        return env
    if mpi_transport and job.launcher in ("openmpi", "mpich"):
        return env
    if config.get("HVDLITE_STORE_ADDR", environ) and config.get("HVDLITE_JOB_ID", environ):
        store_addr = config.get("HVDLITE_STORE_ADDR", environ)  # hvdliterun --mpi runs the store
    else:
        store_addr, port, secret = _store_for(job, environ, config.get("HVDLITE_RANK", env) == 0)
        env.update(HVDLITE_STORE_ADDR=store_addr, HVDLITE_STORE_PORT=str(port),
                   HVDLITE_SECRET=secret,
                   HVDLITE_JOB_ID=hashlib.sha256(job.job_key.encode()).hexdigest()[:12])
    if not config.get("HVDLITE_BIND_ADDR", environ):
        env["HVDLITE_BIND_ADDR"] = named_interface_address(environ) or address_towards(store_addr)
    return env


def named_interface_address(environ):
    """The IPv4 address of the interface HVDLITE_SOCKET_IFNAME (or Horovod's
    HOROVOD_GLOO_IFACE, or gloo's GLOO_SOCKET_IFNAME) names, or None;
    comma-separated, the first one this host has wins."""
    for variable, value in config.each("HVDLITE_SOCKET_IFNAME", environ):
        names = [n.strip() for n in value.split(",") if n.strip()]
        if names:
            try:
                return network.interface_address(names)
            except network.NetworkError as error:
                raise ValueError(f"{variable}={value}: {error}") from None
    return None


def address_towards(host):
    """This host's address on the route to `host` (no packet is sent)."""
    try:
        address = socket.gethostbyname(host)
        if address.startswith("127."):
            return "127.0.0.1"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, 9))
            return probe.getsockname()[0]
    except OSError as error:
        raise ValueError(f"cannot find this host's address towards the rendezvous store at "
                         f"{host!r}: {error}; set HVDLITE_BIND_ADDR to the address other "
                         f"ranks reach this host at") from error


def start_timeout(environ):
    """Seconds a rank waits for the others at start, read as the core reads it
    (csrc/core/config.cc): HVDLITE_/HOROVOD_START_TIMEOUT, else Horovod's
    HOROVOD_GLOO_TIMEOUT_SECONDS (what horovodrun --gloo-timeout-seconds sets)."""
    seconds = config.get("HVDLITE_START_TIMEOUT", environ, default=None)
    if seconds is None:
        seconds = config.get("HVDLITE_GLOO_TIMEOUT_SECONDS", environ,
                             default=defaults.RANK_START_TIMEOUT_S)
    return seconds


def _store_for(job, environ, is_rank0):
    """(address, port, secret) of the job's store; rank 0 starts it."""
    timeout = start_timeout(environ)
    if config.get("HVDLITE_STORE_ADDR", environ) and config.lookup("HVDLITE_STORE_PORT", environ):
        return _at_fixed_address(job, environ, config.get("HVDLITE_STORE_ADDR", environ),
                                 config.get("HVDLITE_STORE_PORT", environ), is_rank0)
    if job.launcher == "torchrun":
        return _published_through_torch(job, environ, is_rank0, timeout)
    if job.launcher in ("openmpi", "mpich") and _mpi4py_importable():
        return _broadcast_over_mpi(job, environ, is_rank0)
    if job.single_host:
        return _at_fixed_address(job, environ, LOOPBACK, None, is_rank0)
    if job.launcher == "slurm" and job.details.get("first_node"):
        return _at_fixed_address(job, environ, job.details["first_node"], None, is_rank0)
    raise ValueError(
        f"this job was started by {job.launcher} on several hosts, and hvdlite cannot tell "
        f"the ranks where to meet: install mpi4py (rank 0 then shares the address over "
        f"MPI), or set HVDLITE_STORE_ADDR to rank 0's host and HVDLITE_STORE_PORT to a free "
        f"port there, or start the job with `hvdliterun -np N -H host1:n1,host2:n2 ...`")


def derived_port(job_key, secret):
    """A port every rank computes alike from the job's identity and its
    secret: other users cannot tell which port to take first."""
    low, high = _DERIVED_PORTS
    digest = hmac.new(secret.encode(), f"hvdlite-port/{job_key}".encode(), hashlib.sha256)
    return low + int(digest.hexdigest()[:8], 16) % (high - low)


def _at_fixed_address(job, environ, address, port, is_rank0):
    # Every rank must know the secret without talking first (Note [No
    # computable secret]).
    secret = user_secret.job_secret(environ)
    if port is None:
        port = derived_port(job.job_key, secret)
    if is_rank0:
        _host_store(secret, port, address, job.single_host)
    return address, port, secret


def _published_through_torch(job, environ, is_rank0, timeout):
    import datetime
    master = job.details
    # Before torch's store: a job without a secret stops here, having
    # published nothing (Note [No computable secret]).
    secret = user_secret.job_secret(environ)
    try:
        import torch.distributed as dist
    except ImportError as error:
        raise ValueError(
            f"RANK/WORLD_SIZE/MASTER_ADDR say torchrun started this job, but torch does not "
            f"import ({error}), so hvdlite cannot use torchrun's store to meet the other "
            f"ranks; set HVDLITE_STORE_ADDR to rank 0's host and HVDLITE_STORE_PORT to a "
            f"free port there") from error
    try:
        torch_store = dist.TCPStore(master["master_addr"], master["master_port"],
                                    is_master=False,
                                    timeout=datetime.timedelta(seconds=timeout))
    except Exception as error:  # torch raises RuntimeError/DistNetworkError subclasses
        raise ValueError(f"cannot reach torchrun's store at {master['master_addr']}:"
                         f"{master['master_port']} (MASTER_ADDR/MASTER_PORT): {error}") from error
    key = f"hvdlite/{job.job_key}/store"
    if is_rank0:
        address = LOOPBACK if job.single_host else address_towards(master["master_addr"])
        server = _host_store(secret, 0, address, job.single_host)
        torch_store.set(key, f"{address} {server.port}")
    try:
        address, port = torch_store.get(key).decode().split()
    except Exception as error:
        raise ValueError(f"rank 0 did not publish hvdlite's store address in torchrun's "
                         f"store within {timeout:g} s (key {key!r}): {error}") from error
    return address, int(port), secret


def _broadcast_over_mpi(job, environ, is_rank0):
    # MPI's connections carry the store's address, never the secret (Note
    # [No computable secret]): every rank reads the user's, as under srun.
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    secret = _agreed_secret(comm, environ)
    published = None
    if is_rank0:
        try:
            address = LOOPBACK if job.single_host else _first_network_address()
            published = (address, _host_store(secret, 0, address, job.single_host).port, None)
        except (OSError, ValueError) as error:
            # Said to every rank, so that none waits for a store that never came.
            published = (None, None, str(error))
            comm.bcast(published, root=0)
            raise
    address, port, failure = comm.bcast(published, root=0)
    if failure is not None:
        raise ValueError(f"rank 0 could not start the rendezvous store: {failure}")
    return address, port, secret


def _agreed_secret(comm, environ):
    """This rank's user secret, once every rank of `comm` has read one and all
    are the same; otherwise SecretError on every rank, naming the ranks and
    hosts that lack it or differ (instead of a wait until the start timeout)."""
    secret, problem = None, None
    try:
        secret = user_secret.job_secret(environ)
    except user_secret.SecretError as error:
        problem = str(error)
    mine = (socket.gethostname(), problem, user_secret.fingerprint(secret) if secret else None)
    everyone = comm.allgather(mine)
    missing = [(rank, host, why) for rank, (host, why, _) in enumerate(everyone) if why]
    if missing:
        rank, host, why = missing[0]
        raise user_secret.SecretError(
            f"{len(missing)} of {len(everyone)} ranks of this mpirun job have no job secret "
            f"(ranks {', '.join(str(m[0]) for m in missing)}); rank {rank} on {host}: {why}")
    prints = {fingerprint for _, _, fingerprint in everyone}
    if len(prints) > 1:
        first = everyone[0][2]
        other = [(rank, host) for rank, (host, _, fingerprint) in enumerate(everyone)
                 if fingerprint != first]
        raise user_secret.SecretError(
            f"the ranks of this mpirun job read different job secrets: rank 0 "
            f"({everyone[0][0]}) and rank{'s' if len(other) > 1 else ''} "
            f"{', '.join(f'{rank} ({host})' for rank, host in other)} differ. Each rank "
            f"reads {user_secret.SECRET_VARIABLE} or its own "
            f"{user_secret.secret_file_path(environ)}: pass the same "
            f"{user_secret.SECRET_VARIABLE} to every rank (`mpirun -x "
            f"{user_secret.SECRET_VARIABLE}`), or let every node see the same secret file "
            f"(a shared $HOME, or {user_secret.FILE_VARIABLE})")
    return secret


def _host_store(secret, port, address, single_host):
    """Starts this process's store once (later init() rounds reuse it: the
    core prefixes every key with the round), listening on `address` only."""
    global _hosted
    with _lock:
        if _hosted is None:
            host = listen_address(address, single_host)
            try:
                _hosted = StoreServer(secret, host=host, port=port).start()
            except OSError as error:
                raise ValueError(f"rank 0 cannot listen for the rendezvous store on "
                                 f"{host}:{port} (the address it tells the other ranks): "
                                 f"{error.strerror or error}; set HVDLITE_STORE_ADDR to an "
                                 f"address of rank 0's host and HVDLITE_STORE_PORT to a free "
                                 f"port there") from error
        return _hosted


def listen_address(address, single_host):
    """The IPv4 address the store binds so that it is reachable at `address`
    (what the ranks are told) and nowhere else."""
    try:
        resolved = socket.gethostbyname(address)
    except OSError as error:
        raise ValueError(f"rank 0 cannot resolve the rendezvous store's address {address!r}: "
                         f"{error}; set HVDLITE_STORE_ADDR to an address of rank 0's host "
                         f"that every host reaches") from error
    if resolved.startswith("127.") and not address.startswith("127.") and not single_host:
        # A host name that is loopback here only (e.g. Debian's 127.0.1.1 for
        # its own name): the other hosts' ranks resolve it elsewhere, and a
        # store on loopback would never see them.
        raise ValueError(f"the rendezvous store's address {address!r} is {resolved} (loopback) "
                         f"on the store's host, but the job has ranks on other hosts, which "
                         f"would not reach it there; give an address of this host that every "
                         f"host reaches (for srun, mpirun or torchrun: HVDLITE_STORE_ADDR, and "
                         f"HVDLITE_STORE_PORT a free port there)")
    return resolved


def _mpi4py_importable():
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


def _first_network_address():
    return network.store_candidates()[0]
