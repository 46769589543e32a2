"""Elastic recovery time: from a worker's SIGKILL to the first completed step
of the re-formed job, and from a host's return (the discovery script lists
it again) to the first step that includes it, for torch and Keras 3, at
each number of ranks asked for, on this machine (and for hvdlite.numpy, which
imports no framework: what hvdlite itself costs).

    python bench/elastic_recovery.py [--ranks 2,4,8] [--frameworks torch,keras,numpy]
                                     [--cycles 2] [--out bench/results]

Each job runs hvdliterun with one-slot hosts 127.0.0.1 ... 127.0.0.N from a
discovery script (one host per rank, so a failed worker's host is excluded
and the others carry on, as on a cluster; ranks talk over TCP). Each cycle:
the bench takes a worker other than rank 0 off the discovery list and
SIGKILLs it; once the job trains at N-1 ranks and the host's cooldown
(--blacklist-cooldown-range 1 2) is over, it lists the host again and waits
for the job to train at N. The workers (elastic_recovery_worker.py) write
timed events; hvdliterun's own lines are timed as they arrive. Where the
time goes:

    kill:   kill -> detect (the first survivor's failed collective, or the
            driver's report of the exit) -> round (the driver publishes the
            new round) -> init (every rank's init() of it returned) -> sync
            (every rank entered the training function after state.sync())
            -> step (the first step of the new round completed)
    return: return -> round (discovery runs every second) -> start (the new
            worker process began) -> init (its imports and init(); the
            others re-formed at their next commit) -> sync -> step

Prints one table and writes <out>/elastic_recovery.json. Keras runs on the
backend KERAS_BACKEND names (torch unless set).
"""
import argparse
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE / "elastic_recovery_worker.py"
COOLDOWN = (1, 2)  # --blacklist-cooldown-range: a killed host may return after HIGH s
WARM_STEPS = 6  # steps of the current round before a kill (and for the step time)
KILL_PHASES = ("detect", "round", "init", "sync", "step")
RETURN_PHASES = ("round", "start", "init", "sync", "step")
REFORM_LINE = re.compile(r"re-forming the job at (\d+) rank")


class BenchError(RuntimeError):
    """The job did not do what the measurement needs; the message says what."""


class Job:
    """One elastic hvdliterun job of `ranks` one-slot hosts, its output
    lines timed as they arrive and its workers' events read on demand."""

    def __init__(self, framework, ranks, folder, step_pause, launcher):
        self.framework, self.ranks, self.folder = framework, ranks, Path(folder)
        self.events_dir = self.folder / "events"
        self.events_dir.mkdir()
        self.hosts_file = self.folder / "hosts"
        self.all_hosts = [f"127.0.0.{i + 1}" for i in range(ranks)]
        self.write_hosts(self.all_hosts)
        script = self.folder / "discover.sh"
        script.write_text(f"#!/bin/sh\ncat {self.hosts_file}\n")
        script.chmod(0o755)
        command = [*launcher, "-np", str(ranks), "--min-np", "1",
                   "--max-np", str(ranks), "--host-discovery-script", str(script),
                   "--blacklist-cooldown-range", *map(str, COOLDOWN),
                   sys.executable, str(WORKER), str(self.events_dir), framework,
                   "--step-pause", str(step_pause)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.setdefault("KERAS_BACKEND", "torch")
        self.lines = []  # (time, stream, text)
        self._lock = threading.Lock()
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env, start_new_session=True)
        self._readers = [threading.Thread(target=self._read, args=(stream, name), daemon=True)
                         for stream, name in ((self.process.stdout, "stdout"),
                                              (self.process.stderr, "stderr"))]
        for reader in self._readers:
            reader.start()

    def _read(self, stream, name):
        for line in stream:
            with self._lock:
                self.lines.append((time.time(), name, line.rstrip("\n")))

    def write_hosts(self, hosts):
        temporary = self.hosts_file.with_suffix(".tmp")
        temporary.write_text("".join(f"{host}:1\n" for host in hosts))
        os.replace(temporary, self.hosts_file)

    def events(self):
        found = []
        for path in self.events_dir.glob("*.jsonl"):
            for line in path.read_text().splitlines():
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line being written
        return sorted(found, key=lambda e: e["t"])

    def output_after(self, since, pattern):
        """(time, match) of the first hvdliterun line after `since` matching `pattern`."""
        with self._lock:
            lines = list(self.lines)
        for t, _, text in lines:
            found = pattern.search(text) if t >= since else None
            if found:
                return t, found
        return None

    def wait_for(self, what, predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"hvdliterun exited ({self.process.returncode}) while waiting "
                                 f"for {what}:\n{self.tail()}")
            found = predicate()
            if found:
                return found
            time.sleep(0.05)
        raise BenchError(f"no {what} within {timeout:g} s:\n{self.tail()}")

    def steps_at(self, size, since, count=1):
        """Step events of a round of `size` ranks after `since`, once every
        rank made `count` of them; None before."""
        steps = [e for e in self.events() if e["event"] == "step" and e["size"] == size
                 and e["t"] > since]
        by_pid = {}
        for event in steps:
            by_pid.setdefault(event["pid"], []).append(event)
        if len(by_pid) == size and all(len(s) >= count for s in by_pid.values()):
            return steps
        return None

    def current_workers(self):
        """{pid: its newest event} of the workers that have not ended."""
        newest = {}
        for event in self.events():
            newest[event["pid"]] = event
        return {pid: e for pid, e in newest.items() if e["event"] != "done" and _alive(pid)}

    def stop(self, timeout):
        (self.events_dir / "stop").touch()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            raise BenchError(f"the job did not stop within {timeout:g} s:\n{self.tail()}")
        for reader in self._readers:
            reader.join(5)
        return self.process.returncode

    def kill_all(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def tail(self, count=25):
        with self._lock:
            return "\n".join(f"{name}: {text}" for _, name, text in self.lines[-count:])


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _first(events, event, since, size=None, pids=None):
    times = [e["t"] for e in events if e["event"] == event and e["t"] > since
             and (size is None or e["size"] == size) and (pids is None or e["pid"] in pids)]
    return min(times) if times else None


def _last_per_worker(events, event, since, size, pids):
    """The time by which every worker in `pids` had its first `event` after `since`."""
    firsts = {}
    for e in events:
        if e["event"] == event and e["t"] > since and e["size"] == size and e["pid"] in pids:
            firsts.setdefault(e["pid"], e["t"])
    return max(firsts.values()) if len(firsts) == len(pids) else None


def _phases(start, marks, names):
    """Durations between consecutive marks (a mark missing or out of order
    gives None for the two phases around it), and the total."""
    times = [start] + [marks[name] for name in names]
    phases, previous = {}, start
    for name, t in zip(names, times[1:]):
        phases[name] = None if t is None or previous is None else round(t - previous, 4)
        previous = t
    phases["total"] = None if times[-1] is None else round(times[-1] - start, 4)
    return phases


def kill_cycle(job, used_hosts, timeout):
    """Kills one worker (not rank 0, on a host not killed before when there
    is one); returns the kill's phases and the host, off the discovery list."""
    n = job.ranks
    workers = job.wait_for(f"all {n} ranks training", lambda: _training(job, n), timeout)
    candidates = sorted((e for e in workers.values() if e["rank"] != 0),
                        key=lambda e: (e["worker"].split("/")[0] in used_hosts, -e["rank"]))
    victim = candidates[0]
    host = victim["worker"].split("/")[0]
    rank0 = next(p for p, e in workers.items() if e["rank"] == 0)
    job.wait_for("steps of the current round", lambda: _steps_in_round(job, rank0, WARM_STEPS),
                 timeout)
    step_time = _step_time(job.events(), rank0)
    job.write_hosts([h for h in job.all_hosts if h != host])
    killed_at = time.time()
    os.kill(victim["pid"], signal.SIGKILL)
    survivors = set(workers) - {victim["pid"]}
    job.wait_for(f"steps at {n - 1} rank(s) after the kill",
                 lambda: job.steps_at(n - 1, killed_at, count=2), timeout)
    events = job.events()
    detected = [t for t in (_first(events, "failure", killed_at, pids=survivors),
                            _time_of(job.output_after(killed_at, re.compile(
                                rf"pid {victim['pid']}\) was killed")))) if t is not None]
    marks = {"detect": min(detected) if detected else None,
             "round": _published(job, killed_at, events, survivors),
             "init": _last_per_worker(events, "reset", killed_at, n - 1, survivors),
             "sync": _last_per_worker(events, "enter", killed_at, n - 1, survivors),
             "step": _first(events, "step", killed_at, size=n - 1)}
    return {**_phases(killed_at, marks, KILL_PHASES), "step_time": step_time}, host, killed_at


def _step_time(events, pid):
    """The median time between `pid`'s steps since it last entered the
    training function (its current round): detect and step are bounded by it
    (a survivor notices the loss at its next collective; a step of the new
    round is one of these)."""
    times = []
    for e in events:
        if e["pid"] == pid and e["event"] == "enter":
            times = []
        elif e["pid"] == pid and e["event"] == "step":
            times.append(e["t"])
    gaps = [b - a for a, b in zip(times, times[1:])]
    return round(statistics.median(gaps), 4) if gaps else None


def _steps_in_round(job, pid, count):
    """True once `pid` made `count` steps since it last entered training."""
    made = 0
    for e in job.events():
        if e["pid"] == pid and e["event"] == "enter":
            made = 0
        elif e["pid"] == pid and e["event"] == "step":
            made += 1
    return made >= count


def return_cycle(job, host, killed_at, timeout):
    """Lists `host` again once its cooldown is over; returns the phases."""
    n = job.ranks
    time.sleep(max(0.0, killed_at + COOLDOWN[1] + 0.5 - time.time()))
    before = set(job.current_workers())
    returned_at = time.time()
    job.write_hosts(job.all_hosts)
    job.wait_for(f"steps at {n} ranks after {host} returned",
                 lambda: job.steps_at(n, returned_at, count=2), timeout)
    events = job.events()
    everyone = {e["pid"] for e in events if e["event"] == "step" and e["size"] == n
                and e["t"] > returned_at}
    newcomers = everyone - before
    inits = [_last_per_worker(events, "init", returned_at, n, newcomers),
             _last_per_worker(events, "reset", returned_at, n, everyone - newcomers)]
    marks = {"round": _published(job, returned_at, events, everyone),
             "start": _first(events, "start", returned_at, pids=newcomers),
             "init": None if None in inits else max(inits),
             "sync": _last_per_worker(events, "enter", returned_at, n, everyone),
             "step": _first(events, "step", returned_at, size=n)}
    return _phases(returned_at, marks, RETURN_PHASES)


def _published(job, since, events, pids):
    """When the driver published the round after `since`: its line as the
    bench read it, a few ms late, so no later than the first worker's
    start or init in that round (which cannot come before it)."""
    line = job.output_after(since, REFORM_LINE)
    joined = [_first(events, kind, since, pids=pids) for kind in ("start", "init", "reset")]
    known = [t for t in [line[0] if line else None, *joined] if t is not None]
    return min(known) if line and known else None


def _training(job, n):
    workers = job.current_workers()
    recent = [e for e in workers.values() if e["event"] == "step" and e["size"] == n]
    return workers if len(workers) == n and len(recent) == n else None


def _time_of(found):
    return found[0] if found else None


def measure(framework, ranks, cycles, step_pause, timeout, launcher):
    with tempfile.TemporaryDirectory(prefix="hvdlite-elastic-bench-") as folder:
        job = Job(framework, ranks, folder, step_pause, launcher)
        try:
            kills, returns, used = [], [], set()
            for _ in range(cycles):
                phases, host, killed_at = kill_cycle(job, used, timeout)
                used.add(host)
                kills.append(phases)
                returns.append(return_cycle(job, host, killed_at, timeout))
            code = job.stop(timeout)
            if code != 0:
                raise BenchError(f"the job exited with {code}:\n{job.tail()}")
            return {"framework": framework, "ranks": ranks, "kill": kills, "return": returns}
        finally:
            job.kill_all()


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summary(result):
    return {kind: {phase: _median([c[phase] for c in result[kind]])
                   for phase in (*phases, "total")}
            for kind, phases in (("kill", (*KILL_PHASES, "step_time")),
                                 ("return", RETURN_PHASES))}


def _seconds(value):
    return "   -  " if value is None else f"{value:6.3f}"


def print_table(results):
    print("elastic recovery, seconds (median of the cycles; phases in order)")
    header = (f"{'framework':<9} {'ranks':>5} {'a step':>6} | {'kill->step':>10} = "
              + " + ".join(f"{p:>6}" for p in KILL_PHASES)
              + f" | {'return->step':>12} = " + " + ".join(f"{p:>6}" for p in RETURN_PHASES))
    print(header)
    print("-" * len(header))
    for result in results:
        s = summary(result)
        print(f"{result['framework']:<9} {result['ranks']:>5} {_seconds(s['kill']['step_time'])} | "
              f"{_seconds(s['kill']['total']):>10}"
              f" = " + " + ".join(_seconds(s["kill"][p]) for p in KILL_PHASES)
              + f" | {_seconds(s['return']['total']):>12} = "
              + " + ".join(_seconds(s["return"][p]) for p in RETURN_PHASES))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="2,4,8")
    parser.add_argument("--frameworks", default="torch,keras,numpy",
                        help="numpy: hvdlite.numpy alone, the floor without a framework")
    parser.add_argument("--cycles", type=int, default=2, help="kills (and returns) per job")
    parser.add_argument("--step-pause", type=float, default=0.02,
                        help="seconds each worker sleeps between steps")
    parser.add_argument("--timeout", type=float, default=120,
                        help="seconds any one wait may take before the bench gives up")
    parser.add_argument("--launcher", default=f"{sys.executable} -m hvdlite.runner",
                        help="the hvdliterun command line (to compare another build or a "
                             "patched driver)")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    results, failed = [], []
    for framework in args.frameworks.split(","):
        for ranks in map(int, args.ranks.split(",")):
            if ranks < 2:
                parser.error("--ranks: a job needs 2 ranks or more to lose one")
            print(f"measuring {framework} at {ranks} ranks...", file=sys.stderr, flush=True)
            try:
                results.append(measure(framework, ranks, args.cycles, args.step_pause,
                                       args.timeout, shlex.split(args.launcher)))
            except BenchError as error:
                failed.append(f"{framework} at {ranks} ranks: {error}")
                print(f"FAILED {failed[-1]}", file=sys.stderr, flush=True)
    print_table(results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    keras_backend = os.environ.get("KERAS_BACKEND", "torch")
    (out / "elastic_recovery.json").write_text(json.dumps(
        {"keras_backend": keras_backend, "cycles": args.cycles, "step_pause": args.step_pause,
         "cpus": os.cpu_count(), "results": results,
         "summary": [{"framework": r["framework"], "ranks": r["ranks"], **summary(r)}
                     for r in results], "failed": failed}, indent=1))
    if failed:
        print("failed: " + "; ".join(f.splitlines()[0] for f in failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
