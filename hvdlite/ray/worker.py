"""The Ray actor that hosts one hvdlite rank (or one elastic worker). The
driver (executor.py) gives it the environment of its place in the job before
any user function runs, so hvdlite.init() inside that function finds its
rank, the rendezvous store and the job's secret as under hvdliterun."""
import os

import ray


class BaseHvdliteWorker:
    """One rank's process. Horovod's name for it is kept in hvdlite.ray's
    __all__ so that code written for horovod.ray finds it."""

    def __init__(self):
        self.executable = None

    def node(self, nics=None):
        """(node id, the address this rank listens on: the node's IP or that
        of the first of `nics` the node has, GPU ids Ray assigned to this actor)."""
        from hvdlite.store import network
        context = ray.get_runtime_context()
        address = network.interface_address(nics) if nics else ray.util.get_node_ip_address()
        return context.get_node_id(), address, [str(gpu) for gpu in ray.get_gpu_ids()]

    def update_env_vars(self, env):
        os.environ.update({name: str(value) for name, value in env.items()})

    def env_vars(self):
        return dict(os.environ)

    def start_executable(self, executable_cls=None, executable_args=None,
                         executable_kwargs=None):
        if executable_cls is not None:
            self.executable = executable_cls(*(executable_args or ()),
                                             **(executable_kwargs or {}))

    def execute(self, fn):
        """fn(executable): the instance start() created on this worker."""
        return fn(self.executable)

    def run(self, fn, args=None, kwargs=None):
        return fn(*(args or ()), **(kwargs or {}))

    def remove_shared_memory(self, job_id):
        """Removes the job's leftovers in /dev/shm on this node (a rank killed
        while it mapped a segment leaves one, see runner/cleanup.py)."""
        from hvdlite.runner.cleanup import remove_shared_memory
        return remove_shared_memory(job_id)
