"""The worker processes of an elastic job: one per slot of a host, started
when a round first needs that slot, each with a fixed number that prefixes
its output (its rank changes from round to round; the number does not).

Workers on this machine are started directly; those on another host through
one ssh connection and agent per host (remote.RemoteHost, agent.py), the
same machinery as a static job's, kept open while the host has workers, so
that a worker that joins a later round starts over it too.
"""
import os
import shlex
import signal
import socket

from hvdlite.runner.cleanup import remove_shared_memory
from hvdlite.runner.hosts import is_local
from hvdlite.runner.job import start_local_process
from hvdlite.runner.processes import LaunchError, signal_group
from hvdlite.runner.remote import RemoteHost, forwarded_environment, reachable_address


class Worker:
    """One worker process on (host, slot)."""

    def __init__(self, number, host, slot):
        self.number = number
        self.host = host
        self.slot = slot
        self.process = None  # processes.Rank
        self.remote = None  # the RemoteHost it runs through; None on this machine
        self.leaving = False  # not in the newest round: its exit is no failure
        self.given_up = False  # its host stopped answering (WorkerPool.give_up)

    @property
    def id(self):
        # Unique for the job's lifetime: a slot that is filled again later
        # gets a new number.
        return f"{self.host}/{self.slot}/{self.number}"

    def alive(self):
        return self.process.process.poll() is None

    def describe(self):
        return f"worker {self.number} (host {self.host}, pid {self.process.pid})"


class WorkerPool:
    """Starts workers, finds them again by their process, and cleans a host
    up once its last worker has ended.

    remote_options: remote.RemoteOptions for hosts other than this machine,
    or None when the job cannot have any; `no_remote_reason` then says why."""

    def __init__(self, command, environment, console, events, output_directory=None,
                 verbose=False, remote_options=None, no_remote_reason=None):
        self._command = command
        self._environment = environment
        self._console = console
        self._events = events
        self._output_directory = output_directory
        self._verbose = verbose
        self._remote_options = remote_options
        self._no_remote_reason = no_remote_reason
        self._connections = {}  # host -> RemoteHost, while it has workers
        self._failed_here = False  # a worker on this machine failed since the last round
        self._reachable_address = None  # of this machine, from other hosts
        self._job_id = environment.get("HVDLITE_JOB_ID")
        self.workers = []

    def start(self, host, slot, first_round):
        """Starts a worker for (host, slot) that will join `first_round` (or a
        later one). Raises LaunchError when it cannot be started at all."""
        worker = Worker(len(self.workers), host, slot)
        env = {"HVDLITE_ELASTIC": "1", "HVDLITE_ELASTIC_WORKER_ID": worker.id,
               "HVDLITE_ELASTIC_FIRST_ROUND": str(first_round)}
        if is_local(host):
            worker.process = self._start_here(worker, env)
        else:
            worker.remote, worker.process = self._start_remote(worker, env)
        self.workers.append(worker)
        return worker

    def bind_addresses(self, workers):
        """{worker id: address} for the workers on this machine, when some of
        `workers` (a round) run on other hosts: those must reach them."""
        remote = list({w.remote for w in workers if w.remote is not None})
        if not remote:
            return {}
        # Found once (the first time, waiting for an agent to connect), so
        # that a slow new host does not hold up every later round.
        address = self._reachable_address or reachable_address(remote, self._remote_options)
        if any(connection.store_addr for connection in remote):
            self._reachable_address = address
        return {w.id: address for w in workers if w.remote is None}

    def of_process(self, rank):
        return next(w for w in self.workers if w.process is rank)

    def alive(self):
        return [w for w in self.workers if w.alive()]

    def signal(self, workers, signum):
        for worker in workers:
            if worker.remote is None:
                signal_group(worker.process.pid, signum)
            else:
                worker.remote.signal(signum, rank=worker.number)

    def ended(self, worker):
        """Called once per worker exit. When it was the last worker of its
        host, the host is cleaned up: the agent of a remote host is told that
        no worker follows (it then removes the job's leftovers in /dev/shm
        there, Note [Segment lifetime] in csrc/transport/shm/segment.h, and
        ends), and on this machine the driver removes them itself. (A failure
        excludes its whole host, so a remote host always ends up here; this
        machine may keep workers of other slot groups: see
        remove_stale_segments.)"""
        if worker.remote is None and worker.process.returncode != 0 and not worker.leaving:
            self._failed_here = True
        if worker.remote is not None:
            if not any(w.alive() for w in self.workers if w.remote is worker.remote):
                worker.remote.close()
                if self._connections.get(worker.host) is worker.remote:
                    del self._connections[worker.host]
        elif not any(w.alive() for w in self.workers if w.remote is None):
            remove_shared_memory(self._job_id)
            self._failed_here = False

    def remove_stale_segments(self, new_round):
        """Called before `new_round` is published. If a worker on this
        machine failed since the last round (it may have died while its
        process set mapped a segment), removes the job's segments here of
        every earlier round: nobody can be making new_round's yet, and the
        failure dooms the round it was in."""
        if self._failed_here:
            remove_shared_memory(self._job_id, keep_round=new_round)
            self._failed_here = False

    def give_up(self, workers, reason):
        """`workers` (all of a remote host's) are lost though their ssh
        connection looks open (Note [Silent hosts] in driver.py): cuts it and
        reports each exit now, with `reason`."""
        for worker in workers:
            worker.given_up = True
        for connection in {worker.remote for worker in workers}:
            connection.give_up(reason)

    def kill_all(self):
        for worker in self.workers:
            if worker.remote is None:
                signal_group(worker.process.pid, signal.SIGKILL)
        for connection in self._remote_hosts():
            connection.signal(signal.SIGKILL)

    def wait_all(self, output_timeout_s=5.0):
        for connection in self._remote_hosts():
            connection.close()
            connection.wait(output_timeout_s + 10)
        for worker in self.workers:
            worker.process.process.wait()
        for worker in self.workers:
            worker.process.output.join(output_timeout_s)

    def _remote_hosts(self):
        return list({w.remote for w in self.workers if w.remote is not None})

    def _start_here(self, worker, env):
        full_env = dict(self._environment)
        full_env.update(env)
        try:
            return start_local_process(worker.number, worker.host, self._command, full_env,
                                       self._console, self._events, self._output_directory,
                                       self._verbose, kind="worker")
        except OSError as error:
            raise LaunchError(f"cannot start a worker on {worker.host}: "
                              f"{shlex.join(self._command)}: {error.strerror or error}. "
                              f"Check the command and your PATH.", exit_code=127) from error

    def _start_remote(self, worker, env):
        """(RemoteHost, processes.Rank): over the host's open connection, or
        a new one when it has none (or its connection ended)."""
        host = worker.host
        if self._remote_options is None:
            raise LaunchError(f"discovery reported host {host!r}, but {self._no_remote_reason}",
                              exit_code=2)
        layout = {"rank": worker.number, "env": env}
        connection = self._connections.get(host)
        if connection is not None and not connection.ended():
            return connection, connection.add_rank(layout)
        connection = RemoteHost(host, self._command, forwarded_environment(self._environment),
                                self._remote_options, self._console, self._events,
                                self._output_directory, self._verbose, more_ranks=True)
        try:
            connection.start(os.getcwd(), [layout])
        except OSError as error:
            raise LaunchError(f"cannot run ssh to reach host {host}: {error.strerror or error}; "
                              f"install an ssh client (e.g. openssh-client)",
                              exit_code=127) from error
        self._connections[host] = connection
        return connection, connection.ranks[worker.number]


def host_identity(host):
    """What HVDLITE_HOSTNAME/HOROVOD_HOSTNAME say on a worker of `host`: this
    machine's name for localhost (as for the ranks of a plain job), the
    loopback address for a slot group such as 127.0.0.2, the name discovery
    gave for another host."""
    return socket.gethostname() if host in ("localhost", "127.0.0.1", "::1") else host
