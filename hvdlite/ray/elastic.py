"""RayExecutor's elastic mode (min_workers/max_workers): Ray actors are a
worker source (hvdlite/runner/elastic/source.py) for the elastic driver
that hvdliterun uses, with the same rounds, failure rules and limits
(Note [Failure rules] in hvdlite/runner/elastic/failures.py).

A Ray node is a host: its slots are how many worker-sized shares of its
CPUs (and GPUs) it has, in the order ray.nodes() lists the live ones; a
failed worker (an actor that died or raised) excludes its node. Each
worker is an actor whose run() call is the user's function; the workers,
inside hvd.elastic.run, restore their last commit and re-form the job at
the new size by themselves (hvdlite/common/membership.py).
"""
import logging

import ray
from ray.exceptions import RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hvdlite.common import logs
from hvdlite.ray.placement import host_identity
from hvdlite.ray.results import describe, ending_of, next_finished
from hvdlite.ray.worker import LeftTheJob, stop_actors
from hvdlite.runner.cluster import WorkerError
from hvdlite.runner.elastic.driver import ElasticDriver
from hvdlite.runner.elastic.settings import ElasticSettings
from hvdlite.runner.elastic.source import Ending, Worker, WorkerSource, worker_environment

# How RayExecutor's arguments are spelled in the driver's messages.
SPELLING = {"min_np": "min_workers={}", "max_np": "max_workers={}",
            "reset_limit": "reset_limit={}", "elastic_timeout": "elastic_timeout={:g} s",
            "start_wait": "elastic_timeout={:g} s"}


class RayWorker(Worker):
    def __init__(self, number, node_id, ip, slot, actor):
        super().__init__(str(number), number, node_id, slot, host_identity((node_id, ip)))
        self.ip = ip
        self.actor = actor
        self.ref = None  # its run() call
        self.result = None
        self.error = None  # the RayError it ended with
        self.reason = None  # that error, in words

    def where(self):
        return f"Ray node {self.ip} ({self.host[:12]})"


class RayActorSource(WorkerSource):
    host_kind = "Ray node"

    def __init__(self, executor, executable, call, callbacks):
        self._executor = executor
        self._executable = executable  # (cls, args, kwargs) for every new worker
        self._call = call  # (fn, args, kwargs)
        self._callbacks = callbacks or ()
        self._ips = {}  # node id -> IP, from the last look at the nodes
        self._workers = []

    def find_hosts(self):
        """{node id: worker-sized shares of its resources} over Ray's live nodes."""
        needed = self._worker_resources()
        hosts = {}
        for node in ray.nodes():
            if not node["Alive"]:
                continue
            resources = node["Resources"]
            slots = min(int(resources.get(name, 0) // amount) for name, amount in needed.items())
            if slots > 0:
                hosts[node["NodeID"]] = slots
                self._ips[node["NodeID"]] = node["NodeManagerAddress"]
        return hosts

    def host_name(self, host):
        return f"{self._ips.get(host, '?')} ({host[:12]})"

    def workers(self):
        return self._workers

    def start(self, host, slot, first_round):
        executor = self._executor
        actor = executor.new_actor(NodeAffinitySchedulingStrategy(host, soft=False))
        worker = RayWorker(len(self._workers), host, self._ips[host], slot, actor)
        cls, args, kwargs = self._executable
        actor.start_executable.remote(cls, args, kwargs)
        layout = worker_environment(worker.id, first_round, executor.elastic_timeout)
        env = executor._environments([(worker.id, host)], [(host, worker.ip, [])],
                                     layouts={worker.id: layout})[worker.id]
        # An actor runs its calls in the order they were made: its
        # environment is set before the function starts.
        actor.update_env_vars.remote(env)
        if executor.nics:  # the address of that interface on the worker's node
            actor.listen_on.remote(executor.nics)
        fn, fn_args, fn_kwargs = self._call
        worker.ref = actor.run.remote(fn, fn_args, fn_kwargs)
        self._workers.append(worker)
        return worker

    def next_event(self, timeout):
        finished = next_finished(self._workers, timeout)
        if finished is None:
            return None
        worker, result, error = finished
        if error is not None:
            worker.error, worker.reason = error, describe(error)
            worker.ending = ending_of(error)
            return "exit", worker
        if isinstance(result, LeftTheJob):
            worker.ending = Ending(True, "left the job")
            return "exit", worker
        worker.result = result
        worker.ending = Ending(True, "returned")
        for callback in self._callbacks:
            callback(result)
        return "exit", worker

    def stop(self, workers, signum=None):
        for worker in workers:
            ray.kill(worker.actor, no_restart=True)

    def kill_all(self):
        self.stop(self._workers)

    def ended(self, worker):
        """An actor that failed or left holds its share of the node (and may
        still run): it goes. Those that returned stay until shutdown()."""
        if worker.ending.what != "returned":
            ray.kill(worker.actor, no_restart=True)

    def _worker_resources(self):
        executor = self._executor
        needed = {"CPU": executor.cpus_per_worker}
        if executor.gpus_per_worker:
            needed["GPU"] = executor.gpus_per_worker
        return needed


class ElasticRayJob:
    """The elastic run() of one RayExecutor."""

    def __init__(self, executor, executable):
        self._executor = executor
        self._executable = executable
        self._workers = []  # every worker of every run(), for stop()
        self._failed = False

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        executor = self._executor
        source = RayActorSource(executor, self._executable, (fn, args, kwargs), callbacks)
        settings = ElasticSettings(
            min_np=executor.min_workers, max_np=executor.max_workers,
            reset_limit=executor.reset_limit, elastic_timeout=executor.elastic_timeout,
            cooldown_range=executor.cooldown_range, spelling=dict(SPELLING))
        driver = ElasticDriver(settings, source, executor._store.client,
                               executor._store.job_id, _report)
        try:
            outcome = driver.run()
        finally:
            self._workers += source.workers()
            source.kill_all()
        self._failed = outcome.exit_code != 0 or len(source.workers()) != len(outcome.final)
        if outcome.failure is not None:
            worker = outcome.failure
            cause = worker.error.cause if isinstance(worker.error, RayTaskError) else worker.error
            raise WorkerError(worker.rank, worker.where(), worker.ending.what) from cause
        if outcome.stop_reason is not None:
            error = RuntimeError if outcome.formed else TimeoutError
            raise error(f"RayExecutor: {outcome.stop_reason}")
        return [worker.result for worker in outcome.final]

    def stop(self):
        stop_actors([w.actor for w in self._workers], [w.host for w in self._workers],
                    self._executor._store.job_id, self._failed)
        self._workers = []


def _report(text, level=logging.WARNING):
    logs.get("ray").log(level, f"RayExecutor: {text}")
