"""Every hvdlite op has a GPU kernel (csrc/tensorflow, Note [TF GPU kernels] in
device_placement.h), with HostMemory for exactly what the kernel reads or
writes on the host. Read from TensorFlow's kernel registry after loading the
compiled op library: tensorflow-cpu keeps GPU registrations there too, it
only never runs them. The GPU path itself has not run on a real GPU here."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("tensorflow")

# The op's GPU HostMemory arguments; every other argument stays on the GPU.
GPU_HOST_MEMORY = {
    "HvdliteAllreduce": set(),
    "HvdliteGroupedAllreduce": set(),
    "HvdliteAllgather": set(),
    "HvdliteGroupedAllgather": set(),
    "HvdliteBroadcast": set(),
    "HvdliteAlltoall": {"splits", "received_splits"},  # read and written on the host
    "HvdliteReducescatter": set(),
    "HvdliteGroupedReducescatter": set(),
    "HvdliteBarrier": set(),
    "HvdliteJoin": {"last_rank"},
    "HvdliteRank": {"rank"},
    "HvdliteSize": {"size"},
    "HvdliteLocalRank": {"local_rank"},
    "HvdliteLocalSize": {"local_size"},
}

PROBE = textwrap.dedent("""\
    import json
    from tensorflow.python.framework import kernels
    from hvdlite.tensorflow import op_library
    op_library.load()
    registry = {}
    for k in kernels.get_all_registered_kernels().kernel:
        if k.op.startswith("Hvdlite"):
            registry.setdefault(k.op, []).append(
                {"device": k.device_type, "host_memory": list(k.host_memory_arg)})
    print(json.dumps(registry))
""")


@pytest.fixture(scope="module")
def registry():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=1800, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.tensorflow_ops
def test_every_op_has_a_cpu_and_a_gpu_kernel(registry):
    assert set(registry) == set(GPU_HOST_MEMORY), (
        "the op library's ops and this test's list differ: give a new op its GPU kernel "
        "(with HostMemory for what it reads or writes on the host) and list it here")
    for op, registered in registry.items():
        devices = sorted(k["device"] for k in registered)
        assert devices == ["CPU", "GPU"], f"{op} is registered for {devices}"


@pytest.mark.tensorflow_ops
def test_gpu_kernels_keep_exactly_the_control_values_in_host_memory(registry):
    for op, registered in registry.items():
        gpu = next(k for k in registered if k["device"] == "GPU")
        assert set(gpu["host_memory"]) == GPU_HOST_MEMORY[op], op
        cpu = next(k for k in registered if k["device"] == "CPU")
        assert cpu["host_memory"] == [], f"{op}'s CPU kernel needs no HostMemory"
