"""What the elastic driver (driver.py) needs from wherever its workers run:
the worker-source interface.

    hvdliterun       processes on this machine or over ssh   elastic/process_source.py
    RayExecutor      Ray actors                               hvdlite/ray/elastic.py
    hvdlite.spark    Spark tasks                              hvdlite/spark/elastic.py

A source says which hosts have slots, starts a worker in a slot, reports
how each worker ended, and stops workers. The driver decides everything
else the same way for all three: when a round is published and with whom,
what a failure excludes, when the job gives up. The workers' side is the
same too (hvdlite/common/membership.py reads the rounds from the store).

Every method is called from the driver's thread.
"""
import abc
import signal

from hvdlite.runner.failure_rule import Ending  # noqa: F401 (how a worker ended)


class Worker:
    """One worker, as the driver sees it. Sources subclass it to keep their
    own handle (a process, an actor, a task) on it."""

    def __init__(self, id, name, host, slot, identity):
        self.id = id  # unique for the job's lifetime: HVDLITE_ELASTIC_WORKER_ID
        self.name = name  # how messages and output prefixes call it
        self.host = host  # what a failure excludes: a host, a Ray node, a Spark executor
        self.slot = slot  # its slot there: it stays while the host has that many
        self.identity = identity  # HVDLITE_HOSTNAME: workers with one identity share memory
        self.ending = None  # an Ending, once the source saw it end
        self.leaving = False  # not in the newest round: its end is no failure
        self.given_up = False  # its host stopped answering (WorkerSource.give_up)
        self.rank = None  # its rank in the newest round it was part of

    def alive(self):
        return self.ending is None

    def where(self):
        """Where it runs, for messages: "host h, pid 42"."""
        return f"host {self.host}"

    def describe(self):
        return f"worker {self.name} ({self.where()})"


def worker_environment(worker_id, first_round, elastic_timeout=None):
    """The variables that make a process an elastic worker: init() then
    joins the rounds the driver publishes (hvdlite/common/membership.py)."""
    env = {"HVDLITE_ELASTIC": "1", "HVDLITE_ELASTIC_WORKER_ID": worker_id,
           "HVDLITE_ELASTIC_FIRST_ROUND": str(first_round)}
    if elastic_timeout is not None:
        env["HVDLITE_ELASTIC_TIMEOUT"] = f"{elastic_timeout:g}"
    return env


class WorkerSource(abc.ABC):
    # How messages name the unit a failure excludes.
    host_kind = "host"
    # Once --min-np slots are there, how long the first round waits for the
    # rest of -np (Spark's tasks register one by one; hosts are known at once).
    first_round_settle_s = 0.0

    @abc.abstractmethod
    def find_hosts(self):
        """{host: slots} this job may use now, in the order to fill them
        (slots its own workers hold included). Raises DiscoveryError when
        the answer is unknown (the driver keeps the last one)."""

    @abc.abstractmethod
    def start(self, host, slot, first_round):
        """Starts a Worker in (host, slot) that joins round `first_round` (or
        a later one); raises processes.LaunchError if it cannot start at all."""

    @abc.abstractmethod
    def workers(self):
        """Every Worker started so far."""

    @abc.abstractmethod
    def next_event(self, timeout):
        """("exit", worker) once for each worker that ended (its `ending` set
        first), ("signal", signum) when the launcher was signalled, or None
        after `timeout` seconds without either."""

    @abc.abstractmethod
    def stop(self, workers, signum=signal.SIGTERM):
        """Asks `workers` to stop (a signal, a cancelled call or task)."""

    @abc.abstractmethod
    def kill_all(self):
        """Stops every worker at once, whatever it is doing."""

    def busy(self):
        """True while anything of the job runs that is not a started worker
        (Spark's tasks still waiting to be admitted)."""
        return False

    def bind_addresses(self, workers):
        """{worker id: address} to listen on in a round of `workers`, for
        workers whose address depends on the round."""
        return {}

    def host_name(self, host):
        """`host` as messages show it."""
        return str(host)

    def before_round(self, number):
        """Called before round `number` is published."""

    def ended(self, worker):
        """Called once the driver has handled `worker`'s end."""

    def training_over(self):
        """A worker of the newest round finished: no more rounds will come.
        The driver has already told the workers through the store (Note
        [Training over] in driver.py): workers waiting for a round leave on
        their own, whatever the source; a source adds what is its own
        (Spark stops admitting tasks)."""

    def can_give_up(self, worker):
        """True when `worker` may be silent though alive: it runs on another
        host, over a connection that a cut link does not close."""
        return False

    def give_up(self, workers, reason):
        """`workers` are lost though they look alive (Note [Silent hosts] in
        driver.py): report each one's end now, with `reason`. Only sources
        whose workers can be silent (ssh hosts) need it."""
        raise NotImplementedError(f"{type(self).__name__} cannot give up workers")
