"""Rendezvous rounds of an elastic job, as the driver
(hvdlite/runner/elastic/driver.py) publishes them in the job's store and the
workers read them (hvdlite/common/membership.py).

Note [Elastic rounds]
Every time the job (re-)forms, the driver publishes round R: for each worker
(by its id) its rank, size, local and cross rank and host. The core's own
rendezvous then runs under the store prefix of round R (HVDLITE_RENDEZVOUS_ROUND),
so processes started at different times meet in the same round.

    {job}/elastic/round/{R}        the round, JSON (Round.to_json)
    {job}/elastic/latest           R of the newest round, set after it
    {job}/elastic/over             a worker finished training: no round forms any more
                                   (Note [Training over] in hvdlite/runner/elastic/driver.py)
    {job}/elastic/round/{R}/ready  workers of round R about to init (a counter)
    {job}/elastic/round/{R}/in_run those of them that come from inside hvd.elastic.run (a counter)
    {job}/elastic/round/{R}/reset  workers of round R that want a new round (a counter)
    {job}/elastic/round/{R}/failure/{worker}  that worker of round R wants one, and why
                                   (failure_record: JSON, or empty)
    {job}/elastic/late/{W}         "1" while worker W is a late joiner that has not entered run()
                                   (Note [Late joiners] in hvdlite/common/late_joiners.py)
    {job}/r{R}/abort               why round R's rendezvous cannot complete (set by the driver)

A worker that failed a collective asks for a new round (reset), saying
why (failure: the driver learns from it that this worker is accounted for,
and which host vanished, Note [Silent hosts] in
hvdlite/runner/elastic/driver.py), waits for round R+1 to
appear, then joins the newest round. Before the core's rendezvous, the
workers of a round count themselves in (ready); if the driver publishes a
newer round meanwhile (one of them died), they move on to it instead of
waiting for the dead one. A worker that dies after the others counted in
leaves them waiting inside the core's rendezvous, which watches the abort
key for that reason.
"""
import json
from dataclasses import dataclass

LAYOUT_FIELDS = ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size")


def round_key(job_id, round_):
    return f"{job_id}/elastic/round/{round_}"


def latest_key(job_id):
    return f"{job_id}/elastic/latest"


def training_over_key(job_id):
    return f"{job_id}/elastic/over"


def ready_key(job_id, round_):
    return f"{round_key(job_id, round_)}/ready"


def in_run_key(job_id, round_):
    return f"{round_key(job_id, round_)}/in_run"


def late_joiner_key(job_id, worker_id):
    return f"{job_id}/elastic/late/{worker_id}"


def reset_key(job_id, round_):
    return f"{round_key(job_id, round_)}/reset"


def failure_key(job_id, round_, worker_id):
    return f"{round_key(job_id, round_)}/failure/{worker_id}"


def failure_record(error):
    """What a worker tells the driver along with its request for a new round
    (failure_key): the error's text for the driver's reports and, read from
    the error's field (hvdlite.PeerLostError.lost_hosts), the hosts that
    stopped answering. error: an HvdliteInternalError, or None."""
    if error is None:
        return b""
    return json.dumps({"error": str(error),
                       "lost_hosts": list(getattr(error, "lost_hosts", ()) or ())}).encode("utf-8")


def read_failure_record(data):
    """(the error's text, the set of hosts it names lost) from a
    failure_record (b"": a worker that asked without an error)."""
    if not data:
        return "", set()
    record = json.loads(data.decode("utf-8"))
    return record["error"], set(record["lost_hosts"])


def rendezvous_abort_key(job_id, round_):
    """Under the core's own store prefix of round R (Note [Rendezvous abort]
    in csrc/transport/tcp/mesh.h): the driver sets it to the reason once
    round R can no longer form (one of its workers ended, or a newer round
    replaced it), and workers still waiting in R's rendezvous give up at
    once instead of after --start-timeout."""
    return f"{job_id}/r{round_}/abort"


@dataclass(frozen=True)
class Placement:
    """One worker's place in a round."""
    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_rank: int
    cross_size: int
    host: str
    # The address a worker on the driver's machine listens on in this round:
    # one remote hosts reach when the round has workers there (None: keep
    # the one it started with, the loopback address). Workers on remote
    # hosts listen where their agent reached the store (agent.py).
    bind_addr: str = None

    def environment(self, round_):
        """HVDLITE_*/HOROVOD_* variables that put the core in this place."""
        env = {"HVDLITE_RENDEZVOUS_ROUND": str(round_), "HVDLITE_HOSTNAME": self.host,
               "HOROVOD_HOSTNAME": self.host}
        if self.bind_addr:
            env["HVDLITE_BIND_ADDR"] = self.bind_addr
        for name in LAYOUT_FIELDS:
            value = str(getattr(self, name))
            env[f"HVDLITE_{name.upper()}"] = env[f"HOROVOD_{name.upper()}"] = value
        return env


@dataclass
class Round:
    number: int
    placements: dict  # worker id -> Placement

    @classmethod
    def assign(cls, number, workers, bind_addrs=None):
        """Ranks in the given order of (worker id, host) pairs; local ranks
        count the workers of one host in that order, cross ranks the hosts
        that have a given local rank (as hosts.place_ranks does).
        bind_addrs: {worker id: address} for workers that get one."""
        bind_addrs = bind_addrs or {}
        per_host = {}
        local = []
        for _, host in workers:
            local.append(per_host.get(host, 0))
            per_host[host] = local[-1] + 1
        hosts_with_local = {}
        cross = []
        for (_, host), local_rank in zip(workers, local):
            cross.append(hosts_with_local.get(local_rank, 0))
            hosts_with_local[local_rank] = cross[-1] + 1
        placements = {}
        for rank, ((worker_id, host), local_rank, cross_rank) in \
                enumerate(zip(workers, local, cross)):
            placements[worker_id] = Placement(rank, len(workers), local_rank, per_host[host],
                                              cross_rank, hosts_with_local[local_rank], host,
                                              bind_addrs.get(worker_id))
        return cls(number, placements)

    @property
    def size(self):
        return len(self.placements)

    def to_json(self):
        return json.dumps({"round": self.number,
                           "workers": {worker_id: [getattr(p, name) for name in LAYOUT_FIELDS]
                                       + [p.host, p.bind_addr]
                                       for worker_id, p in self.placements.items()}})

    @classmethod
    def from_json(cls, text):
        data = json.loads(text)
        return cls(data["round"], {worker_id: Placement(*values)
                                   for worker_id, values in data["workers"].items()})
