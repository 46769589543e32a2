"""Horovod's own elastic integration tests, unchanged, through the Horovod
alias: test/integration/test_elastic_torch.py and test_elastic_tensorflow2.py
(with elastic_common.py and data/elastic_*_main.py) run under pytest in a
process whose `horovod` is hvdlite, their `horovod.runner.launch._run_elastic`
being hvdliterun's elastic driver (Note [Horovod runner adapters] in
hvdlite/alias/runner/__init__.py).

Horovod's sources come from tests/horovod_sources.py (skipped, saying why,
where there are none). Every job of these files starts four workers that
import a framework, which takes minutes on CI's two cores: by default one
test of the torch file runs; HVDLITE_TEST_HOROVOD_SUITES=1 runs both files
whole (marker horovod_suites)."""
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from horovod_sources import alias_environment, extract, mock_shim  # noqa: E402

FILES = ["test/conftest.py", "test/utils/common.py", "test/integration/elastic_common.py",
         "test/integration/test_elastic_torch.py", "test/integration/test_elastic_tensorflow2.py",
         "test/integration/data/elastic_torch_main.py",
         "test/integration/data/elastic_tensorflow2_main.py"]
FULL_RUN = os.environ.get("HVDLITE_TEST_HOROVOD_SUITES") == "1"
# What Horovod's files themselves skip (issues #2030 and #2908 of Horovod).
SKIPPED_BY_HOROVOD = {
    "test_elastic_torch.py": {"test_all_hosts_blacklisted", "test_min_hosts_timeout",
                              "test_fault_tolerance_without_scaling", "test_single_rank_failure"},
    "test_elastic_tensorflow2.py": {"test_all_hosts_blacklisted", "test_min_hosts_timeout"},
}


@pytest.fixture(scope="module")
def horovod_tests(tmp_path_factory):
    tree = extract(FILES, tmp_path_factory.mktemp("horovod"))
    mock_shim(tree / "shim")
    (tree / "pytest.ini").write_text("[pytest]\n")  # not this repository's settings
    return tree


def run_horovod_pytest(tree, file, selection=None, timeout=600):
    """{test name: "passed" | "failed" | "skipped"} of Horovod's `file`
    (under test/integration), run by pytest through the alias."""
    report = tree / f"{file}.xml"
    command = [sys.executable, "-m", "pytest", "-c", str(tree / "pytest.ini"), "-p",
               "no:cacheprovider", "-q", f"--junitxml={report}",
               str(tree / "test" / "integration" / file)]
    if selection:
        command += ["-k", selection]
    done = subprocess.run(command, cwd=tree, env=alias_environment([tree / "shim"]),
                          capture_output=True, text=True, timeout=timeout)
    if not report.exists():
        raise AssertionError(f"pytest wrote no report:\n{done.stdout}\n{done.stderr}")
    outcomes = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        outcomes[case.get("name")] = ("failed" if kinds & {"failure", "error"} else
                                      "skipped" if "skipped" in kinds else "passed")
    return outcomes, done.stdout[-20000:] + done.stderr[-5000:]


def check(outcomes, wanted, output):
    if not outcomes or outcomes != wanted:
        lines = [f"{name}: {outcome} (expected {wanted.get(name)})"
                 for name, outcome in sorted(outcomes.items())]
        pytest.fail("Horovod's tests through the alias:\n" + "\n".join(lines) +
                    "\n--- their output (the end) ---\n" + output, pytrace=False)


def expected(file, outcomes):
    return {name: "skipped" if name in SKIPPED_BY_HOROVOD[file] else "passed"
            for name in outcomes}


@pytest.mark.timeout(300)
def test_horovods_torch_hosts_added_and_removed(horovod_tests):
    # Hosts `localhost` and `127.0.0.1` come and go: each is its own host
    # (HOROVOD_HOSTNAME is discovery's name), ranks and sizes as Horovod's.
    outcomes, output = run_horovod_pytest(horovod_tests, "test_elastic_torch.py",
                                          "test_hosts_added_and_removed", timeout=280)
    check(outcomes, {"test_hosts_added_and_removed": "passed"}, output)


@pytest.mark.horovod_suites
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not FULL_RUN, reason="several minutes of four-worker jobs: set "
                                         "HVDLITE_TEST_HOROVOD_SUITES=1 to run Horovod's "
                                         "elastic files whole")
@pytest.mark.parametrize("file", ["test_elastic_torch.py", "test_elastic_tensorflow2.py"])
def test_horovods_elastic_file_passes_whole(horovod_tests, file):
    if file.endswith("tensorflow2.py"):
        pytest.importorskip("tensorflow")
    outcomes, output = run_horovod_pytest(horovod_tests, file, timeout=1700)
    check(outcomes, expected(file, outcomes), output)
