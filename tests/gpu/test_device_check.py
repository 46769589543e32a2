"""tests/gpu/device_check.sh where there is no GPU (CI): valid bash, says so
in one line and in summary.json and exits 3 within seconds, building
nothing (also given --wheels DIR; a bad --wheels is a usage error); every
case it runs exists in its worker, on as many ranks; the workers compile.
The cases themselves need a real GPU (the script's header says how to run
them)."""
import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "device_check.sh"
WORKERS = HERE / "workers"
SUMMARIZE = HERE / "device_check_summary.py"
BENCH = HERE.parent.parent / "bench" / "gpu_allreduce.py"


def run_script(out, *options, **env):
    full = dict(os.environ, PYTHON=sys.executable, **env)
    started = time.monotonic()
    done = subprocess.run(["bash", str(SCRIPT), *options, str(out)], env=full, capture_output=True,
                          text=True, timeout=60)
    return done, time.monotonic() - started


def test_the_script_is_valid_bash():
    done = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_hidden_gpus_are_no_gpu_exit_3_fast_and_nothing_is_built(tmp_path):
    out = tmp_path / "out"
    done, seconds = run_script(out, CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 3, done
    assert seconds < 20, seconds
    lines = [line for line in done.stdout.splitlines() if "no NVIDIA GPU" in line]
    assert len(lines) == 1 and "CUDA_VISIBLE_DEVICES" in lines[0], done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["result"] == "no_gpu" and "CUDA_VISIBLE_DEVICES" in summary["message"], summary
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "summary.json"]


def test_minus_one_hides_the_gpus_too(tmp_path):
    done, _ = run_script(tmp_path / "out", CUDA_VISIBLE_DEVICES="-1")
    assert done.returncode == 3 and "no NVIDIA GPU found" in done.stdout, done


def test_without_an_argument_it_prints_its_usage():
    done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "usage:" in done.stderr, done


def test_a_wheels_folder_still_stops_at_no_gpu(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "keras-3.0.0-py3-none-any.whl").write_bytes(b"")
    done, seconds = run_script(tmp_path / "out", "--wheels", str(wheels), CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 3 and "no NVIDIA GPU found" in done.stdout and seconds < 20, done


def test_a_bad_wheels_folder_is_a_usage_error(tmp_path):
    for folder, why in ((tmp_path / "missing", "no such folder"), (tmp_path, "no *.whl")):
        done, _ = run_script(tmp_path / "out", "--wheels", str(folder), CUDA_VISIBLE_DEVICES="")
        assert done.returncode == 2 and "usage:" in done.stderr and why in done.stderr, (folder, done)
    done = subprocess.run(["bash", str(SCRIPT), "--wheels"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--wheels needs a folder" in done.stderr, done


def _script_cases():
    """(name, ranks, worker) of the script's CASES=( "name ranks timeout worker" ... )."""
    text = SCRIPT.read_text()
    block = re.search(r"^CASES=\((.*?)^\)", text, re.S | re.M).group(1)
    entries = re.findall(r'"(\w+) (\d+) (\d+) ([\w-]+)"', block)
    assert entries and len(entries) == block.count('"') // 2, block
    return [(name, int(ranks), worker) for name, ranks, _, worker in entries]


def _worker_cases(worker):
    """(functions, RANKS) of a worker module, read without importing it."""
    tree = ast.parse((WORKERS / f"{worker}.py").read_text())
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    ranks = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "RANKS" for t in node.targets))
    return functions, ranks


def test_every_case_of_the_script_is_in_its_worker_on_as_many_ranks():
    cases = _script_cases()
    workers = {worker for _, _, worker in cases if worker != "-"}
    assert workers == {"device_cases", "jax_cases", "keras_cases"}, workers
    for worker in workers:
        functions, ranks = _worker_cases(worker)
        mine = {name: np_ for name, np_, w in cases if w == worker}
        for name, np_ in mine.items():
            assert name in functions, f"{worker}.py has no function {name}()"
            assert ranks.get(name) == np_, f"{name}: the script runs {np_} rank(s), RANKS says {ranks.get(name)}"
        assert set(ranks) == set(mine), f"{worker}.py: a case the script never runs, or runs elsewhere"
    assert [(name, worker) for name, _, worker in cases if worker == "-"] == [("bench", "-")]
    assert BENCH.exists()


def test_the_new_cases_are_in_the_check():
    names = [name for name, _, _ in _script_cases()]
    for name in ("jax_step", "jax_host_path", "keras_jax", "keras_torch", "powersgd_cuda",
                 "two_level_host"):
        assert name in names, name
    assert names[-1] == "bench", "the bench comes last: the deadline cuts it first"


def test_the_workers_compile():
    for worker in sorted(WORKERS.glob("*.py")):
        done = subprocess.run([sys.executable, "-m", "py_compile", str(worker)], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, (worker.name, done.stderr)


def test_the_summary_keeps_each_ranks_numbers_and_a_failures_tail(tmp_path):
    summary = tmp_path / "summary.json"
    output = tmp_path / "case.out"
    output.write_text("[0]<stdout>:DEVICE_CHECK_RESULT {\"ratio\": 1.02}\n"
                      "[1]<stdout>:DEVICE_CHECK_RESULT {\"ratio\": 1.04}\n"
                      "[1]<stderr>:AssertionError: boom\n")
    report = tmp_path / "report.out"
    report.write_text("[0]<stdout>:DEVICE_CHECK_RESULT {\"gpu\": \"H100\", \"torch\": \"2.11\"}\n")

    def summarize(*args):
        subprocess.run([sys.executable, str(SUMMARIZE), *map(str, args)], check=True, timeout=30)

    summarize("start", summary, "commit=abc", "uncommitted_files=0")
    summarize("case", summary, "report", "pass", "3.5", report)
    summarize("case", summary, "overlap", "fail", "12.0", output, "exit 1")
    skipped = tmp_path / "skipped.out"
    skipped.write_text("ModuleNotFoundError: No module named 'keras'\n")
    summarize("case", summary, "keras_jax", "skip", "0", skipped,
              "skipped: keras not importable (pass --wheels DIR)")
    summarize("finish", summary, "fail", "1 case(s) did not pass")
    data = json.loads(summary.read_text())
    assert data["result"] == "fail" and data["uncommitted_files"] == 0
    assert data["environment"]["gpu"] == "H100"
    overlap = data["cases"]["overlap"]
    assert overlap["numbers"] == {"rank0": {"ratio": 1.02}, "rank1": {"ratio": 1.04}}
    assert overlap["tail"][-1].endswith("AssertionError: boom") and overlap["note"] == "exit 1"
    assert "tail" not in data["cases"]["report"]
    keras = data["cases"]["keras_jax"]
    assert keras["status"] == "skip" and keras["note"] == "skipped: keras not importable (pass --wheels DIR)"
    assert keras["tail"] == ["ModuleNotFoundError: No module named 'keras'"]
    table = subprocess.run([sys.executable, str(SUMMARIZE), "table", str(summary)], capture_output=True,
                           text=True, check=True, timeout=30).stdout
    assert "keras_jax" in table and "skipped: keras not importable (pass --wheels DIR)" in table, table
