"""hvdlite.jax's CUDA handler without a GPU: what it runs once XLA has handed
over the buffers (csrc/jax/collective_call.cc) on the fake CUDA runtime and
NCCL (tests/common/fake_gpu, race detection on), and the lowering of every
collective to the custom call for the CUDA platform (cross-platform lowering
on this CPU-only jaxlib). The XLA decoding of the stream and device ordinal
runs only on a real GPU (tests/gpu/device_check.sh, case jax_step)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "common" / "fake_gpu"))
import fake_gpu_build as fake_gpu  # noqa: E402

pytest.importorskip("jax")
CXX = shutil.which("c++") or shutil.which("g++")


@pytest.fixture(scope="module")
def fake_env(tmp_path_factory):
    if fake_gpu.compiler() is None or CXX is None:
        pytest.skip("no C/C++ compiler to build the fake GPU and the handler's test door")
    from hvdlite.common import compiled_library
    out = tmp_path_factory.mktemp("jax_cuda_fake")
    package = compiled_library.package_dir()
    shim = out / "libjax_call.so"
    subprocess.run([CXX, "-shared", "-fPIC", "-O1", "-std=c++17", f"-I{package}/include",
                    str(HERE / "fake_gpu_call.cc"), f"{package}/include/jax/collective_call.cc",
                    "-o", str(shim), f"{package}/libhvdlite.so", f"-Wl,-rpath,{package}"],
                   check=True, capture_output=True, text=True)
    return {"HVDLITE_NCCL_LIBRARY": str(fake_gpu.build(out, "fake_nccl.c", "libnccl.so.2", "libnccl.so.2")),
            "HVDLITE_CUDART_LIBRARY": str(fake_gpu.build_cudart(out, 12040)),
            "FAKE_CUDA_RACE_CHECK": "1", "HVDLITE_TEST_JAX_CALL": str(shim)}


@pytest.mark.parametrize("np_", [2, 3])
def test_the_cuda_handlers_requests_are_ordered_on_xlas_stream(world, fake_env, np_):
    result = world(np_, HERE / "workers" / "jax_cuda_fake.py", timeout=90, env=fake_env)
    print(result)
    result.expect_ok().expect_line("jax cuda fake OK", range(np_))


LOWERING_PROBE = """
import jax, jax.numpy as jnp
import hvdlite.jax as hvd
from hvdlite.jax import ffi
hvd.init()
def step(x):
    return (hvd.allreduce(x, name="g"), hvd.allgather(x, name="a"), hvd.broadcast(x, 0, name="b"),
            hvd.reducescatter(x, name="r"), hvd.alltoall(x, name="t")[0],
            hvd.grouped_allreduce([x, x * 2], name="gg"))
def lowered(platform):  # traced afresh each time (jit caches traces per function)
    return jax.jit(lambda x: step(x)).trace(jnp.ones((4, 3))).lower(lowering_platforms=(platform,)).as_text()
text = lowered("cpu")
print("cpu", text.count("custom_call @hvdlite_collective"), text.count("has_side_effect = true"))
try:  # a step traced for the CPU (the default backend here) is not lowered for CUDA
    lowered("cuda")
    print("refused no")
except Exception as error:
    print("refused", "traced for cpu" in str(error))
ffi._traced_for_cpu = lambda: False  # as where CUDA is the default backend
text = lowered("cuda")
print("cuda", text.count("custom_call @hvdlite_collective"), text.count("has_side_effect = true"))
hvd.shutdown()
"""


def test_every_collective_lowers_to_the_custom_call_for_cuda_too():
    out = subprocess.run([sys.executable, "-c", LOWERING_PROBE], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr
    counts = dict((line.split()[0], line.split()[1:]) for line in out.stdout.splitlines())
    assert counts["cpu"] == ["6", "6"] and counts["cuda"] == ["6", "6"], out.stdout
    assert counts["refused"] == ["True"], out.stdout
