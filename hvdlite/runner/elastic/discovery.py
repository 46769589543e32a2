"""Which hosts an elastic job may use now, and how many slots each has.

A discovery script prints one host per line, `host` or `host:slots` (blank
lines and `#` comments are ignored); a host without slots gets --slots. The
driver runs it every few seconds, so it should answer quickly. Without a
script, the hosts of -H/--hostfile are the fixed answer.
"""
import re
import subprocess

from hvdlite.runner.hosts import HostError, numbered_entries, parse_host_list

SCRIPT_TIMEOUT_S = 30.0
_LINE = re.compile(r"^(\S+?)(?::(\d+))?$")


class DiscoveryError(RuntimeError):
    """The discovery script failed, timed out or printed something malformed."""


class ScriptDiscovery:
    """Runs `script` (through the shell, so arguments may follow it)."""

    def __init__(self, script, default_slots):
        self.script = script
        self.default_slots = default_slots

    def find(self):
        """{host: slots}, in the order the script printed them."""
        try:
            done = subprocess.run(self.script, shell=True, capture_output=True, text=True,
                                  timeout=SCRIPT_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as error:
            raise DiscoveryError(f"host discovery script {self.script!r} did not finish "
                                 f"within {SCRIPT_TIMEOUT_S:g} s") from error
        if done.returncode != 0:
            detail = done.stderr.strip().splitlines()[-1:] or ["no output on stderr"]
            raise DiscoveryError(f"host discovery script {self.script!r} exited with code "
                                 f"{done.returncode}: {detail[0]}")
        return parse_discovery_output(done.stdout, self.default_slots, self.script)


class FixedDiscovery:
    """The hosts given with -H/--hostfile, always."""

    def __init__(self, hosts):
        self._hosts = {host.name: host.slots for host in hosts}

    def find(self):
        return dict(self._hosts)


def parse_discovery_output(text, default_slots, source):
    hosts = {}
    for number, line in numbered_entries(text.splitlines()):
        match = _LINE.match(line)
        if not match:
            raise DiscoveryError(f"{source}: line {number} {line!r} is not `host` or "
                                 f"`host:slots`")
        try:
            name = parse_host_list(match.group(1))[0].name
        except HostError as error:
            raise DiscoveryError(f"{source}: line {number}: {error}") from error
        slots = int(match.group(2)) if match.group(2) is not None else default_slots
        if slots < 1:
            continue  # a host with no free slots is as good as absent
        hosts[name] = hosts.get(name, 0) + slots
    return hosts
