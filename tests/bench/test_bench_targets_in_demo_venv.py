"""Every `make bench*` target works from a fresh clone after `make demo`
alone (issue 49, item 5): each target's recipe runs in a venv that has only
what `make demo` installs (tests/bench/demo_venv.py) plus what the recipe's
own set-up installs, never pytest or the other test-only packages:

- its set-up lines (`pip install ...`, `python -c "import matplotlib" || ...`)
  run as `make -n` prints them, pip told to use no index where the test venv
  could lend every package they name (so nothing downloads);
- every bench/ script its benchmark names (the workers it starts, the
  plots it draws) imports there, and the benchmark runs with --help (the
  benchmarks themselves take minutes, and the multi-host ones root).
Only the hvdlite build step (`pip install -e .`) is left out: the venv lends
the working tree's editable install instead."""
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

import demo_venv

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
MAKEFILE = (REPO / "Makefile").read_text()
TEST_ONLY = ("pytest", "xdist", "pytest_timeout", "tensorflow", "jax")


def bench_targets():
    targets = sorted(set(re.findall(r"^(bench(?:-[\w-]+)?):", MAKEFILE, re.MULTILINE)))
    assert "bench" in targets and "bench-multihost" in targets, targets
    return targets


def recipe(target, venv):
    """The commands `make target` would run with VENV=venv (its stamp says the
    demo's set-up is done), as make prints them."""
    done = subprocess.run(["make", "-s", "-n", "-C", str(REPO), target, f"VENV={venv}"],
                          capture_output=True, text=True, timeout=60, check=True)
    # make prints a command continued over lines (a trailing backslash) as
    # written: one command per joined line.
    joined = re.sub(r"\\\n\s*", " ", done.stdout)
    return [line for line in joined.splitlines() if line.strip()]


def split(commands):
    """(set-up commands, benchmark scripts' paths) of a recipe; the hvdlite
    build (`pip install ... -e .`) is neither."""
    setup, scripts = [], []
    for command in commands:
        script = re.match(r"^\S+/bin/python (bench/\w+\.py)\b", command)
        if script:
            scripts.append(REPO / script.group(1))
        elif not re.search(r"pip install .*-e \.\s*$", command):
            setup.append(command)
    return setup, scripts


def setup_requirements(commands):
    return sorted({req for command in commands for req in demo_venv.installed_by(command)})


def named_scripts(script):
    """The bench/ modules `script` imports or names ("worker.py"),
    transitively, itself included."""
    found, todo = [], [script.stem]
    while todo:
        name = todo.pop()
        if name in found or not (BENCH / f"{name}.py").exists():
            continue
        found.append(name)
        text = (BENCH / f"{name}.py").read_text()
        todo += re.findall(r"\b(\w+)\.py\b", text)
        todo += re.findall(r"^\s*(?:from|import) (\w+)", text, re.MULTILINE)
    return found


class Venvs:
    """The session's venvs, one per set of set-up requirements, built once."""

    def __init__(self, root):
        self.root = root

    @functools.cache
    def get(self, requirements):
        venv = self.root / f"demo-{len(list(self.root.iterdir()))}"
        missing = demo_venv.build(venv, MAKEFILE, requirements)
        return venv, missing

    @functools.cache
    def run_once(self, venv, command, offline):
        """A set-up command several targets share runs once per venv."""
        return run_in(venv, command, offline=offline)


@pytest.fixture(scope="module")
def venvs(tmp_path_factory):
    return Venvs(tmp_path_factory.mktemp("demo-venvs"))


def run_in(venv, command, *, offline=True):
    env = demo_venv.environment(venv)
    if offline:
        env["PIP_NO_INDEX"] = "1"
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, shell=isinstance(command, str))


def test_the_demo_venv_has_the_demo_and_no_test_package(venvs):
    venv, missing = venvs.get(())
    assert missing == [], missing
    probe = ("import importlib.util, hvdlite, torch, sklearn\n"
             f"print(hvdlite.__file__)\n"
             f"print([m for m in {TEST_ONLY!r} if importlib.util.find_spec(m)])\n")
    done = run_in(venv, [str(venv / "bin" / "python"), "-c", probe])
    assert done.returncode == 0, done.stderr
    where, test_only = done.stdout.splitlines()
    assert Path(where).is_relative_to(REPO), where  # the working tree's hvdlite
    assert test_only == "[]", test_only


@pytest.mark.timeout(600)
@pytest.mark.parametrize("target", bench_targets())
def test_a_bench_target_sets_up_and_starts_in_the_demo_venv(venvs, target):
    demo, _ = venvs.get(())
    setup, _ = split(recipe(target, demo))
    venv, missing = venvs.get(tuple(setup_requirements(setup)))
    python = venv / "bin" / "python"
    setup, scripts = split(recipe(target, venv))
    for command in setup:
        done = venvs.run_once(venv, command, offline=not missing)
        assert done.returncode == 0, (f"`make {target}`'s set-up `{command}` failed in a venv "
                                      f"of `make demo`'s packages:\n{done.stdout}{done.stderr}")
    for script in scripts:
        # One process: import every script it names, then run it with --help.
        modules = named_scripts(script)
        code = (f"import runpy, sys\nsys.path.insert(0, {str(BENCH)!r})\n"
                + "".join(f"import {name}\n" for name in modules)
                + f"sys.argv = [{str(script)!r}, '--help']\n"
                + f"runpy.run_path({str(script)!r}, run_name='__main__')\n")
        done = run_in(venv, [str(python), "-c", code])
        assert done.returncode == 0 and "usage:" in done.stdout, (
            f"`make {target}` runs {script.name}, which (or a script of {modules} it uses) does "
            f"not start in a venv of `make demo`'s packages and its own set-up:\n"
            f"{done.stdout}{done.stderr}")
