"""Where the ranks of a job run: `-H host1:2,host2:4` and hostfiles
(`host slots=N` lines, or MPICH's `host:N`) parsed into hosts with slots, and ranks placed on them
the way horovodrun does it: host by host, in the order given."""
import re
import socket
from dataclasses import dataclass, field

# A host name, an IPv4 address or a bracketed IPv6 address.
_HOST_NAME = r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_][A-Za-z0-9_.-]*)"
_HOST_SLOTS = re.compile(rf"^({_HOST_NAME})(?::(\d+))?$")
# Open MPI's `host slots=N` and MPICH's (and Intel MPI's) `host:N`: the
# Kubeflow MPI Operator writes an MPIJob's /etc/mpi/hostfile in the format of
# its mpiImplementation.
_HOSTFILE_LINE = re.compile(rf"^({_HOST_NAME})(?:\s+slots\s*=\s*(\d+)|:(\d+))?$")
_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}


class HostError(ValueError):
    """A malformed host list or hostfile, or more ranks than slots."""


@dataclass
class Host:
    name: str
    slots: int


@dataclass
class HostPlacement:
    """The ranks that run on one host, and the layout variables they get."""
    name: str
    ranks: list = field(default_factory=list)
    # Index of this host among the hosts that run a given local rank.
    cross_ranks: list = field(default_factory=list)
    cross_sizes: list = field(default_factory=list)

    @property
    def local_size(self):
        return len(self.ranks)


def parse_host_list(text):
    """Parses `-H host1:2,host2` (a host without slots has one)."""
    hosts = []
    for item in text.split(","):
        item = item.strip()
        match = _HOST_SLOTS.match(item)
        if not match:
            raise HostError(f"malformed host {item!r} in -H/--hosts {text!r}: expected "
                            f"host:slots entries separated by commas, e.g. host1:2,host2:4")
        hosts.append(Host(_strip_brackets(match.group(1)), _slots(match.group(2), item)))
    return _merge_duplicates(hosts)


def numbered_entries(lines):
    """(line number, text) of each line that says something: `#` comments are
    cut off and blank lines skipped, in hostfiles and discovery output alike."""
    for number, line in enumerate(lines, start=1):
        line = line.split("#", 1)[0].strip()
        if line:
            yield number, line


def parse_hostfile(path):
    """Parses a hostfile: one `host slots=N`, `host:N` or just `host` per
    line; blank lines and `#` comments are ignored."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or error
        raise HostError(f"cannot read hostfile {path!r}: {reason}") from error
    hosts = []
    for number, line in numbered_entries(lines):
        match = _HOSTFILE_LINE.match(line)
        if not match:
            raise HostError(f"{path}:{number}: malformed line {line!r}: expected "
                            f"`hostname slots=N` or `hostname:N`")
        slots = match.group(2) if match.group(2) is not None else match.group(3)
        hosts.append(Host(_strip_brackets(match.group(1)), _slots(slots, line)))
    if not hosts:
        raise HostError(f"hostfile {path!r} lists no hosts")
    return _merge_duplicates(hosts)


def place_ranks(hosts, num_proc):
    """Fills hosts in order with `num_proc` ranks; returns one HostPlacement
    per host that got ranks."""
    total = sum(host.slots for host in hosts)
    if num_proc > total:
        listing = ",".join(f"{host.name}:{host.slots}" for host in hosts)
        raise HostError(f"-np {num_proc} is more than the {total} slot(s) the hosts offer "
                        f"({listing}); lower -np or add slots")
    placements, next_rank = [], 0
    for host in hosts:
        count = min(host.slots, num_proc - next_rank)
        if count == 0:
            break
        placements.append(HostPlacement(host.name, list(range(next_rank, next_rank + count))))
        next_rank += count
    for local_rank in range(max(p.local_size for p in placements)):
        owners = [p for p in placements if p.local_size > local_rank]
        for index, placement in enumerate(owners):
            placement.cross_ranks.append(index)
            placement.cross_sizes.append(len(owners))
    return placements


def is_local(name):
    """True for names that mean this machine: started without ssh. Every
    loopback address (127.0.0.2, ...) is this machine too, which lets an
    elastic job treat 127.0.0.1 and 127.0.0.2 as two local "hosts"."""
    if name in _LOCAL_NAMES or name.startswith("127."):
        return True
    this_host = socket.gethostname()
    return name in (this_host, this_host.split(".")[0], socket.getfqdn())


def _slots(text, item):
    if text is None:
        return 1
    slots = int(text)
    if slots < 1:
        raise HostError(f"host {item!r} has {slots} slots; every host needs at least 1")
    return slots


def _strip_brackets(name):
    return name[1:-1] if name.startswith("[") else name


def _merge_duplicates(hosts):
    """`a:1,b:1,a:1` is `a:2,b:1`: every rank of a host starts with one ssh."""
    merged = {}
    for host in hosts:
        if host.name in merged:
            merged[host.name].slots += host.slots
        else:
            merged[host.name] = Host(host.name, host.slots)
    return list(merged.values())
