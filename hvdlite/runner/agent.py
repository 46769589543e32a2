"""The launcher's helper on a remote host: `python -m hvdlite.runner.agent`,
started by hvdliterun with one ssh command per host.

It reads the job description as one JSON line on stdin (the secret travels
there, never on a command line), finds an address of the launcher's
rendezvous store it can reach, starts this host's ranks and sends back on
stdout, in order, each rank's output lines (prefixed `[r]<stdout>:` or
`[r]<stderr>:`) and control lines (see `CONTROL_PREFIX`). Further stdin
lines are commands from the launcher: `signal N` (every rank), `signal N R`
(rank R), `kill`, and, when the job description says "more_ranks" (an
elastic job, whose workers on a host start at different times), `start
{layout}`. End of stdin means the launcher is gone or has no more use for
this host, so every rank still running is stopped.

A layout names the rank ("rank", also the label of its output) and either
its place in a static job (local/cross rank and size, with the job's "size")
or, for an elastic worker, the extra variables it starts with ("env"; the
driver tells it its place in each round through the store) and the slots of
its host ("local_size", which sizes its thread pools: Note [Threads per
rank] in hvdlite/common/threads.py).

Once its ranks have ended (and, with "more_ranks", its stdin too), the agent
removes the job's shared-memory leftovers on this host and exits.
"""
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures

from hvdlite.common import config
from hvdlite.common.threads import thread_defaults
from hvdlite.store import network
from hvdlite.runner.cleanup import remove_shared_memory
from hvdlite.runner.environment import nccl_network_towards, rank_environment
from hvdlite.runner.processes import signal_group, terminate_with_parent
from hvdlite.runner.output import Console, RankOutput
from hvdlite.store import StoreClient, StoreError

CONTROL_PREFIX = "@hvdlite-agent "
# After the launcher went away, ranks get SIGTERM and this long to exit.
ORPHAN_GRACE_S = 5.0
STDERR_DRAIN_S = 1.0
OUTPUT_DRAIN_S = 5.0


def control_line(kind, **fields):
    return CONTROL_PREFIX + json.dumps(dict(fields, kind=kind))


class Agent:
    def __init__(self, spec, console):
        self._spec = spec
        self._console = console
        self._more_ranks = spec.get("more_ranks", False)
        self._addresses = None  # (store_addr, bind_addr), once found
        self._processes = {}
        self._threads = []
        self._outputs = []
        self._lock = threading.Lock()
        self._stdin_closed = threading.Event()

    def run(self):
        store_addr, bind_addr = self._find_store()
        self._addresses = (store_addr, bind_addr)
        self._send("ready", store_addr=store_addr, bind_addr=bind_addr,
                   hostname=socket.gethostname())
        for layout in self._spec["ranks"]:
            error = self._start_rank(layout)
            if error is not None and not self._more_ranks:
                self.signal(signal.SIGKILL)
                return 127 if isinstance(error, FileNotFoundError) else 126
        threading.Thread(target=self._read_commands, name="hvdlite-agent-stdin",
                         daemon=True).start()
        if self._more_ranks:
            self._stdin_closed.wait()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()
        for output in self._outputs:
            output.join(OUTPUT_DRAIN_S)
        remove_shared_memory(config.get("HVDLITE_JOB_ID", self._spec["env"]))
        return 0

    def signal(self, signum, rank=None):
        with self._lock:
            pids = [process for label, process in self._processes.items()
                    if rank is None or str(label) == rank]
        for process in pids:
            signal_group(process.pid, signum)

    def _send(self, kind, **fields):
        self._console.write_line("stdout", control_line(kind, **fields))

    def _find_store(self):
        """Tries every address the launcher listens on, at once; the first
        that answers with the job's secret wins. The local end of that
        connection is the address other hosts can reach this one at, unless
        --network-interface names the interface to use."""
        spec = self._spec
        port, secret = spec["store_port"], config.required("HVDLITE_SECRET", spec["env"])
        timeout = spec["connect_timeout"]

        def attempt(address):
            with StoreClient(address, port, secret, timeout=timeout) as client:
                return address, client.local_address()

        errors = []
        with futures.ThreadPoolExecutor(len(spec["store_candidates"])) as pool:
            pending = [pool.submit(attempt, a) for a in spec["store_candidates"]]
            for done in futures.as_completed(pending):
                try:
                    store_addr, local_addr = done.result()
                except (StoreError, OSError) as error:
                    errors.append(str(error))
                    continue
                interfaces = spec.get("network_interfaces")
                if interfaces:
                    local_addr = network.interface_address(interfaces)
                return store_addr, local_addr
        raise StoreError(
            f"cannot reach the launcher's rendezvous store at any of "
            f"{', '.join(spec['store_candidates'])} (port {port}) within {timeout:g} s: "
            f"{'; '.join(errors)}. Name a network interface every host shares with "
            f"--network-interface, and check firewalls")

    def _start_rank(self, layout):
        """Starts one rank; returns None, or the OSError that prevented it
        (reported to the launcher as start_failed)."""
        store_addr, bind_addr = self._addresses
        env = dict(os.environ)
        env.update(self._spec["env"])
        env.update({"HVDLITE_STORE_ADDR": store_addr, "HVDLITE_BIND_ADDR": bind_addr})
        env.update(nccl_network_towards(bind_addr, env))  # Note [NCCL's network]
        if "env" in layout:
            env.update(layout["env"])
        else:
            env.update(rank_environment(hostname=socket.gethostname(),
                                        size=self._spec["size"], **layout))
        env.update(thread_defaults(layout.get("local_size", 1), env))  # Note [Threads per rank]
        rank = layout["rank"]
        try:
            process = subprocess.Popen(self._spec["command"], env=env,
                                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, start_new_session=True,
                                       preexec_fn=terminate_with_parent)
        except OSError as error:
            self._send("start_failed", rank=rank, message=f"{error.strerror or error}")
            return error
        output = RankOutput(rank, self._console)
        self._send("started", rank=rank, pid=process.pid)
        output.start(process.stdout, process.stderr)
        thread = threading.Thread(target=self._report_exit, args=(rank, process, output),
                                  name=f"hvdlite-agent-rank{rank}", daemon=True)
        with self._lock:
            self._processes[rank] = process
            self._outputs.append(output)
            self._threads.append(thread)
        thread.start()
        return None

    def _report_exit(self, rank, process, output):
        process.wait()
        # The rank's last stderr lines go out before its exit, so that the
        # launcher has them for the failure summary. Not all of its output:
        # what the rank started may hold the pipes open until the launcher,
        # told of this exit, stops it.
        output.join_stderr(STDERR_DRAIN_S)
        self._send("exit", rank=rank, returncode=process.returncode)

    def _read_commands(self):
        for line in sys.stdin:
            words = line.split()
            if words[:1] == ["signal"] and len(words) in (2, 3):
                self.signal(int(words[1]), *words[2:])
            elif words == ["kill"]:
                self.signal(signal.SIGKILL)
            elif words[:1] == ["start"] and self._more_ranks:
                self._start_rank(json.loads(line.split(None, 1)[1]))
        # The launcher closed the connection: nobody will collect ranks that
        # still run. (Their process groups get SIGKILL in any case: what a
        # rank started may outlive it.)
        if self._running():
            self.signal(signal.SIGTERM)
            deadline = time.monotonic() + ORPHAN_GRACE_S
            while self._running() and time.monotonic() < deadline:
                time.sleep(0.05)
        self.signal(signal.SIGKILL)
        self._stdin_closed.set()

    def _running(self):
        with self._lock:
            return any(process.poll() is None for process in self._processes.values())


def main():
    # Rank output is passed on as UTF-8 whatever the remote login's locale.
    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", errors="replace")
    console = Console(stdout=out, stderr=out)
    try:
        spec = json.loads(sys.stdin.readline())
        if os.path.isdir(spec["cwd"]):  # else stay in the login directory, as ssh does
            os.chdir(spec["cwd"])
        return Agent(spec, console).run()
    except (StoreError, network.NetworkError, ValueError, KeyError) as error:
        console.write_line("stdout", control_line("error", message=str(error)))
        return 1


if __name__ == "__main__":
    sys.exit(main())
