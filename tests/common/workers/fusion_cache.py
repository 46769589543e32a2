"""Fusion and the response cache under load: hundreds of tensors in flight from
several threads, mixed dtypes and sizes; synchronous calls from several
threads (each runs cycles on its own thread while it waits) alongside
asynchronous ones; then the same names over many steps, with shapes that
change."""
import threading

import numpy as np

import hvdlite.numpy as hvd

DTYPES = [np.float32, np.float64, np.int32, np.float16]


def many_in_flight(rank, size, thread_id, errors):
    try:
        handles = []
        for i in range(150):
            dtype = DTYPES[i % len(DTYPES)]
            n = [1, 17, 1000, 4099][i % 4]
            x = np.full(n, rank + i, dtype=dtype)
            handles.append((hvd.allreduce_async(x, op=hvd.Sum, name=f"t{thread_id}.{i}"), i, n, dtype))
        for handle, i, n, dtype in handles:
            got = hvd.synchronize(handle)
            want = np.full(n, sum(r + i for r in range(size)), dtype=dtype)
            if not np.array_equal(got, want):
                raise AssertionError(f"t{thread_id}.{i}: got {got[:4]}, expected {want[:4]}")
    except Exception as error:  # reported by the main thread
        errors.append(error)


def sync_calls(rank, size, thread_id, errors):
    try:
        for i in range(100):
            x = np.full(5 + i % 3, rank * 10 + i, np.int64)
            got = hvd.allreduce(x, op=hvd.Sum, name=f"s{thread_id}.{i}")
            want = np.full(5 + i % 3, sum(r * 10 + i for r in range(size)), np.int64)
            if not np.array_equal(got, want):
                raise AssertionError(f"s{thread_id}.{i}: got {got}, expected {want}")
    except Exception as error:  # reported by the main thread
        errors.append(error)


def run_threads(targets, rank, size):
    errors = []
    threads = [threading.Thread(target=target, args=(rank, size, t, errors))
               for t, target in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    run_threads([many_in_flight] * 4, rank, size)
    run_threads([sync_calls] * 3 + [many_in_flight], rank, size)

    # Same names every step (response cache, groups included: Note [Cached
    # groups]), shapes change every 7 steps.
    for step in range(60):
        n = 3 + step // 7
        handles = [hvd.allreduce_async(np.full((n, 2), step + k + rank, np.float64), op=hvd.Sum,
                                       name=f"grad.{k}") for k in range(10)]
        group = hvd.grouped_allreduce_async(
            [np.full(k + n, step * k + rank, np.float32) for k in range(4)], op=hvd.Sum,
            name="group")
        for k, h in enumerate(handles):
            got = hvd.synchronize(h)
            want = np.full((n, 2), sum(step + k + r for r in range(size)), np.float64)
            assert np.array_equal(got, want), (step, k, got, want)
        for k, got in enumerate(hvd.synchronize(group)):
            want = np.full(k + n, sum(step * k + r for r in range(size)), np.float32)
            assert np.array_equal(got, want), (step, "group", k, got, want)
    print(f"rank {rank}: fusion and cache OK")
    hvd.shutdown()


if __name__ == "__main__":
    main()
