"""The worker processes of an elastic job: one per slot of a host, started
when a round first needs that slot, each with a fixed number that prefixes
its output (its rank changes from round to round; the number does not)."""
import shlex
import signal
import socket

from hvdlite.runner.hosts import is_local
from hvdlite.runner.job import start_local_process
from hvdlite.runner.processes import LaunchError, signal_group


class Worker:
    """One worker process on (host, slot)."""

    def __init__(self, number, host, slot, process):
        self.number = number
        self.host = host
        self.slot = slot
        self.process = process  # processes.Rank
        self.leaving = False  # not in the newest round: its exit is no failure

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
    """Starts workers and finds them again by their process."""

    def __init__(self, command, environment, console, events, output_directory=None,
                 verbose=False):
        self._command = command
        self._environment = environment
        self._console = console
        self._events = events
        self._output_directory = output_directory
        self._verbose = verbose
        self.workers = []

    def start(self, host, slot, first_round):
        """Starts a worker for (host, slot) that will join `first_round` (or a
        later one). Only hosts of this machine are supported (see the README)."""
        if not is_local(host):
            raise LaunchError(f"discovery reported host {host!r}, but elastic jobs start "
                              f"workers on this machine only (localhost, or loopback "
                              f"addresses like 127.0.0.2 as separate slot groups)",
                              exit_code=2)
        number = len(self.workers)
        worker = Worker(number, host, slot, None)
        env = dict(self._environment)
        env.update({
            "HVDLITE_ELASTIC": "1",
            "HVDLITE_ELASTIC_WORKER_ID": worker.id,
            "HVDLITE_ELASTIC_FIRST_ROUND": str(first_round),
        })
        try:
            worker.process = start_local_process(number, host, self._command, env,
                                                 self._console, self._events,
                                                 self._output_directory, self._verbose,
                                                 kind="worker")
        except OSError as error:
            raise LaunchError(f"cannot start a worker on {host}: {shlex.join(self._command)}: "
                              f"{error.strerror or error}. Check the command and your PATH.",
                              exit_code=127) from error
        self.workers.append(worker)
        return worker

    def of_process(self, rank):
        return next(w for w in self.workers if w.process is rank)

    def alive(self):
        return [w for w in self.workers if w.alive()]

    def signal(self, workers, signum):
        for worker in workers:
            signal_group(worker.process.pid, signum)

    def kill_all(self):
        self.signal(self.workers, signal.SIGKILL)

    def wait_all(self, output_timeout_s=5.0):
        for worker in self.workers:
            worker.process.process.wait()
        for worker in self.workers:
            worker.process.output.join(output_timeout_s)


def host_identity(host):
    """What HVDLITE_HOSTNAME/HOROVOD_HOSTNAME say on a worker of `host`: this
    machine's name for localhost (as for the ranks of a plain job), the
    loopback address for a slot group such as 127.0.0.2."""
    return socket.gethostname() if host in ("localhost", "127.0.0.1", "::1") else host
