"""Every script a `make bench-*` target runs loads in a venv that has only
what `make demo` and `make bench-deps` install: no pytest (bench/multihost_net.py
builds its hosts with tests/runner/namespaces.py, which must not need it)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
# What only `make venv-test` installs; a benchmark must run without it.
TEST_ONLY = ("pytest", "pytest_timeout", "xdist")


def bench_target_scripts():
    """The bench/*.py files the Makefile's bench targets run."""
    makefile = (REPO / "Makefile").read_text()
    scripts = sorted(set(re.findall(r"^\t\$\(PY\) bench/(\w+)\.py", makefile, re.MULTILINE)))
    assert scripts, "found no `$(PY) bench/<script>.py` line in the Makefile"
    return scripts


def import_without_test_packages(module):
    """Imports bench/<module>.py as `python bench/<module>.py` would find its
    imports (bench/ first on sys.path), with the test-only packages made
    unimportable. Returns the finished process."""
    code = (f"import sys\n"
            f"for name in {TEST_ONLY!r}:\n"
            f"    sys.modules[name] = None  # import raises ImportError\n"
            f"sys.path.insert(0, {str(BENCH)!r})\n"
            f"import {module}\n")
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_the_blocker_blocks():
    done = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['pytest'] = None; import pytest"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr, done.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", bench_target_scripts())
def test_a_bench_target_script_loads_without_pytest(script):
    done = import_without_test_packages(script)
    assert done.returncode == 0, (f"bench/{script}.py (a `make bench-*` target) cannot load "
                                  f"without the test packages:\n{done.stderr}")
