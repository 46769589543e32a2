"""The JAX CUDA handler's part that needs no XLA (csrc/jax/collective_call.cc,
through tests/jax/fake_gpu_call.cc) on the fake GPU: arrays written by
kernels still queued on "XLA's" stream, one call per kind, results read on
that stream right after the call returns (the race detector fails the rank
if they were not ordered after NCCL's writes), a rank whose output shape
disagrees inside jit fails the call on every rank with its message there,
and the job goes on. Prints "jax cuda fake OK"."""
import ctypes
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "common" / "workers"))
from hvdlite.common import basics, init  # noqa: E402
from hvdlite.common.ops import DataType, OpType, ReduceOp  # noqa: E402

init()
from fake_device import assert_no_races, cudart, device_array, new_stream, read_on, write_on  # noqa: E402

rank, size = basics.rank(), basics.size()
cudart.cudaSetDevice(rank)
XLA_STREAM = new_stream()
shim = ctypes.CDLL(os.environ["HVDLITE_TEST_JAX_CALL"])
shim.hvdlite_test_jax_call.argtypes = [
    ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
    ctypes.c_char_p, ctypes.c_int32, ctypes.c_double, ctypes.c_double, ctypes.c_int32, ctypes.c_void_p,
    ctypes.c_char_p, ctypes.c_size_t]


def call(op, names, inputs, outputs, output_rows=None, reduce_op=ReduceOp.Sum, prescale=1.0, postscale=1.0):
    """One custom call of `op` on these fake device arrays; (status, error)."""
    count = len(inputs)
    pointers = lambda arrays: (ctypes.c_void_p * count)(*[a.ctypes.data for a in arrays])  # noqa: E731
    rows = (ctypes.c_int64 * count)(*[a.size for a in inputs])
    out_rows = (ctypes.c_int64 * count)(*(output_rows or [a.size for a in outputs]))
    packed = "".join(f"{len(n)}:{n}" for n in names).encode()
    error = ctypes.create_string_buffer(1024)
    status = shim.hvdlite_test_jax_call(int(op), int(DataType.FLOAT32), 4, count, pointers(inputs),
                                        pointers(outputs), rows, out_rows, packed, int(reduce_op), prescale,
                                        postscale, rank, XLA_STREAM, error, len(error))
    return status, error.value.decode()


def written(n, value):
    array = device_array(n, np.float32)
    write_on(XLA_STREAM, array, value)  # the step's earlier kernel, still queued
    return array


def check_results_are_ordered_on_xlas_stream():
    sizes = [5, 1000, 33]
    grads = [written(n, rank + 1.0 + i) for i, n in enumerate(sizes)]
    status, error = call(OpType.ALLREDUCE, [f"grad.{i}" for i in range(3)], grads, grads,
                         prescale=0.5, postscale=3.0)
    assert status == 0, error
    total = sum(r + 1.0 for r in range(size))
    for i, g in enumerate(grads):  # the step's next kernels, queued once the call returned
        got = read_on(XLA_STREAM, g)
        assert np.allclose(got, 1.5 * (total + i * size)), (i, got[:3])
    rows = 4
    mine = written(rows, 10.0 * rank)
    gathered = device_array(rows * size, np.float32)
    status, error = call(OpType.ALLGATHER, ["gathered"], [mine], [gathered])
    assert status == 0, error
    got = read_on(XLA_STREAM, gathered)
    assert np.array_equal(got, np.repeat(10.0 * np.arange(size), rows)), got
    whole = written(2 * size, 2.0)
    share = device_array(2, np.float32)
    status, error = call(OpType.REDUCESCATTER, ["scattered"], [whole], [share])
    assert status == 0, error
    assert np.array_equal(read_on(XLA_STREAM, share), np.full(2, 2.0 * size)), share
    assert_no_races("results read on XLA's stream after the calls returned")


def check_a_disagreeing_shape_fails_the_call_everywhere():
    rows = 3 if rank == 0 else 2  # ragged, as if traced with other sizes
    mine = written(rows, 1.0)
    traced = 2 * size  # what this rank's trace fixed
    out = device_array(traced, np.float32)
    status, error = call(OpType.ALLGATHER, ["ragged"], [mine], [out])
    assert status != 0, "an allgather whose shape disagrees with the traced one succeeded"
    assert f"allgather of 'ragged' inside jax.jit: expected {traced} rows, got {traced + 1}" in error, error
    cudart.cudaStreamSynchronize(XLA_STREAM)
    after = written(8, 1.0)
    status, error = call(OpType.ALLREDUCE, ["after"], [after], [after])
    assert status == 0, error
    assert np.array_equal(read_on(XLA_STREAM, after), np.full(8, float(size))), "the job did not go on"


check_results_are_ordered_on_xlas_stream()
check_a_disagreeing_shape_fails_the_call_everywhere()
assert_no_races("the whole run")
basics.shutdown()
print("jax cuda fake OK", flush=True)
