"""hvdliterun's worker source (source.py): worker processes, one per slot
of a discovered host, started when a round first needs that slot, each
with a fixed number that prefixes its output (its rank changes from round
to round; the number does not).

Workers on this machine are started directly; those on another host
through one ssh connection and agent per host (starter.py, remote.py,
agent.py), the same machinery as a static job's, kept open while the host
has workers, so that a worker that joins a later round starts over it too.
"""
import queue
import signal

from hvdlite.common import config
from hvdlite.runner.cleanup import remove_shared_memory
from hvdlite.runner.elastic.source import Worker, WorkerSource, worker_environment
from hvdlite.runner.hosts import is_local
from hvdlite.runner.output import stderr_pointer
from hvdlite.runner.processes import signal_group
from hvdlite.runner.remote import reachable_address

# How long to wait for a failed worker's last stderr lines before it is
# reported, so that they come before the report.
STDERR_DRAIN_S = 1.0


class ProcessWorker(Worker):
    """A worker process on (host, slot)."""

    def __init__(self, number, host, slot):
        # The id is unique for the job's lifetime: a slot filled again later
        # gets a new number.
        super().__init__(f"{host}/{slot}/{number}", number, host, slot, host_identity(host))
        self.process = None  # processes.Rank
        self.remote = None  # the RemoteHost it runs through; None on this machine

    def alive(self):
        return self.process.process.poll() is None

    def where(self):
        pid = f", pid {self.process.pid}" if self.process.pid is not None else ""
        return f"host {self.host}{pid}"


class ProcessSource(WorkerSource):
    """discovery: where the hosts come from (discovery.py); starter: how
    processes start (starter.Starter, whose events this source reads)."""

    def __init__(self, discovery, starter, events):
        self._discovery = discovery
        self._starter = starter
        self._events = events
        self._connections = {}  # host -> RemoteHost, while it has workers
        self._failed_here = False  # a worker on this machine failed since the last round
        self._reachable_address = None  # of this machine, from other hosts
        self._job_id = config.get("HVDLITE_JOB_ID", starter.environment)
        self._workers = []
        self._slots = {}  # host -> slots, as discovery last found them

    def find_hosts(self):
        self._slots = self._discovery.find()
        return self._slots

    def workers(self):
        return self._workers

    def start(self, host, slot, first_round):
        worker = ProcessWorker(len(self._workers), host, slot)
        variables = worker_environment(worker.id, first_round)
        # A worker's rounds change its local size; the host's slots bound it
        # (Note [Threads per rank] in hvdlite/common/threads.py).
        slots = self._slots.get(host, 1)
        if is_local(host):
            worker.process = self._starter.here(worker.name, host, variables, kind="worker",
                                                local_size=slots)
        else:
            worker.remote, worker.process = self._start_remote(worker, variables, slots)
        self._workers.append(worker)
        return worker

    def _start_remote(self, worker, variables, slots):
        """(RemoteHost, processes.Rank): over the host's open connection, or
        a new one when it has none (or its connection ended)."""
        layout = {"rank": worker.name, "env": variables, "local_size": slots}
        connection = self._connections.get(worker.host)
        if connection is not None and not connection.ended():
            return connection, connection.add_rank(layout)
        connection = self._starter.connect(worker.host, [layout], more_ranks=True)
        self._connections[worker.host] = connection
        return connection, connection.ranks[worker.name]

    def next_event(self, timeout):
        try:
            kind, value = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if kind != "exit":
            return kind, value
        worker = next(w for w in self._workers if w.process is value)
        worker.ending = _ending(worker)
        return "exit", worker

    def bind_addresses(self, workers):
        """{worker id: address} for the workers on this machine, when some of
        `workers` (a round) run on other hosts: those must reach them."""
        remote = list({w.remote for w in workers if w.remote is not None})
        if not remote:
            return {}
        # Found once (the first time, waiting for an agent to connect), so
        # that a slow new host does not hold up every later round.
        address = self._reachable_address or reachable_address(remote,
                                                                self._starter.remote_options)
        if any(connection.store_addr for connection in remote):
            self._reachable_address = address
        return {w.id: address for w in workers if w.remote is None}

    def stop(self, workers, signum=signal.SIGTERM):
        for worker in workers:
            if worker.remote is None:
                signal_group(worker.process.pid, signum)
            else:
                worker.remote.signal(signum, rank=worker.name)

    def kill_all(self):
        for worker in self._workers:
            if worker.remote is None:
                signal_group(worker.process.pid, signal.SIGKILL)
        for connection in self._remote_hosts():
            connection.signal(signal.SIGKILL)

    def wait_all(self, output_timeout_s=5.0):
        """Waits for every worker and the end of its output (after kill_all)."""
        for connection in self._remote_hosts():
            connection.close()
            connection.wait(output_timeout_s + 10)
        for worker in self._workers:
            worker.process.process.wait()
        for worker in self._workers:
            worker.process.output.join(output_timeout_s)

    def ended(self, worker):
        """When it was the last worker of its host, the host is cleaned up:
        the agent of a remote host is told that no worker follows (it then
        removes the job's leftovers in /dev/shm there, Note [Segment
        lifetime] in csrc/transport/shm/segment.h, and ends), and on this
        machine they are removed here. (A failure excludes its whole host,
        so a remote host always ends up here; this machine may keep workers
        of other slot groups: see before_round.)"""
        if worker.remote is None and not worker.ending.ok and not worker.leaving:
            self._failed_here = True
        if worker.remote is not None:
            if not any(w.alive() for w in self._workers if w.remote is worker.remote):
                worker.remote.close()
                if self._connections.get(worker.host) is worker.remote:
                    del self._connections[worker.host]
        elif not any(w.alive() for w in self._workers if w.remote is None):
            remove_shared_memory(self._job_id)
            self._failed_here = False

    def before_round(self, number):
        """If a worker on this machine failed since the last round (it may
        have died while its process set mapped a segment), removes the job's
        segments here of every earlier round: nobody can be making round
        `number`'s yet, and the failure dooms the round it was in."""
        if self._failed_here:
            remove_shared_memory(self._job_id, keep_round=number)
            self._failed_here = False

    def can_give_up(self, worker):
        return worker.remote is not None

    def give_up(self, workers, reason):
        for connection in {worker.remote for worker in workers}:
            connection.give_up(reason)

    def _remote_hosts(self):
        return list({w.remote for w in self._workers if w.remote is not None})


def _ending(worker):
    process = worker.process
    if process.returncode == 0:
        return process.exit_ending()
    process.output.join_stderr(STDERR_DRAIN_S)
    return process.exit_ending(details=stderr_pointer(worker.name, process.output))


def host_identity(host):
    """What HVDLITE_HOSTNAME/HOROVOD_HOSTNAME say on a worker of `host`: the
    name discovery gave, as in Horovod, `localhost` and `127.0.0.1` included.
    Two names are two hosts to the core (their own local ranks, no shared
    memory between them) even when both mean this machine: a discovery
    script that lists `localhost:2` and `127.0.0.1:2` asks for two hosts, and
    Horovod's elastic tests count on it."""
    return host
