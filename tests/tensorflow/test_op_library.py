"""The op library cache: built once per TensorFlow version + flags + sources,
reused by later processes, rebuilt when TensorFlow changes.

Each start of a probe imports TensorFlow (seconds of CPU), so a start does
several requests in a row where they need not be separate processes: the
first start plants a killed compile's leftover and then compiles; the second
checks that a later process reuses the library, then asks for a new
TensorFlow version; one more start tries both broken compilers."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")

# A stand-in compiler that records its calls and writes an empty "library",
# so the cache logic is tested without paying for a real compile.
FAKE_COMPILER = textwrap.dedent("""\
    #!/bin/sh
    echo "$@" >> "$HVDLITE_TEST_COMPILER_LOG"
    while [ $# -gt 1 ]; do
      if [ "$1" = "-o" ]; then : > "$2"; fi
      shift
    done
""")

# One start of a process that asks for the op library once per argument:
# "leftover" leaves a killed compile's temporary file where this TensorFlow's
# library will be built (and prints that file), "installed" asks for the
# library of the installed TensorFlow, any other argument for a TensorFlow of
# that version. Each request's stderr follows a line "-- request R --".
PROBE = textwrap.dedent("""\
    import sys
    from hvdlite.tensorflow import op_library
    for request in sys.argv[1:]:
        print(f"-- request {request} --", file=sys.stderr, flush=True)
        if request == "leftover":
            leftover = op_library.build_plan()["path"] + ".abc123.tmp"
            with open(leftover, "w") as half:
                half.write("half a library")
            print(leftover, flush=True)
        elif request == "installed":
            print(op_library.library_path(), flush=True)
        else:
            print(op_library.library_path(tf_version=request), flush=True)
""")


def _run(tmp_path, *requests):
    """Each request's stdout line, and its stderr, from one start of PROBE."""
    env = dict(os.environ, HVDLITE_CACHE_DIR=str(tmp_path / "cache"), CXX=str(tmp_path / "cxx"),
               HVDLITE_TEST_COMPILER_LOG=str(tmp_path / "calls.log"), TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run([sys.executable, "-c", PROBE, *requests], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    parts = re.split(r"^-- request (\S+) --\n", out.stderr, flags=re.MULTILINE)[1:]
    return out.stdout.split(), dict(zip(parts[::2], parts[1::2]))


def _links(tmp_path):
    """The link command of each completed build (one after its compiles)."""
    log = tmp_path / "calls.log"
    return [line for line in log.read_text().splitlines() if "-shared" in line] \
        if log.exists() else []


def test_cache_reused_and_rebuilt_for_new_tensorflow(tmp_path):
    compiler = tmp_path / "cxx"
    compiler.write_text(FAKE_COMPILER)
    compiler.chmod(0o755)
    (tmp_path / "cache" / "tensorflow").mkdir(parents=True)
    (leftover, first), stderr = _run(tmp_path, "leftover", "installed")
    assert leftover == first + ".abc123.tmp" and not os.path.exists(leftover), \
        "a killed compile's temporary file was kept"
    assert len(_links(tmp_path)) == 1 and os.path.exists(first)
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len([c for c in calls if " -c " in f" {c} "]) >= 2, "sources were not compiled one by one"
    assert "compiling the TensorFlow op library" in stderr["installed"]

    (second, upgraded), stderr = _run(tmp_path, "installed", "99.0.0")
    assert second == first and "compiling" not in stderr["installed"], "a second start recompiled"
    assert upgraded != first and "tf99.0.0" in upgraded
    links = _links(tmp_path)
    assert sum("tf99.0.0" not in link for link in links) == 1, f"a second start recompiled: {links}"
    assert sum("tf99.0.0" in link for link in links) == 1, \
        f"a new TensorFlow version did not trigger a rebuild: {links}"
    assert not [p for p in os.listdir(tmp_path / "cache" / "tensorflow") if p.endswith(".tmp")]


# Both broken compilers in one start (one TensorFlow import): each case sets
# its environment, asks for the library, and reports the error it raised
# (its message) and what is left in its cache folder, as one JSON line.
BROKEN_COMPILERS = textwrap.dedent("""\
    import json, os, sys
    from hvdlite.tensorflow import op_library
    for case, env in json.loads(sys.argv[1]).items():
        os.environ.update(env)
        try:
            report = {"case": case, "library": op_library.library_path()}
        except Exception as error:
            report = {"case": case, "error": f"{type(error).__name__}: {error}"}
        folder = os.path.join(env["HVDLITE_CACHE_DIR"], "tensorflow")
        report["left"] = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        print(json.dumps(report), flush=True)
""")


@pytest.fixture(scope="module")
def broken_compilers(tmp_path_factory):
    """{case: report} of BROKEN_COMPILERS for "missing" (no compiler on PATH
    and CXX empty) and "failing" (a compiler that fails on one source)."""
    root = tmp_path_factory.mktemp("broken-compilers")
    failing = root / "cxx"
    failing.write_text('#!/bin/sh\ncase "$*" in *collective_kernels*) echo "boom: no such header" '
                       '>&2; exit 3;; esac\n' + FAKE_COMPILER.split("\n", 1)[1])
    failing.chmod(0o755)
    cases = {"missing": {"HVDLITE_CACHE_DIR": str(root / "missing"), "CXX": "",
                         "PATH": str(root / "empty-path")},
             "failing": {"HVDLITE_CACHE_DIR": str(root / "failing"), "CXX": str(failing),
                         "PATH": os.environ.get("PATH", ""),
                         "HVDLITE_TEST_COMPILER_LOG": str(root / "calls.log")}}
    out = subprocess.run([sys.executable, "-c", BROKEN_COMPILERS, json.dumps(cases)],
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    reports = {report["case"]: report for report in map(json.loads, out.stdout.splitlines())}
    assert set(reports) == set(cases), out.stdout + out.stderr
    return reports


def test_missing_compiler_says_what_to_install(broken_compilers):
    report = broken_compilers["missing"]
    assert "error" in report, report
    assert "no C++ compiler was found" in report["error"], report
    assert "apt-get install g++" in report["error"], report


def test_compiler_error_names_the_failing_command(broken_compilers):
    report = broken_compilers["failing"]
    assert "error" in report, report
    assert "compiling hvdlite's TensorFlow ops" in report["error"] and "exit code 3" in report["error"]
    assert "collective_kernels" in report["error"] and "boom: no such header" in report["error"]
    assert not [p for p in report["left"] if not p.endswith(".lock")], report


@pytest.mark.tensorflow_ops
def test_op_library_reduces_every_dtype_it_registers(world):
    worker = os.path.join(os.path.dirname(__file__), "workers", "every_dtype.py")
    result = world(2, worker, timeout=300, env={"TF_CPP_MIN_LOG_LEVEL": "2"}).expect_ok()
    for rank in range(2):
        assert "every dtype OK" in result.lines(rank), result
