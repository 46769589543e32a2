"""Two-level allreduce and allgather (Note [Two-level allreduce], Note
[Two-level allgather]) on fake hosts: argv[1] is the ranks per host; each
group of that many ranks calls itself one host (HVDLITE_HOSTNAME), so shared
memory joins a host's ranks and TCP the hosts. argv[2]: "auto" (the default
choice) or "flat" (HVDLITE_HIERARCHICAL_ALLREDUCE=0 and _ALLGATHER=0);
argv[3] "real": the ranks run on real hosts, PER_HOST each (hvdliterun -H).
Checks every dtype, odd sizes, every reduce op, a fused batch and a grouped
allreduce against NumPy, that every rank's result is bitwise the same,
allgathers of every dtype with uneven first dimensions, and which transport
each process set uses."""
import hashlib
import os
import sys

PER_HOST = int(sys.argv[1])
MODE = sys.argv[2]
RANK, SIZE = int(os.environ["HVDLITE_RANK"]), int(os.environ["HVDLITE_SIZE"])
if sys.argv[3:] != ["real"]:
    os.environ.update(HVDLITE_HOSTNAME=f"fakehost{RANK // PER_HOST}",
                      HVDLITE_LOCAL_RANK=str(RANK % PER_HOST))
if MODE == "flat":
    os.environ.update(HVDLITE_HIERARCHICAL_ALLREDUCE="0", HVDLITE_HIERARCHICAL_ALLGATHER="0")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import hvdlite.numpy as hvd  # noqa: E402
from hvdlite.common import basics  # noqa: E402

hvd.init()
HOSTS = (SIZE + PER_HOST - 1) // PER_HOST
core = basics.core()


def expect_transport(set_id, two_levels):
    described = core.process_set_transport(set_id)
    assert described.startswith("two levels") == two_levels, (set_id, described)
    if two_levels:
        assert described.startswith("two levels: allreduce and allgather by"), described
        assert f"inside each of {HOSTS if set_id == 0 else 2} hosts" in described, described


uniform = SIZE % PER_HOST == 0
expect_transport(0, MODE == "auto" and PER_HOST >= 2 and HOSTS >= 2 and uniform)

DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8, np.int16,
          np.uint16, np.int32, np.int64]
SIZES = [1, PER_HOST - 1 or 1, 3, 1001, 65537, (1 << 20) + 3, (3 << 20) + 5]  # the last: pipelined


def data(rank, count, dtype, salt):
    rng = np.random.default_rng(1000 * salt + rank)
    if np.dtype(dtype).kind == "f" or dtype is ml_dtypes.bfloat16:
        return rng.standard_normal(count).astype(dtype)
    return rng.integers(0, 5, count).astype(dtype)


def digest(array):
    return np.frombuffer(hashlib.sha256(array.tobytes()).digest()[:8], np.int64).copy()


def same_everywhere(result, what):
    digests = hvd.allgather(digest(result), name=f"digest.{what}")
    assert (digests == digests[0]).all(), f"{what}: ranks differ bitwise"


salt = 0
for dtype in DTYPES:
    for count in SIZES:
        if count > 65537 and dtype not in (np.float32, np.int32):
            continue  # the big size once per kind keeps the run short
        salt += 1
        ops = [hvd.Sum, hvd.Min, hvd.Max] + ([hvd.Average] if np.dtype(dtype).kind == "f" or
                                               dtype is ml_dtypes.bfloat16 else [])
        if count > 65537:
            ops = ops[:1] if dtype is np.float32 else ops[1:2]  # large: Sum, or Min (int32)
        for op in ops:
            what = f"{np.dtype(dtype).name}[{count}] op {op}"
            result = hvd.allreduce(data(RANK, count, dtype, salt), op=op, name=f"t.{salt}.{op}")
            assert result.dtype == np.dtype(dtype) and result.shape == (count,), what
            # Rank 0 checks against NumPy, every other rank that it has rank
            # 0's result bitwise: as thorough as each checking, without every
            # rank making every rank's inputs (6 ranks of 3 M values on 2 cores).
            if RANK == 0:
                stacked = np.stack([data(r, count, dtype, salt).astype(np.float64) for r in range(SIZE)])
                expected = {hvd.Sum: stacked.sum(0), hvd.Min: stacked.min(0), hvd.Max: stacked.max(0),
                            hvd.Average: stacked.mean(0)}[op]
                tolerance = {2: 0.05, 4: 1e-4, 8: 1e-10}[np.dtype(dtype).itemsize] * SIZE \
                    if np.dtype(dtype).kind == "f" or dtype is ml_dtypes.bfloat16 else 0
                np.testing.assert_allclose(result.astype(np.float64), expected, rtol=tolerance,
                                           atol=tolerance, err_msg=what)
            same_everywhere(result, what)

# A fused batch of odd sizes (async, then synchronize) and a grouped allreduce.
arrays = [data(RANK, n, np.float32, 7) for n in (5, 1, 333, 70001)]
handles = [hvd.allreduce_async(a, op=hvd.Sum, name=f"fused.{i}") for i, a in enumerate(arrays)]
fused = [hvd.synchronize(h) for h in handles]
grouped = hvd.grouped_allreduce(arrays, op=hvd.Sum, name="grouped")
for i, n in enumerate((5, 1, 333, 70001)):
    expected = sum(data(r, n, np.float32, 7).astype(np.float64) for r in range(SIZE))
    np.testing.assert_allclose(fused[i], expected, rtol=1e-4, atol=1e-4)
    # Not bitwise: how a batch is fused decides where shards split.
    np.testing.assert_allclose(grouped[i], expected, rtol=1e-4, atol=1e-4)
    same_everywhere(fused[i], f"fused.{i}")
    same_everywhere(grouped[i], f"grouped.{i}")


def check_allgather(rows, dtype, salt, process_set=hvd.global_process_set, members=None):
    """Each member's block has rows[i] rows (uneven, some empty) of 7 values;
    the result must be NumPy's concatenation, byte for byte."""
    members = list(range(SIZE)) if members is None else members
    blocks = [data(r, rows[i] * 7, dtype, salt).reshape(rows[i], 7) for i, r in enumerate(members)]
    got = hvd.allgather(blocks[members.index(RANK)], process_set=process_set,
                        name=f"gather.{salt}.{process_set.process_set_id}")
    expected = np.concatenate(blocks)
    what = f"allgather {np.dtype(dtype).name} rows {rows}"
    assert got.dtype == expected.dtype and got.shape == expected.shape, (what, got.shape)
    assert got.tobytes() == expected.tobytes(), what


# Allgathers small and large (several shared-memory slots), every dtype,
# uneven first dimensions with an empty block.
for dtype in DTYPES:
    for base in (2, 20000):
        salt += 1
        check_allgather([base + 37 * r if r != 1 else 0 for r in range(SIZE)], dtype, salt)
# Hosts' blocks over 4 MiB: pipelined (Note [Pipelined two levels]).
salt += 1
check_allgather([40000 + 1001 * r for r in range(SIZE)], np.float64, salt)

# A process set over the first two hosts: two levels again when each has
# several ranks; one rank per host: the flat ring.
if HOSTS >= 3 and uniform:
    members = list(range(2 * PER_HOST))
    pair_of_hosts = hvd.add_process_set(members)
    one_per_host = hvd.add_process_set(list(range(0, SIZE, PER_HOST)))
    if RANK in members:
        expect_transport(pair_of_hosts.process_set_id, MODE == "auto" and PER_HOST >= 2)
        x = data(RANK, 4099, np.float64, 9)
        got = hvd.allreduce(x, op=hvd.Sum, process_set=pair_of_hosts, name="pair")
        np.testing.assert_allclose(got, sum(data(r, 4099, np.float64, 9) for r in members),
                                   rtol=1e-12, atol=1e-12)
        check_allgather([7000 + 501 * i for i in range(len(members))], np.float32, 10,
                        pair_of_hosts, members)
    if RANK % PER_HOST == 0:
        expect_transport(one_per_host.process_set_id, False)
        got = hvd.allreduce(np.full(3, RANK, np.int64), op=hvd.Sum, process_set=one_per_host,
                            name="heads")
        np.testing.assert_array_equal(got, np.full(3, sum(range(0, SIZE, PER_HOST))))

hvd.allreduce(np.zeros(1), name="done")  # members of the sets finish before anyone shuts down
print(f"rank {RANK}: two-level {MODE} OK ({core.process_set_transport(0)})", flush=True)
hvd.shutdown()
