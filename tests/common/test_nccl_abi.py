"""hvdlite's own declarations of NCCL (csrc/transport/nccl/nccl_api.h: no nccl.h at
build time) and its loader (nccl_library.cc) against a real NCCL: an
nvidia-nccl-cu12 or -cu13 wheel's include/nccl.h and lib/libnccl.so.2, which
load without a GPU. Skipped, saying why, where no such wheel is installed (a
CUDA build of PyTorch brings one; `make test` does not install it: over 300 MB).
Point HVDLITE_REAL_NCCL_DIR at a directory with include/nccl.h and
lib/libnccl.so.2 to use another NCCL. Passed against nvidia-nccl-cu13 2.28.9
on the GPU machine of tests/gpu/device_check.sh (bench/RESULTS.md)."""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "nccl_abi"


def _nccl_dir():
    if os.environ.get("HVDLITE_REAL_NCCL_DIR"):
        return Path(os.environ["HVDLITE_REAL_NCCL_DIR"])
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


NCCL = _nccl_dir()
HEADER = NCCL / "include" / "nccl.h" if NCCL else None
LIBRARY = NCCL / "lib" / "libnccl.so.2" if NCCL else None
pytestmark = pytest.mark.nccl_abi
NO_WHEEL = ("no real NCCL here: a CUDA build of PyTorch brings one (pip install nvidia-nccl-cu12 or -cu13 "
            "gives one too), "
            "or set HVDLITE_REAL_NCCL_DIR")


@pytest.mark.skipif(HEADER is None or not HEADER.exists(), reason=NO_WHEEL)
@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler")
def test_our_nccl_declarations_match_a_real_nccl_h(tmp_path):
    program = tmp_path / "check_nccl_abi"
    built = subprocess.run(["c++", "-std=c++17", f"-I{HERE / 'cuda_stubs'}", f"-I{HEADER.parent}",
                            f"-I{ROOT / 'csrc'}", str(HERE / "check_nccl_abi.cc"), "-o", str(program)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr  # a static_assert names the field or value
    ran = subprocess.run([str(program)], capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0 and "ABI OK" in ran.stdout, ran.stdout


LOAD_REAL_NCCL = """
import ctypes, json, sys
import hvdlite.common.basics as basics
path, names = sys.argv[1], sys.argv[2:]
lib = ctypes.CDLL(path)
version = ctypes.c_int()
status = lib.ncclGetVersion(ctypes.byref(version))
ours = basics.core().nccl_version({"HVDLITE_NCCL_LIBRARY": path})
print(json.dumps({"missing": [n for n in names if not hasattr(lib, n)], "status": status,
                  "version": version.value, "ours": ours}))
"""


@pytest.mark.skipif(LIBRARY is None or not LIBRARY.exists(), reason=NO_WHEEL)
def test_every_nccl_entry_point_our_loader_resolves_is_in_a_real_libnccl():
    source = (ROOT / "csrc" / "transport" / "nccl" / "nccl_library.cc").read_text()
    names = sorted(set(re.findall(r'\b(?:resolve\(n, |n\.symbol\()"(nccl\w+)"', source)))
    api = (ROOT / "csrc" / "transport" / "nccl" / "api.h").read_text()
    members = re.findall(r"\(\*(\w+)\)", api[api.index("struct NcclApi"):])
    assert sorted(f"nccl{m}" for m in members) == names, (members, names)  # every one is loaded
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDLITE_", "HOROVOD_"))}
    result = subprocess.run([sys.executable, "-c", LOAD_REAL_NCCL, str(LIBRARY), *names], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["missing"] == [], found
    assert found["status"] == 0 and found["version"] >= 21800, found
    assert found["ours"] == found["version"], found  # the core's loader reads the same version
