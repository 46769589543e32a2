"""tests/gpu/device_check.sh where there is no GPU (CI): valid bash, says so
in one line and in summary.json and exits 3 within seconds, building
nothing; and every case it runs exists in its worker, on as many ranks.
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
WORKER = HERE / "workers" / "device_cases.py"
SUMMARIZE = HERE / "device_check_summary.py"
BENCH = HERE.parent.parent / "bench" / "gpu_allreduce.py"


def run_script(out, **env):
    full = dict(os.environ, PYTHON=sys.executable, **env)
    started = time.monotonic()
    done = subprocess.run(["bash", str(SCRIPT), str(out)], env=full, capture_output=True, text=True,
                          timeout=60)
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


def _script_cases():
    """(name, ranks) of the script's CASES=( "name ranks timeout" ... )."""
    text = SCRIPT.read_text()
    block = re.search(r"^CASES=\((.*?)^\)", text, re.S | re.M).group(1)
    entries = re.findall(r'"(\w+) (\d+) (\d+)"', block)
    assert entries, block
    return [(name, int(ranks)) for name, ranks, _ in entries]


def test_every_case_of_the_script_is_in_the_worker_on_as_many_ranks():
    tree = ast.parse(WORKER.read_text())
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    ranks = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "RANKS" for t in node.targets))
    cases = _script_cases()
    for name, np_ in cases:
        if name == "bench":
            assert BENCH.exists()
            continue
        assert name in functions, f"device_cases.py has no function {name}()"
        assert ranks.get(name) == np_, f"{name}: the script runs {np_} rank(s), RANKS says {ranks.get(name)}"
    assert set(ranks) == {name for name, _ in cases} - {"bench"}, "a worker case the script never runs"


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
    summarize("finish", summary, "fail", "1 case(s) did not pass")
    data = json.loads(summary.read_text())
    assert data["result"] == "fail" and data["uncommitted_files"] == 0
    assert data["environment"]["gpu"] == "H100"
    overlap = data["cases"]["overlap"]
    assert overlap["numbers"] == {"rank0": {"ratio": 1.02}, "rank1": {"ratio": 1.04}}
    assert overlap["tail"][-1].endswith("AssertionError: boom") and overlap["note"] == "exit 1"
    assert "tail" not in data["cases"]["report"]
