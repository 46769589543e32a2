"""The ranks of one static job: start them on this host and on remote hosts,
signal them, clean up (see processes.py for how no rank outlives its job)."""
import signal
import socket
import subprocess

from hvdlite.runner.environment import nccl_network_towards, rank_environment
from hvdlite.runner.hosts import is_local
from hvdlite.runner.processes import signal_group
from hvdlite.runner.remote import placement_layouts, reachable_address


class Job:
    """Starts the ranks of `placements` (hosts.HostPlacement) through
    `starter` (starter.Starter): ranks on this host directly, those of each
    remote host through one ssh command. Each exit, in the order they
    happen, comes on the starter's events as ("exit", Rank)."""

    def __init__(self, placements, starter):
        self.size = sum(p.local_size for p in placements)
        self.ranks = []
        self._placements = placements
        self._starter = starter
        self._remote_hosts = []

    def start(self):
        """Starts every rank; raises LaunchError when one cannot start (the
        caller stops the ones already started)."""
        local = [p for p in self._placements if is_local(p.name)]
        for placement in self._placements:
            if placement in local:
                continue
            host = self._starter.connect(placement.name, placement_layouts(placement),
                                         size=self.size)
            self._remote_hosts.append(host)
            self.ranks += host.ranks.values()
        bind = {}
        if self._remote_hosts:
            address = reachable_address(self._remote_hosts, self._starter.remote_options)
            bind["HVDLITE_BIND_ADDR"] = address
            # Note [NCCL's network] in environment.py
            bind.update(nccl_network_towards(address, self._starter.environment))
        for placement in local:
            for local_rank, rank in enumerate(placement.ranks):
                variables = dict(bind)
                variables.update(rank_environment(
                    rank=rank, size=self.size, local_rank=local_rank,
                    local_size=placement.local_size, cross_rank=placement.cross_ranks[local_rank],
                    cross_size=placement.cross_sizes[local_rank],
                    hostname=socket.gethostname()))
                self.ranks.append(self._starter.here(rank, socket.gethostname(), variables,
                                                     local_size=placement.local_size))
        self.ranks.sort(key=lambda rank: rank.rank)

    def running(self):
        return [rank for rank in self.ranks if rank.returncode is None]

    def signal(self, signum):
        """Sends `signum` to every rank's process group, including the groups
        of ranks that already exited, so that nothing they started outlives
        the job."""
        for rank in self.ranks:
            if not isinstance(rank.process, subprocess.Popen):
                continue
            signal_group(rank.pid, signum)
        for host in self._remote_hosts:
            host.signal(signum)

    def kill(self):
        self.signal(signal.SIGKILL)

    def wait(self, output_timeout_s=5.0):
        """Waits for every rank and for the end of its output."""
        for host in self._remote_hosts:
            host.wait(output_timeout_s + 10)
        for rank in self.ranks:
            rank.process.wait()
        for rank in self.ranks:
            rank.output.join(output_timeout_s)
