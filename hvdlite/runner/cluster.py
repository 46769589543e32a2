"""What hvdlite.ray and hvdlite.spark share on the driver: the job's
rendezvous store, the environment each rank is started with, and the error
that names the rank that failed. (Their elastic jobs are run by hvdliterun's
elastic driver, hvdlite/runner/elastic/, with a worker source each.)

The engine (Ray actors, Spark barrier tasks) places and starts the workers;
this module only turns "worker w runs on host h" into what a rank needs:
the layout comes from rounds.Round.assign (the elastic driver's, so local and
cross ranks follow the same rules as under hvdliterun) and the job's
variables from runner.environment.job_environment.
"""
import socket

from hvdlite.common import defaults
from hvdlite.common.rendezvous import LOOPBACK, listen_address
from hvdlite.runner.environment import job_environment
from hvdlite.runner.failure_rule import failure_line
from hvdlite.runner.secret import make_job_id, make_secret
from hvdlite.store import StoreClient, StoreServer
from hvdlite.store.rounds import Round


class WorkerError(RuntimeError):
    """A rank of a Ray or Spark job failed: says which rank, where, and how,
    in the shape every launcher reports its root-cause failure
    ("rank 1 (Ray node 10.0.0.7 (8f3c...)) raised KeyError: 'x'"; Note [One
    failure rule] in hvdlite/runner/failure_rule.py).

    Args:
        rank (int): the failed rank (kept as `.rank`).
        host (str): where it ran (kept as `.host`).
        what (str): how it ended ("raised KeyError: 'x'", "was lost: ..."); part of the message.
    """

    def __init__(self, rank, host, what):
        super().__init__(failure_line(f"rank {rank}", host, what))
        self.rank = rank
        self.host = host


class ClusterStore:
    """The job's rendezvous store, served by the driver at `address` only,
    where every worker connects (each connection must prove the job's
    secret); on 127.0.0.1 when every worker runs on the driver's machine
    (`single_host`: Ray or Spark in local mode)."""

    def __init__(self, address=None, start_timeout=defaults.START_TIMEOUT_S, single_host=False):
        self.secret, self.job_id = make_secret(), make_job_id()
        self.address = LOOPBACK if single_host else (address or driver_address())
        self.start_timeout = start_timeout
        self._server = StoreServer(self.secret, host=listen_address(self.address, single_host))
        self._server.start()
        self.client = StoreClient(self.address, self._server.port, self.secret,
                                  timeout=start_timeout)

    @property
    def port(self):
        return self._server.port

    def environment(self, bind_addr):
        """The variables shared by every rank; `bind_addr` is where the rank listens."""
        return job_environment(store_addr=self.address, store_port=self.port,
                               secret=self.secret, job_id=self.job_id, bind_addr=bind_addr,
                               start_timeout=f"{self.start_timeout:g}")

    def close(self):
        self.client.close()
        self._server.stop()


def rank_environments(workers, round_=None):
    """workers: (worker id, host identity) pairs in rank order; returns
    {worker id: HVDLITE_*/HOROVOD_* layout variables}. round_: the rendezvous
    round every rank's init() joins; None lets each process count its own
    init() calls (the core's default), so that workers that run several
    functions, each with init() and shutdown(), meet anew each time."""
    layout = Round.assign(round_ or 0, list(workers))
    envs = {worker_id: placement.environment(round_ or 0)
            for worker_id, placement in layout.placements.items()}
    if round_ is None:
        for env in envs.values():
            del env["HVDLITE_RENDEZVOUS_ROUND"]
    return envs


def group_by_host(workers):
    """Stable order with each host's workers together, hosts in order of first
    appearance: local ranks are then contiguous, as under hvdliterun."""
    hosts = {}
    for worker in workers:
        hosts.setdefault(worker[1], []).append(worker)
    return [worker for grouped in hosts.values() for worker in grouped]


def driver_address():
    """An address of this machine that other nodes reach (the one on the
    default route), or the loopback address on a machine without a network."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # no packet is sent
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"
