"""RayExecutor: an hvdlite job whose ranks are Ray actors (Horovod's
horovod.ray API). Ray places and starts the workers; the driver (this
process) runs the job's rendezvous store and gives each actor the
environment of its rank, computed from where Ray placed it:

    ranks         workers grouped by Ray node, nodes in bundle order
    local ranks   the workers of one node (HVDLITE_HOSTNAME = the node)
    cross ranks   the nodes that have a given local rank

With min_workers/max_workers the job is elastic (elastic.py).
"""
import types

import ray
from ray.exceptions import GetTimeoutError
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from hvdlite.common import defaults
from hvdlite.runner.cluster import ClusterStore, WorkerError, group_by_host, \
    rank_environments
from hvdlite.ray.elastic import ElasticRayJob
from hvdlite.ray.placement import host_identity, visible_devices
from hvdlite.ray.results import gather
from hvdlite.ray.worker import BaseHvdliteWorker, stop_actors


class RayExecutor:
    """Runs functions on hvdlite ranks placed by Ray (Horovod's horovod.ray.RayExecutor).

    Give either `num_workers` (packed onto as few nodes as Ray can), or `num_hosts` and
    `num_workers_per_host` (one bundle per node, strictly spread), or `min_workers` /
    `max_workers` for an elastic job, in which a failed worker excludes its Ray node.

    Args:
        settings: from `create_settings()` (default: its defaults).
        num_workers (int | None): ranks, packed.
        num_hosts (int | None): nodes, with `num_workers_per_host` ranks each.
        num_workers_per_host (int): ranks per node with `num_hosts`.
        cpus_per_worker (int): CPUs Ray reserves for each rank.
        use_gpu (bool): reserve GPUs (`gpus_per_worker`, default 1).
        gpus_per_worker (int | None): GPUs per rank with `use_gpu`.
        min_workers (int | None): elastic: the fewest ranks to train with.
        max_workers (int | None): elastic: the most ranks.
        reset_limit (int | None): elastic: as hvdliterun's --reset-limit.
        elastic_timeout (float): elastic: as hvdliterun's --elastic-timeout.
        override_discovery (bool): accepted for Horovod compatibility.
        cooldown_range (tuple | None): elastic: as hvdliterun's --blacklist-cooldown-range.

    Raises:
        ValueError: neither or both of `num_workers` and `num_hosts` in a static job.

    Example:
        ```python
        executor = RayExecutor(RayExecutor.create_settings(timeout_s=30), num_workers=4)
        executor.start()
        results = executor.run(train, args=[config])   # in rank order
        executor.shutdown()
        ```
    """

    @staticmethod
    def create_settings(timeout_s=defaults.START_TIMEOUT_S, ssh_identity_file=None, ssh_str=None,
                        placement_group_timeout_s=100, nics=None):
        """Horovod's settings for a RayExecutor.

        Args:
            timeout_s (float): how long the ranks may take to start and meet.
            ssh_identity_file (str | None): accepted and unused (Ray starts the workers).
            ssh_str (str | None): accepted and unused.
            placement_group_timeout_s (float): how long to wait for Ray's placement group.
            nics (Iterable[str] | None): the interface whose address ranks listen on.

        Returns:
            types.SimpleNamespace: the settings, for `RayExecutor(settings=...)`.
        """
        return types.SimpleNamespace(timeout_s=timeout_s, ssh_identity_file=ssh_identity_file,
                                     ssh_str=ssh_str, nics=nics,
                                     placement_group_timeout_s=placement_group_timeout_s)

    def __init__(self, settings=None, num_workers=None, num_hosts=None, num_workers_per_host=1,
                 cpus_per_worker=1, use_gpu=False, gpus_per_worker=None, min_workers=None,
                 max_workers=None, reset_limit=None, elastic_timeout=defaults.ELASTIC_TIMEOUT_S,
                 override_discovery=True, cooldown_range=None):
        self.settings = settings or self.create_settings()
        self.elastic = min_workers is not None or max_workers is not None
        if not self.elastic and (num_workers is None) == (num_hosts is None):
            raise ValueError("RayExecutor needs exactly one of num_workers or num_hosts "
                             "(with num_workers_per_host), or min_workers/max_workers for "
                             "an elastic job")
        if use_gpu and gpus_per_worker is None:
            gpus_per_worker = 1
        self.num_workers = num_workers if num_hosts is None else num_hosts * num_workers_per_host
        self.num_hosts = num_hosts
        self.num_workers_per_host = num_workers_per_host
        self.cpus_per_worker = cpus_per_worker
        self.use_gpu = use_gpu
        self.gpus_per_worker = gpus_per_worker if use_gpu else 0
        self.min_workers = min_workers or 1
        self.max_workers = max_workers
        self.reset_limit = reset_limit
        self.elastic_timeout = elastic_timeout
        self.cooldown_range = cooldown_range
        self.override_discovery = override_discovery
        self.workers = []  # actor handles, in rank order
        self._hosts = []  # (node id, node IP) of each worker, in rank order
        self._store = None
        self._placement_group = None
        self._elastic = None
        self._extra_env = {}
        self._failed = False  # a rank failed: shutdown() looks for leftovers
        nics = self.settings.nics
        self.nics = nics.split(",") if isinstance(nics, str) else nics

    # --- the job --------------------------------------------------------

    def start(self, executable_cls=None, executable_args=None, executable_kwargs=None,
              extra_env_vars=None):
        """Places and starts the workers, and creates `executable_cls(*args,
        **kwargs)` on each (see execute()). Elastic jobs start their workers
        in run(). Starts Ray (`ray.init()`) if it is not running.

        Args:
            executable_cls (type | None): a class instantiated on every worker, for `execute()`.
            executable_args (list | None): its positional arguments.
            executable_kwargs (dict | None): its keyword arguments.
            extra_env_vars (dict | None): environment variables set on every worker.
        """
        if not ray.is_initialized():
            ray.init()
        self._extra_env = dict(extra_env_vars or {})
        self._store = ClusterStore(ray.util.get_node_ip_address(),
                                   start_timeout=self.settings.timeout_s,
                                   single_host=not self.elastic and on_this_node_only())
        try:
            if self.elastic:
                self._elastic = ElasticRayJob(self, (executable_cls, executable_args,
                                                     executable_kwargs))
                return
            self._start_static(executable_cls, executable_args, executable_kwargs)
        except BaseException:
            self.shutdown()
            raise

    def run(self, fn, args=None, kwargs=None, callbacks=None):
        """Runs `fn(*args, **kwargs)` on every rank.

        Args:
            fn (Callable): the training function; it calls `hvd.init()`.
            args (list | None): positional arguments.
            kwargs (dict | None): keyword arguments.
            callbacks (list[Callable] | None): called with each result as it arrives (Horovod's
                hook for reporting).

        Returns:
            list: the ranks' results in rank order (elastic: those of the final round).

        Raises:
            WorkerError: a rank raised: its exception, naming the rank and its node.
            ValueError: `start()` was not called.
        """
        self._check_started()
        if self._elastic is not None:
            return self._elastic.run(fn, args, kwargs, callbacks)
        return self._gather(self.run_remote(fn, args, kwargs), callbacks)

    def run_remote(self, fn, args=None, kwargs=None):
        """Starts fn on every rank without waiting (static jobs).

        Args:
            fn (Callable): the training function; it calls `hvd.init()`.
            args (list | None): positional arguments.
            kwargs (dict | None): keyword arguments.

        Returns:
            list[ray.ObjectRef]: the ranks' object refs, in rank order.

        Raises:
            ValueError: `start()` was not called, or the job is elastic.
        """
        self._check_static("run_remote")
        self._failed = True  # unknown here: shutdown() cleans up as after a failure
        return [worker.run.remote(fn, args, kwargs) for worker in self.workers]

    def execute(self, fn, callbacks=None):
        """Calls fn(executable) on every rank's executable_cls instance (static jobs).

        Args:
            fn (Callable): called with the instance `start()` created on each worker.
            callbacks (list[Callable] | None): called with each result as it arrives.

        Returns:
            list: the results, in rank order.

        Raises:
            WorkerError: a rank raised: its exception, naming the rank and its node.
            ValueError: `start()` was not called, or the job is elastic.
        """
        self._check_static("execute")
        return self._gather([worker.execute.remote(fn) for worker in self.workers], callbacks)

    def execute_single(self, fn):
        """Calls fn(executable) on rank 0 only (static jobs).

        Args:
            fn (Callable): called with rank 0's executable_cls instance.

        Returns:
            What `fn` returns.

        Raises:
            WorkerError: when it raised, naming the rank and its node.
            ValueError: `start()` was not called, or the job is elastic.
        """
        self._check_static("execute_single")
        return self._gather([self.workers[0].execute.remote(fn)])[0]

    def shutdown(self):
        """Stops every worker and the store; frees the placement group. Safe
        to call twice."""
        if self._elastic is not None:
            self._elastic.stop()
            self._elastic = None
        stop_actors(self.workers, [node_id for node_id, _ in self._hosts],
                    self._store.job_id if self._store else None, self._failed)
        self.workers, self._hosts, self._failed = [], [], False
        if self._placement_group is not None:
            ray.util.remove_placement_group(self._placement_group)
            self._placement_group = None
        if self._store is not None:
            self._store.close()
            self._store = None

    # --- placement ------------------------------------------------------

    def _start_static(self, executable_cls, executable_args, executable_kwargs):
        bundles, per_bundle, strategy = self._bundles()
        self._placement_group = ray.util.placement_group(bundles, strategy=strategy)
        try:
            ray.get(self._placement_group.ready(),
                    timeout=self.settings.placement_group_timeout_s)
        except GetTimeoutError:
            raise TimeoutError(
                f"Ray could not place {self.num_workers} hvdlite worker(s) ({len(bundles)} "
                f"bundle(s) of {bundles[0]}, strategy {strategy}) within "
                f"{self.settings.placement_group_timeout_s} s; the cluster has "
                f"{ray.available_resources()} free. Add nodes, or ask for fewer or "
                f"smaller workers") from None
        actors = [self.new_actor(PlacementGroupSchedulingStrategy(self._placement_group, i))
                  for i in range(len(bundles)) for _ in range(per_bundle)]
        nodes = ray.get([actor.node.remote(self.nics) for actor in actors])
        placed = group_by_host([(index, node[0]) for index, node in enumerate(nodes)])
        self.workers = [actors[index] for index, _ in placed]
        self._hosts = [nodes[index][:2] for index, _ in placed]
        envs = self._environments([(rank, node) for rank, (_, node) in enumerate(placed)],
                                  [nodes[index] for index, _ in placed])
        ray.get([worker.update_env_vars.remote(envs[rank])
                 for rank, worker in enumerate(self.workers)])
        ray.get([worker.start_executable.remote(executable_cls, executable_args,
                                                executable_kwargs)
                 for worker in self.workers])

    def _bundles(self):
        """(bundles, workers per bundle, strategy) of the placement group."""
        per_worker = {"CPU": self.cpus_per_worker}
        if self.gpus_per_worker:
            per_worker["GPU"] = self.gpus_per_worker
        if self.num_hosts is None:
            return [dict(per_worker) for _ in range(self.num_workers)], 1, "PACK"
        per_host = {name: amount * self.num_workers_per_host
                    for name, amount in per_worker.items()}
        return [dict(per_host) for _ in range(self.num_hosts)], self.num_workers_per_host, \
            "STRICT_SPREAD"

    def new_actor(self, scheduling_strategy):
        """Starts one worker actor with the executor's CPUs and GPUs per worker.

        Args:
            scheduling_strategy: Ray's strategy, e.g. a placement group bundle.

        Returns:
            ray.actor.ActorHandle: a BaseHvdliteWorker actor.
        """
        return ray.remote(BaseHvdliteWorker).options(
            num_cpus=self.cpus_per_worker, num_gpus=self.gpus_per_worker,
            scheduling_strategy=scheduling_strategy).remote()

    def _environments(self, workers, nodes, layouts=None):
        """{worker id: full environment}: workers are (worker id, node id) in
        rank order, nodes the (node id, IP, GPU ids) of each."""
        layouts = layouts or rank_environments(
            [(worker_id, host_identity(node)) for (worker_id, _), node in zip(workers, nodes)])
        gpus = visible_devices(nodes) if self.use_gpu else {}
        envs = {}
        for (worker_id, node_id), (_, ip, _) in zip(workers, nodes):
            env = self._store.environment(bind_addr=ip)
            env.update(layouts[worker_id])
            if node_id in gpus:
                env["CUDA_VISIBLE_DEVICES"] = gpus[node_id]
            env.update(self._extra_env)
            envs[worker_id] = env
        return envs

    # --- results --------------------------------------------------------

    def _gather(self, refs, callbacks=None):
        try:
            return gather(refs, self._hosts, callbacks)
        except WorkerError:
            self._failed = True
            raise

    def _check_static(self, method):
        self._check_started()
        if self._elastic is not None:
            raise ValueError(f"RayExecutor.{method}() is for static jobs: an elastic job's "
                             f"workers come and go, use run()")

    def _check_started(self):
        if self._store is None:
            raise ValueError("RayExecutor: call start() before run(), execute() or "
                             "execute_single() (and not after shutdown())")


def on_this_node_only():
    """Whether every live node of the Ray cluster is on the driver's machine
    (ray.init() without an address starts such a cluster): the store then
    listens on loopback. An elastic job's nodes may join later from other
    machines, so it is asked only of static jobs."""
    here = ray.util.get_node_ip_address()
    return all(node["NodeManagerAddress"] == here for node in ray.nodes() if node["Alive"])
