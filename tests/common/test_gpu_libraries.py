"""Loading NCCL and the CUDA runtime at run time (csrc/transport/nccl/,
hvdlite/common/gpu_libraries.py), on a machine without a GPU: where the core
looks, nccl_built(), and the error a CUDA tensor gets when NCCL is missing.
Each core check runs in a fresh process, since a library once loaded stays
loaded (and would be found again as "already loaded")."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hvdlite.common import gpu_library_search as gpu_libraries

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "fake_gpu"))
import fake_gpu_build as fake_gpu  # noqa: E402

needs_cc = pytest.mark.skipif(fake_gpu.compiler() is None, reason="no C compiler to build fake libraries")


def _in_fresh_process(code, env):
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("HVDLITE_", "HOROVOD_")) and k != "LD_LIBRARY_PATH"}
    full.update(env)
    result = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


NCCL_BUILT = "import json, hvdlite.common.basics as b; print(json.dumps(b.nccl_built()))"

# A CUDA "tensor" at world size 1: the core never touches the memory before
# NCCL has loaded, so a host buffer's address serves.
CUDA_ALLREDUCE = """
import json
import numpy as np
import hvdlite.common.basics as b
from hvdlite.common import init
from hvdlite.common.exceptions import HvdliteInternalError
init()
x = np.ones(4, np.float32)
try:
    b.core().enqueue(op=0, name="grad", input=x.ctypes.data, output=x.ctypes.data, dtype=6,
                     shape=[4], device=0)
    print(json.dumps("no error"))
except HvdliteInternalError as e:
    print(json.dumps(str(e)))
b.shutdown()
"""


def test_search_dirs_order_wheel_then_torch_then_nvidia_next_to_torch(tmp_path):
    site = tmp_path / "site"
    for sub in ("nvidia/nccl/lib", "nvidia/cu13/lib", "nvidia/cuda_runtime/lib", "nvidia/cublas/lib",
                "torch/lib"):
        (site / sub).mkdir(parents=True)
    other = tmp_path / "other"
    (other / "nvidia/nccl/lib").mkdir(parents=True)
    dirs = gpu_libraries.search_dirs([str(site), str(other), str(tmp_path / "missing")],
                                     torch_dir=str(site / "torch"))
    # CUDA 13's wheels keep the runtime in nvidia/cu13/lib, CUDA 12's in
    # nvidia/cuda_runtime/lib; NCCL is nvidia/nccl/lib for both.
    assert dirs == [str(site / "nvidia/nccl/lib"), str(site / "nvidia/cu13/lib"),
                    str(site / "nvidia/cuda_runtime/lib"),
                    str(other / "nvidia/nccl/lib"), str(site / "torch/lib"),
                    str(site / "nvidia/cublas/lib")]


def test_library_path_puts_the_users_directories_first(tmp_path):
    (tmp_path / "nvidia/nccl/lib").mkdir(parents=True)
    env = {"HVDLITE_GPU_LIBRARY_PATH": "/opt/mine:/opt/also"}
    path = gpu_libraries.library_path(env, python_path=[str(tmp_path)], torch_dir="")
    assert path.split(os.pathsep) == ["/opt/mine", "/opt/also", str(tmp_path / "nvidia/nccl/lib")]
    horovod = gpu_libraries.library_path({"HOROVOD_GPU_LIBRARY_PATH": "/h"}, python_path=[],
                                         torch_dir="")
    assert horovod == "/h"


# Whether a libnccl.so.2 with ncclGetVersion loads from where the core looks
# (the search path hvdlite.common.gpu_libraries builds, then the system's).
NCCL_FINDABLE = """
import ctypes, json, os
from hvdlite.common import gpu_library_search as gpu_libraries
candidates = [os.path.join(d, "libnccl.so.2") for d in gpu_libraries.library_path({}).split(os.pathsep) if d]
found = False
for candidate in candidates + ["libnccl.so.2"]:
    try:
        library = ctypes.CDLL(candidate)
    except OSError:
        continue
    found = hasattr(library, "ncclGetVersion")
    break
print(json.dumps(found))
"""


def test_nccl_built_is_the_version_exactly_when_an_nccl_is_findable():
    findable = _in_fresh_process(NCCL_FINDABLE, {})
    version = _in_fresh_process(NCCL_BUILT, {})
    if findable:
        assert version > 0, "an NCCL library loads here, but nccl_built() says 0"
    else:
        assert version == 0, f"no NCCL library loads here, but nccl_built() says {version}"


def test_nccl_built_is_zero_when_the_named_library_does_not_exist(tmp_path):
    assert _in_fresh_process(NCCL_BUILT, {"HVDLITE_NCCL_LIBRARY": str(tmp_path / "nope.so")}) == 0


@needs_cc
def test_nccl_built_reads_the_version_through_dlopen_and_dlsym(tmp_path):
    fake = fake_gpu.build(tmp_path, "fake_nccl.c", "libfake_nccl.so", "libfake_nccl.so",
                          defines=["FAKE_NCCL_VERSION=21903"])
    assert _in_fresh_process(NCCL_BUILT, {"HVDLITE_NCCL_LIBRARY": str(fake)}) == 21903
    # Horovod's variable name works too.
    assert _in_fresh_process(NCCL_BUILT, {"HOROVOD_NCCL_LIBRARY": str(fake)}) == 21903


@needs_cc
def test_nccl_is_found_in_a_directory_of_the_search_path(tmp_path):
    fake_gpu.build(tmp_path, "fake_nccl.c", "libnccl.so.2", "libnccl.so.2",
                   defines=["FAKE_NCCL_VERSION=22105"])
    env = {"HVDLITE_GPU_LIBRARY_PATH": f"{tmp_path / 'empty'}:{tmp_path}"}
    assert _in_fresh_process(NCCL_BUILT, env) == 22105


@needs_cc
def test_a_library_without_nccl_get_version_counts_as_no_nccl(tmp_path):
    empty = fake_gpu.build_empty(tmp_path, "libempty.so", "libempty.so")
    assert _in_fresh_process(NCCL_BUILT, {"HVDLITE_NCCL_LIBRARY": str(empty)}) == 0


@needs_cc
def test_a_cuda_tensor_without_nccl_fails_naming_the_file_and_what_to_install(tmp_path):
    missing = tmp_path / "libnccl.so.2"
    message = _in_fresh_process(CUDA_ALLREDUCE, {"HVDLITE_NCCL_LIBRARY": str(missing),
                                                 "HVDLITE_CUDART_LIBRARY": str(fake_gpu.build_cudart(tmp_path))})
    assert "allreduce of 'grad': the tensor is on GPU 0 (rank 0)" in message
    assert "NCCL (libnccl.so.2) could not be loaded" in message
    assert str(missing) in message
    assert "pip install nvidia-nccl-cu12" in message and "nvidia-nccl-cu13" in message
    assert "HVDLITE_NCCL_LIBRARY" in message and "HVDLITE_GPU_OPERATIONS=host" in message


@needs_cc
def test_a_cuda_tensor_without_the_cuda_runtime_fails_naming_it(tmp_path):
    fake = fake_gpu.build(tmp_path, "fake_nccl.c", "libnccl.so.2", "libnccl.so.2")
    missing = tmp_path / "libcudart.so.12"
    message = _in_fresh_process(CUDA_ALLREDUCE, {"HVDLITE_NCCL_LIBRARY": str(fake),
                                                 "HVDLITE_CUDART_LIBRARY": str(missing)})
    assert "the CUDA runtime (libcudart.so.13 or libcudart.so.12) could not be loaded" in message
    assert str(missing) in message
    assert "pip install nvidia-cuda-runtime-cu12" in message


GPU_LIBRARIES = """
import ctypes, json, os, sys
for path in sys.argv[1:]:  # loaded first, as a framework would have
    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
import hvdlite.common.basics as b
print(json.dumps(b.gpu_libraries()))
"""


def _gpu_libraries(env, preload=()):
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("HVDLITE_", "HOROVOD_")) and k != "LD_LIBRARY_PATH"}
    full.update(env)
    result = subprocess.run([sys.executable, "-c", GPU_LIBRARIES, *map(str, preload)], env=full,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@needs_cc
def test_cuda_13_is_preferred_in_a_folder_that_has_both_generations(tmp_path):
    """Note [GPU library search]: newest first where the framework loaded none."""
    folder = tmp_path / "lib"
    folder.mkdir()
    for version in (12080, 13000):
        built = fake_gpu.build_cudart(tmp_path, version)
        (folder / built.name).symlink_to(built)
    fake_gpu.build(folder, "fake_nccl.c", "libnccl.so.2", "libnccl.so.2")
    found = _gpu_libraries({"HVDLITE_GPU_LIBRARY_PATH": str(folder)})
    assert found["cuda_runtime"].endswith("libcudart.so.13") and found["cuda_runtime_version"] == 13000, found
    assert found["batched_copies"] and found["nccl_version"] > 0 and found["error"] is None, found
    assert found["gpu_operations"] == "nccl", found
    off = _gpu_libraries({"HVDLITE_GPU_LIBRARY_PATH": str(folder), "HVDLITE_BATCHED_COPIES": "0"})
    assert off["batched_copies"] is False, off


@needs_cc
def test_the_runtime_a_framework_already_loaded_wins(tmp_path):
    folder = tmp_path / "lib"
    folder.mkdir()
    builds = {v: fake_gpu.build_cudart(tmp_path, v) for v in (12080, 13000)}
    for built in builds.values():
        (folder / built.name).symlink_to(built)
    found = _gpu_libraries({"HVDLITE_GPU_LIBRARY_PATH": str(folder)}, preload=[builds[12080]])
    assert found["cuda_runtime_version"] == 12080, found
    assert found["cuda_runtime"] == str(builds[12080]), found


@needs_cc
def test_a_cuda_13_runtime_too_new_for_the_driver_gives_way_to_cuda_12(tmp_path):
    folder = tmp_path / "lib"
    folder.mkdir()
    old_driver = ["FAKE_CUDA_DRIVER_VERSION=12090"]
    for version in (12080, 13000):
        built = fake_gpu.build_cudart(tmp_path, version, defines=old_driver)
        (folder / built.name).symlink_to(built)
    found = _gpu_libraries({"HVDLITE_GPU_LIBRARY_PATH": str(folder), "HVDLITE_GPU_OPERATIONS": "host"})
    assert found["cuda_runtime_version"] == 12080 and found["cuda_driver_version"] == 12090, found
    assert found["nccl"] is None and found["gpu_operations"] == "host", found  # host: NCCL not needed
    only_13 = tmp_path / "only13"
    only_13.mkdir()
    (only_13 / "libcudart.so.13").symlink_to(folder / "libcudart.so.13")
    found = _gpu_libraries({"HVDLITE_GPU_LIBRARY_PATH": str(only_13), "HVDLITE_GPU_OPERATIONS": "host",
                            "HVDLITE_CUDART_LIBRARY": str(only_13 / "libcudart.so.13")})
    assert "CUDA 13.0 runtime, but the NVIDIA driver supports CUDA 12.9 at most" in found["error"], found


def test_a_bad_gpu_operations_value_is_refused_naming_the_variable():
    code = "import hvdlite.common.basics as b; b.gpu_libraries()"
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HVDLITE_", "HOROVOD_"))}
    full["HOROVOD_GPU_OPERATIONS"] = "DDL"
    result = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "HOROVOD_GPU_OPERATIONS / HOROVOD_GPU_ALLREDUCE)='DDL' is not a valid value" in result.stderr


@needs_cc
def test_an_nccl_that_is_too_old_is_refused_with_its_version(tmp_path):
    nccl = fake_gpu.build(tmp_path, "fake_nccl.c", "libnccl.so.2", "libnccl.so.2",
                          defines=["FAKE_NCCL_VERSION=2708"])
    cudart = fake_gpu.build(tmp_path, "fake_cudart.c", "libcudart.so.12", "libcudart.so.12")
    message = _in_fresh_process(CUDA_ALLREDUCE, {"HVDLITE_NCCL_LIBRARY": str(nccl),
                                                 "HVDLITE_CUDART_LIBRARY": str(cudart)})
    assert "(version 2708) is too old" in message
    assert "NCCL 2.11 or newer" in message


def test_without_nccl_cpu_tensors_still_work():
    code = """
import json, numpy as np
import hvdlite.numpy as hvd
hvd.init()
print(json.dumps(hvd.allreduce(np.arange(4.0), op=hvd.Sum).tolist()))
hvd.shutdown()
"""
    assert _in_fresh_process(code, {"HVDLITE_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"}) == \
        [0.0, 1.0, 2.0, 3.0]


def _fake_gpu_env(tmp_path):
    return {"HVDLITE_NCCL_LIBRARY": str(fake_gpu.build(tmp_path, "fake_nccl.c", "libnccl.so.2",
                                                       "libnccl.so.2")),
            "HVDLITE_CUDART_LIBRARY": str(fake_gpu.build(tmp_path, "fake_cudart.c",
                                                         "libcudart.so.12", "libcudart.so.12"))}


@needs_cc
@pytest.mark.parametrize("np_", [1, 2, 3])
def test_every_collective_runs_the_cuda_path_over_fake_cuda_and_nccl(tmp_path, world, np_):
    """Compared with CPU tensors on every rank; see workers/cuda_fake_gpu.py."""
    result = world(np_, HERE / "workers" / "cuda_fake_gpu.py", timeout=120,
                   env=_fake_gpu_env(tmp_path)).expect_ok()
    assert all("cuda path OK" in "".join(result.lines(r)) for r in range(np_)), result


@needs_cc
def test_a_cuda_runtime_that_sees_no_gpu_is_reported_before_anything_runs(tmp_path):
    nccl = fake_gpu.build(tmp_path, "fake_nccl.c", "libnccl.so.2", "libnccl.so.2")
    cudart = fake_gpu.build(tmp_path, "fake_cudart.c", "libcudart.so.12", "libcudart.so.12",
                            defines=["FAKE_CUDA_DEVICES=0"])
    message = _in_fresh_process(CUDA_ALLREDUCE, {"HVDLITE_NCCL_LIBRARY": str(nccl),
                                                 "HVDLITE_CUDART_LIBRARY": str(cudart)})
    assert f"the CUDA runtime {cudart} finds no usable GPU: no device" in message
    assert "CUDA_VISIBLE_DEVICES" in message


@needs_cc
def test_a_cuda_and_a_cpu_tensor_of_one_name_fail_as_a_mismatch(tmp_path, world):
    result = world(2, HERE / "workers" / "cuda_cpu_mismatch.py", timeout=90,
                   env=_fake_gpu_env(tmp_path)).expect_ok()
    assert all("device mismatch OK" in "".join(result.lines(r)) for r in range(2)), result
