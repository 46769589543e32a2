"""Horovod's examples/elastic synthetic benchmarks (PyTorch, TensorFlow 2),
unchanged, run by `hvdliterun --horovod-alias` as an elastic job that grows
by a host and then loses a worker to SIGKILL: each must train to its end,
every rank left with one model (tests/elastic/workers/horovod_example.py
prints its digest). Horovod's files come from tests/horovod_sources.py
(skipped, saying why, where there are none).

Three workers that import a framework, on CI's two cores, take a minute or
more per example: they run with HVDLITE_TEST_HOROVOD_SUITES=1 (marker
horovod_suites)."""
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ELASTIC = Path(__file__).resolve().parent
WORKERS = ELASTIC / "workers"
sys.path.insert(0, str(ELASTIC.parent))
sys.path.insert(0, str(WORKERS))
from elastic_jobs import discovery_script  # noqa: E402
from horovod_sources import alias_environment, extract  # noqa: E402

EXAMPLES = {
    "torch": ("examples/elastic/pytorch/pytorch_synthetic_benchmark_elastic.py",
              ["--no-cuda", "--model", "small_convnet", "--batch-size", "8",
               "--num-warmup-batches", "2", "--num-batches-per-iter", "4", "--num-iters", "14"]),
    "tensorflow2": ("examples/elastic/tensorflow2/tensorflow2_synthetic_benchmark_elastic.py",
                    ["--no-cuda", "--model", "MobileNetV3Small", "--batch-size", "2",
                     "--num-warmup-batches", "2", "--num-batches-per-iter", "2",
                     "--num-iters", "12"]),
}

pytestmark = [
    pytest.mark.horovod_suites,
    pytest.mark.skipif(os.environ.get("HVDLITE_TEST_HOROVOD_SUITES") != "1",
                       reason="minutes of three-worker framework jobs: set "
                              "HVDLITE_TEST_HOROVOD_SUITES=1 to run Horovod's elastic examples"),
]


def worker_pid(launcher_pid, number):
    """The pid of elastic worker `number` that hvdliterun started."""
    psutil = pytest.importorskip("psutil")
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            worker = child.environ().get("HVDLITE_ELASTIC_WORKER_ID", "")
        except psutil.Error:
            continue
        if worker.endswith(f"/{number}") and "python" in child.name():
            return child.pid
    return None


class Job:
    """hvdliterun running, its lines read as they come."""

    def __init__(self, command, env):
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env,
                                        start_new_session=True)
        self.lines = queue.SimpleQueue()
        self.seen = {"stdout": [], "stderr": []}
        for name in ("stdout", "stderr"):
            threading.Thread(target=self._read, args=(name,), daemon=True).start()

    def _read(self, name):
        for line in getattr(self.process, name):
            self.seen[name].append(line.rstrip("\n"))
            self.lines.put((name, line.rstrip("\n")))
        self.lines.put((name, None))

    def wait_for(self, predicate, deadline):
        """Reads lines until predicate(stream, line) holds; False at the end
        of the output or the deadline."""
        while time.monotonic() < deadline:
            try:
                name, line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is not None and predicate(name, line):
                return True
            if line is None and self.process.poll() is not None:
                return False
        return False

    def finish(self, deadline):
        try:
            self.process.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        time.sleep(0.5)  # the readers' last lines
        return self.process.returncode

    def output(self):
        return "\n".join(self.seen["stdout"][-200:] + self.seen["stderr"][-200:])


@pytest.mark.timeout(900)
@pytest.mark.parametrize("framework", sorted(EXAMPLES))
def test_horovods_elastic_example_grows_loses_a_worker_and_finishes(framework, tmp_path):
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    example, arguments = EXAMPLES[framework]
    tree = extract([example], tmp_path / "horovod")
    extra_path = []
    if framework == "torch":
        try:
            import torchvision  # noqa: F401
            arguments = [a if a != "small_convnet" else "resnet18" for a in arguments]
        except ImportError:
            extra_path.append(WORKERS / "torchvision_standin")
    script, hosts = discovery_script(tmp_path, ["127.0.0.1:1", "127.0.0.2:1"])
    command = [sys.executable, "-m", "hvdlite.runner", "--horovod-alias", "-np", "2",
               "--min-np", "2", "--max-np", "3", "--host-discovery-script", str(script),
               "--discovery-interval", "0.2", "--start-timeout", "120", sys.executable,
               str(WORKERS / "horovod_example.py"), str(tree / example), *arguments]
    job = Job(command, alias_environment(extra_path))
    deadline = time.monotonic() + 840
    try:
        # Training: a third host joins; once the job of three trains, worker 1 is killed.
        assert job.wait_for(lambda s, line: "Iter #1:" in line, deadline), job.output()
        with open(hosts, "a") as file:
            file.write("127.0.0.3:1\n")
        assert job.wait_for(lambda s, line: "re-forming the job at 3 rank(s)" in line,
                            deadline), job.output()
        assert job.wait_for(lambda s, line: line.startswith("[0]<stdout>:Iter #"),
                            deadline), job.output()
        pid = worker_pid(job.process.pid, 1)
        assert pid is not None, job.output()
        os.kill(pid, signal.SIGKILL)
        code = job.finish(deadline)
    finally:
        if job.process.poll() is None:
            os.killpg(job.process.pid, signal.SIGKILL)
    assert code == 0, job.output()
    stderr = "\n".join(job.seen["stderr"])
    assert "excluding host 127.0.0.2" in stderr, job.output()
    finals = {int(line[1:line.index("]")]): json.loads(line.split(":final ", 1)[1])
              for line in job.seen["stdout"] if ":final " in line}
    assert sorted(finals) == [0, 2], job.output()
    assert {f["size"] for f in finals.values()} == {2}, finals
    assert len({f["model"] for f in finals.values()}) == 1, finals  # one model on every rank
    total = int(arguments[arguments.index("--num-iters") + 1])
    assert {f["iter"] for f in finals.values()} == {total - 1}, finals
