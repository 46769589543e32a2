"""RayExecutor's elastic mode (min_workers/max_workers): the job runs on
between min and max workers while Ray nodes come and go.

The driver here plays hvdliterun's elastic driver with Ray as the host
discovery and the process manager: every second it lists Ray's live nodes
(slots = a node's CPUs, and GPUs, over what a worker needs) and watches the
workers' run() calls. A worker that died (actor failure, node removed) or a
new node with free slots makes it publish a new round (Note [Elastic rounds]
in hvdlite/store/rounds.py); the workers, inside hvd.elastic.run, restore
their last commit and re-form the job at the new size by themselves
(hvdlite/common/membership.py).
"""
import time

import ray
from ray.exceptions import RayActorError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hvdlite.common import defaults
from hvdlite.runner.cluster import ElasticRounds, WorkerError
from hvdlite.ray.placement import host_identity
from hvdlite.ray.results import describe
from hvdlite.ray.worker import stop_actors

DISCOVERY_INTERVAL_S = defaults.DISCOVERY_INTERVAL_S


class _Worker:
    def __init__(self, number, actor, node_id, ip):
        self.id = str(number)
        self.actor, self.node_id, self.ip = actor, node_id, ip
        self.ref = None  # its run() call
        self.result = None
        self.done = False

    @property
    def where(self):
        return f"Ray node {self.ip} ({self.node_id[:12]})"


class ElasticRayJob:
    def __init__(self, executor, executable):
        self._executor = executor
        self._executable = executable  # (cls, args, kwargs) for every new worker
        self._rounds = ElasticRounds(executor._store)
        self._workers = []  # every worker started, live or not
        self._order = []  # the newest round's workers, in rank order
        self._resets = 0
        self._call = None

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        self._call = (fn, args, kwargs)
        self._form_first_round()
        next_discovery = time.monotonic() + DISCOVERY_INTERVAL_S
        while True:
            finished = self._watch(callbacks)
            if finished:
                return [worker.result for worker in self._order]
            if time.monotonic() >= next_discovery:
                next_discovery = time.monotonic() + DISCOVERY_INTERVAL_S
                self._grow_if_possible()

    def stop(self):
        # Any worker not in the final round failed or was lost.
        failed = len(self._workers) != len(self._order) or not all(w.done for w in self._order)
        stop_actors([w.actor for w in self._workers], [w.node_id for w in self._workers],
                    self._executor._store.job_id, failed)
        self._workers, self._order = [], []

    # --- rounds ---------------------------------------------------------

    def _form_first_round(self):
        executor = self._executor
        deadline = time.monotonic() + executor.elastic_timeout
        while True:
            slots = self._free_slots()
            if sum(count for _, count in slots.values()) >= executor.min_workers:
                break
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"RayExecutor: the Ray cluster has room for {sum(c for _, c in slots.values())} "
                    f"worker(s) of {self._worker_resources()}, fewer than min_workers="
                    f"{executor.min_workers}, after waiting elastic_timeout="
                    f"{executor.elastic_timeout} s")
            time.sleep(DISCOVERY_INTERVAL_S)
        self._publish(self._start_workers(slots, executor.max_workers))

    def _publish(self, new_workers):
        """A round of the live workers (in their order) and then `new_workers`,
        whose run() starts once they know its number."""
        self._order = [w for w in self._order if not w.done and w.ref is not None] + new_workers
        number = self._rounds.publish([(w.id, host_identity((w.node_id, w.ip)))
                                       for w in self._order])
        fn, args, kwargs = self._call
        for worker in new_workers:
            env = self._executor._environments(
                [(worker.id, worker.node_id)], [(worker.node_id, worker.ip, [])],
                layouts={worker.id: self._rounds.worker_environment(
                    worker.id, number, self._executor.elastic_timeout)})[worker.id]
            worker.actor.update_env_vars.remote(env)
            worker.ref = worker.actor.run.remote(fn, args, kwargs)

    def _check_reset_limit(self, reason):
        limit = self._executor.reset_limit
        if limit is not None and self._resets >= limit:
            raise RuntimeError(f"RayExecutor: the elastic job needs to re-form ({reason}), "
                               f"but it has been reset {self._resets} time(s), the "
                               f"reset_limit; stopping")

    def _reform(self, reason):
        self._check_reset_limit(reason)
        live = [w for w in self._order if not w.done]
        if len(live) < self._executor.min_workers:
            self._wait_for_slots(live, reason)
            return
        self._resets += 1
        self._publish([])

    def _wait_for_slots(self, live, reason):
        """Fewer live workers than min_workers: start new ones as nodes allow,
        for up to elastic_timeout."""
        executor = self._executor
        deadline = time.monotonic() + executor.elastic_timeout
        while time.monotonic() < deadline:
            wanted = (executor.max_workers or executor.min_workers) - len(live)
            new = self._start_workers(self._free_slots(), wanted)
            if len(live) + len(new) >= executor.min_workers:
                self._resets += 1
                self._publish(new)
                return
            for worker in new:
                ray.kill(worker.actor)
                self._workers.remove(worker)
            time.sleep(DISCOVERY_INTERVAL_S)
        raise RuntimeError(f"RayExecutor: {reason}; only {len(live)} worker(s) are left, "
                           f"fewer than min_workers={executor.min_workers}, and the Ray "
                           f"cluster had no room for more within elastic_timeout="
                           f"{executor.elastic_timeout} s")

    def _grow_if_possible(self):
        executor = self._executor
        if any(w.done for w in self._order):
            return  # training is over: no more rounds
        room = (executor.max_workers or float("inf")) - len(self._order)
        if room <= 0:
            return
        slots = self._free_slots()
        if not slots:
            return
        self._check_reset_limit(f"Ray nodes with free slots: {len(slots)}")
        new = self._start_workers(slots, room)
        if new:
            self._resets += 1
            self._publish(new)

    # --- watching the workers -------------------------------------------

    def _watch(self, callbacks):
        """Waits up to a second for worker results; True when every worker
        of the newest round has returned."""
        running = {w.ref: w for w in self._order if not w.done}
        if not running:
            return True
        ready, _ = ray.wait(list(running), num_returns=len(running),
                            timeout=DISCOVERY_INTERVAL_S)
        lost = []
        for ref in ready:
            worker = running[ref]
            try:
                worker.result = ray.get(ref)
            except RayActorError:
                lost.append(worker)
                continue
            except RayError as error:
                raise WorkerError(self._order.index(worker), worker.where,
                                  describe(error)) from getattr(error, "cause", error)
            worker.done = True
            for callback in callbacks or ():
                callback(worker.result)
        if lost:
            if any(w.done for w in self._order):
                worker = lost[0]
                raise WorkerError(self._order.index(worker), worker.where,
                                  "its Ray actor died after another worker had finished "
                                  "training; every rank must run the same number of steps")
            for worker in lost:
                self._order.remove(worker)
            self._reform(f"worker(s) {', '.join(w.where for w in lost)} died")
        elif self._rounds.reset_requested() and not any(w.done for w in self._order):
            self._reform("a worker lost its peers and asked for a new round")
        return all(w.done for w in self._order)

    # --- placement ------------------------------------------------------

    def _free_slots(self):
        """{node id: (IP, free slots)} over Ray's live nodes: what a node's
        resources hold of worker-sized shares, less this job's live workers."""
        needed = self._worker_resources()
        mine = {}
        for worker in self._order:
            mine[worker.node_id] = mine.get(worker.node_id, 0) + 1
        slots = {}
        for node in ray.nodes():
            if not node["Alive"]:
                continue
            resources = node["Resources"]
            fits = min(int(resources.get(name, 0) // amount) for name, amount in needed.items())
            free = fits - mine.get(node["NodeID"], 0)
            if free > 0:
                slots[node["NodeID"]] = (node["NodeManagerAddress"], free)
        return slots

    def _worker_resources(self):
        executor = self._executor
        needed = {"CPU": executor.cpus_per_worker}
        if executor.gpus_per_worker:
            needed["GPU"] = executor.gpus_per_worker
        return needed

    def _start_workers(self, slots, count):
        """Up to `count` new workers in the free slots, node by node."""
        started = []
        for node_id, (ip, free) in slots.items():
            for _ in range(free):
                if len(started) >= count:
                    return started
                actor = self._executor.new_actor(NodeAffinitySchedulingStrategy(node_id,
                                                                                soft=False))
                cls, args, kwargs = self._executable
                actor.start_executable.remote(cls, args, kwargs)
                worker = _Worker(len(self._workers), actor, node_id, ip)
                self._workers.append(worker)
                started.append(worker)
        if self._executor.nics:  # the address of that interface on each worker's node
            for worker, node in zip(started, ray.get(
                    [w.actor.node.remote(self._executor.nics) for w in started])):
                worker.ip = node[1]
        return started
