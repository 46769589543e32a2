"""`make test-versions`: one hvdlite wheel beside several releases of PyTorch,
TensorFlow and JAX. Each cell is a fresh venv with one framework release
(downloaded), the wheel (its dependencies from the index) and the 2-rank job
of that framework from tools/wheel/wheel_jobs.py, run with no compiler and an
empty cache; the venv is deleted after its cell (a CUDA build of PyTorch
takes about 5.5 GB), so one cell's disk is in use at a time. Results go to
build/versions/results.json after every cell and, as a Markdown table, to
build/versions/table.md and stdout.

    python tools/wheel/test_versions.py --wheel dist/hvdlite-....whl [CELL ...]

A CELL is a pip requirement of a framework ("tensorflow-cpu==2.16.*",
"jax[cpu]==0.5.3", "torch==2.15.0"); the default is DEFAULT_CELLS.
"""
import argparse
import datetime
import json
import os
import shutil
import sys
import traceback

import wheel_jobs

WORK = wheel_jobs.ROOT / "build" / "versions"
# Releases of each framework, oldest to newest supported: every TensorFlow
# minor version the wheel has a library for, JAX before and after the
# handler's jaxlib, and one PyTorch older than pyproject.toml's lower bound
# (the torch binding compiles nothing against torch).
DEFAULT_CELLS = ["torch==2.11.0", "torch==2.13.0+cpu", "torch==2.14.1", "torch==2.15.0",
                 *(f"tensorflow-cpu==2.{minor}.*" for minor in range(16, 22)),
                 "jax[cpu]==0.5.3", "jax[cpu]==0.6.2", "jax[cpu]==0.7.2", "jax[cpu]==0.10.2"]
# What a cell installs beside its framework: Keras 3 for the JAX job (it
# comes with TensorFlow).
EXTRA = {"jax": ["keras>=3"]}


def job_of(cell):
    """The wheel_jobs job that a cell's requirement belongs to."""
    name = cell.split("==")[0].split("[")[0]
    return {"torch": "torch", "tensorflow-cpu": "tensorflow", "tensorflow": "tensorflow",
            "jax": "jax"}[name]


def run_cell(cell, wheel):
    job = job_of(cell)
    venv, scratch = WORK / "venv", WORK / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    record = {"cell": cell, "job": job}
    try:
        record["install_seconds"] = round(wheel_jobs.fresh_venv(
            venv, wheel, install_args=[cell, *EXTRA.get(job, [])]), 1)
        env = wheel_jobs.job_environment(venv, scratch / "cache", scratch / "bin")
        result, seconds = wheel_jobs.run_job(venv, env, job, scratch, timeout=600)
        record.update(
            job_seconds=round(seconds, 1), returncode=result.returncode,
            passed=[b for b in wheel_jobs.JOBS[job][0] if result.stdout.count(f"{b} OK") == 2],
            loaded=wheel_jobs.facts(result.stdout),
            compiled=[os.path.basename(p) for p in wheel_jobs.compiled_files(scratch / "cache")],
            installed=installed_versions(venv))
        record["ok"] = result.returncode == 0 and result.stdout.count("wheel job OK") == 2
        if not record["ok"]:
            record["error"] = (result.stdout + result.stderr)[-3000:]
    except Exception:  # noqa: BLE001 - a cell that cannot even start is reported, not fatal
        record.update(ok=False, error=traceback.format_exc()[-3000:])
    finally:
        shutil.rmtree(venv, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    return record


def installed_versions(venv):
    """{package: version} of the frameworks in the venv."""
    script = ("import importlib.metadata as m\nfor p in ('torch', 'tensorflow-cpu', 'tensorflow', "
              "'keras', 'jax', 'jaxlib', 'numpy'):\n    try: print(p, m.version(p))\n"
              "    except m.PackageNotFoundError: pass")
    output = wheel_jobs.run([venv / "bin" / "python", "-c", script], 60).stdout
    return dict(line.split() for line in output.splitlines())


def table(records, wheel):
    lines = [f"Wheel `{os.path.basename(wheel)}`, {datetime.date.today().isoformat()}, "
             "2 ranks, no compiler on PATH, empty HVDLITE_CACHE_DIR.", "",
             "| Cell | Installed | Bindings that passed | What was loaded | Compiled at first use "
             "| Result |", "|---|---|---|---|---|---|"]
    for r in records:
        installed = ", ".join(f"{k} {v}" for k, v in r.get("installed", {}).items() if k != "numpy")
        lines.append(f"| `{r['cell']}` | {installed or '-'} | {', '.join(r.get('passed', [])) or '-'} "
                     f"| {'; '.join(r.get('loaded', [])) or '-'} | "
                     f"{', '.join(r.get('compiled', [])) or 'nothing'} | "
                     f"{'pass' if r['ok'] else 'FAIL'} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", required=True)
    parser.add_argument("cells", nargs="*", default=DEFAULT_CELLS)
    args = parser.parse_args()
    wheel = os.path.abspath(args.wheel)
    WORK.mkdir(parents=True, exist_ok=True)
    # No pip cache (gigabytes of CUDA libraries per PyTorch release), and no
    # cap on releases from a pip configuration of the machine.
    os.environ.update(PIP_NO_CACHE_DIR="1", PIP_CONSTRAINT="/dev/null")
    records = []
    for cell in args.cells:
        print(f"== {cell}", flush=True)
        records.append(run_cell(cell, wheel))
        print(json.dumps({k: v for k, v in records[-1].items() if k != "error"}), flush=True)
        if not records[-1]["ok"]:
            print(records[-1]["error"], flush=True)
        (WORK / "results.json").write_text(json.dumps(records, indent=1))
        (WORK / "table.md").write_text(table(records, wheel) + "\n")
    print(table(records, wheel))
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
