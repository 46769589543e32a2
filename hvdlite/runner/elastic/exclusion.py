"""Hosts an elastic job stops using after a rank on them failed.

As in Horovod, a failure excludes the whole host: a rank that crashed or was
killed most likely tells about its machine. Without a cooldown range the
host stays out for the rest of the job; with `--blacklist-cooldown-range LOW
HIGH` it comes back after a cooldown (Note [Cooldown length]).

Note [Cooldown length]
The n-th exclusion of a host lasts LOW * 2**n + U(0, 1) * LOW seconds,
clamped to [LOW, HIGH]: the first between 2 LOW and 3 LOW, then doubling,
with a jitter of up to LOW so that hosts that failed together do not all
return at once. This is what Horovod's code does (HostState in
horovod/runner/elastic/discovery.py); its documentation describes the first
cooldown as LOW, which its tests and jobs never see.
"""
import random
import time


class HostExclusions:
    def __init__(self, cooldown_range=None, clock=time.monotonic):
        self._cooldown_range = cooldown_range
        self._clock = clock
        self._failures = {}  # host -> count
        self._until = {}  # host -> clock time it may return (inf: never)

    def record_failure(self, host):
        """Excludes `host`; returns the cooldown in seconds (None: for good)."""
        count = self._failures.get(host, 0) + 1
        self._failures[host] = count
        if self._cooldown_range is None:
            self._until[host] = float("inf")
            return None
        low, high = self._cooldown_range
        cooldown = max(low, min(high, low * 2 ** count + random.uniform(0.0, 1.0) * low))
        self._until[host] = self._clock() + cooldown
        return cooldown

    def is_excluded(self, host):
        return self._clock() < self._until.get(host, 0.0)

    def failures(self, host):
        return self._failures.get(host, 0)

    def excluded(self):
        """Hosts excluded now."""
        return [host for host in self._until if self.is_excluded(host)]


def silent_hosts(reports):
    """The hosts to give up after a failed round (Note [Silent hosts] in
    driver.py). reports: (reporter, its host, its error's text, the hosts
    its error names lost: PeerLostError.lost_hosts) for each worker of the
    round that asked for a new one; returns {host: (reporter, error)} for
    each host an error of another host's worker names lost, and from which
    no worker reported (the first such report)."""
    heard_from = {host for _, host, _, _ in reports}
    silent = {}
    for reporter, host, error, lost in reports:
        for name in sorted(set(lost) - heard_from - {host}):
            silent.setdefault(name, (reporter, error))
    return silent
