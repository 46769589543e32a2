"""The Ray actor that hosts one hvdlite rank (or one elastic worker). The
driver (executor.py) gives it the environment of its place in the job before
any user function runs, so hvdlite.init() inside that function finds its
rank, the rendezvous store and the job's secret as under hvdliterun."""
import os

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hvdlite.common.membership import LeftJob


class LeftTheJob:
    """What run() returns for an elastic worker that is not part of the
    job's newest round (membership.LeftJob): no result, no failure."""


class BaseHvdliteWorker:
    """One rank's process. Horovod's name for it is kept in hvdlite.ray's
    __all__ so that code written for horovod.ray finds it."""

    def __init__(self):
        self.executable = None

    def node(self, nics=None):
        """Where this worker runs, for placing ranks.

        Args:
            nics (Iterable[str] | None): network interfaces to listen on, first one the node
                has; None: the node's IP.

        Returns:
            tuple: (node id, the address this rank listens on: the node's IP or that of the
                first of `nics` the node has, GPU ids Ray assigned to this actor).
        """
        from hvdlite.store import network
        context = ray.get_runtime_context()
        address = network.interface_address(nics) if nics else ray.util.get_node_ip_address()
        return context.get_node_id(), address, [str(gpu) for gpu in ray.get_gpu_ids()]

    def update_env_vars(self, env):
        """Sets environment variables in this actor's process (layout, store address).

        Args:
            env (dict): names and values; values are turned into strings.
        """
        os.environ.update({name: str(value) for name, value in env.items()})

    def env_vars(self):
        """This actor's environment.

        Returns:
            dict: a copy of `os.environ`.
        """
        return dict(os.environ)

    def start_executable(self, executable_cls=None, executable_args=None,
                         executable_kwargs=None):
        """Creates the object `execute()` hands to functions: `executable_cls(*args, **kwargs)`.

        Args:
            executable_cls (type | None): nothing is created when None.
            executable_args (tuple | None): positional arguments.
            executable_kwargs (dict | None): keyword arguments.
        """
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or ()),
                                             **(executable_kwargs or {}))

    def execute(self, fn):
        """Calls `fn` on the instance `RayExecutor.start()` created on this worker.

        Args:
            fn (Callable): called as fn(executable).

        Returns:
            What `fn` returns.
        """
        return fn(self.executable)

    def listen_on(self, nics):
        """Ranks of this actor listen on the address of the first of `nics`
        its node has (elastic workers; static ones get it in their environment).

        Args:
            nics (Iterable[str]): network interface names, in order of preference.
        """
        from hvdlite.store import network
        os.environ["HVDLITE_BIND_ADDR"] = network.interface_address(nics)

    def run(self, fn, args=None, kwargs=None):
        """Runs `fn(*args, **kwargs)` on this worker.

        Args:
            fn (Callable): the training function.
            args (tuple | None): positional arguments.
            kwargs (dict | None): keyword arguments.

        Returns:
            What `fn` returns, or a LeftTheJob marker when this worker left an elastic job.
        """
        try:
            return fn(*(args or ()), **(kwargs or {}))
        except LeftJob:
            return LeftTheJob()


def stop_actors(actors, node_ids, job_id, failed):
    """Kills a job's actors. If a rank failed (`failed`), then removes the
    job's leftovers in /dev/shm on each node it used (a rank killed while it
    mapped a segment leaves one, see runner/cleanup.py; ranks that shut down
    leave none) with a zero-CPU task per node: it runs even on a full node,
    and does not wait behind an actor's running call."""
    for actor in actors:
        ray.kill(actor, no_restart=True)
    if not failed or not job_id or not node_ids:
        return
    cleanup = ray.remote(num_cpus=0)(_remove_job_segments)
    refs = [cleanup.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
            .remote(job_id) for node in sorted(set(node_ids))]
    # A node that is gone took its segments with it; its task fails.
    ray.wait(refs, num_returns=len(refs), timeout=30)


def _remove_job_segments(job_id):
    from hvdlite.runner.cleanup import remove_shared_memory
    return remove_shared_memory(job_id)
