"""What each synchronous collective of hvdlite.torch costs the caller, in
one process (no peer to wait for): the public call, which goes to the core in
one call (Note [Torch collectives in one call] in
csrc/python/torch_one_call.cc), against the general path it falls back to
(the *_async function and synchronize, or _core.run for allreduce).

    python bench/torch_one_call.py [--calls 2000] [--rounds 15]

Prints the minimum over rounds of the time per call: on a shared machine the
minimum is the figure other processes disturb least.
"""

import torch

import hvdlite.torch as hvd
from hvdlite.torch import collectives
from timing import best_per_call_us, calls_and_rounds


def cases(x, group):
    """label -> (public call, the general path's call)."""
    every = hvd.global_process_set
    return {
        "allreduce_": (lambda: hvd.allreduce_(x, name="a", op=hvd.Sum),
                       lambda: collectives._allreduce_now(x, True, None, "a", hvd.Sum, 1.0, 1.0, every)),
        "allreduce": (lambda: hvd.allreduce(x, name="b", op=hvd.Sum),
                      lambda: collectives._allreduce_now(x, False, None, "b", hvd.Sum, 1.0, 1.0, every)),
        "broadcast_": (lambda: hvd.broadcast_(x, 0, name="c"),
                       lambda: hvd.synchronize(hvd.broadcast_async_(x, 0, name="c"))),
        "broadcast": (lambda: hvd.broadcast(x, 0, name="d"),
                      lambda: hvd.synchronize(hvd.broadcast_async(x, 0, name="d"))),
        "allgather": (lambda: hvd.allgather(x, name="e"),
                      lambda: hvd.synchronize(hvd.allgather_async(x, name="e"))),
        f"grouped_allreduce_ of {len(group)}": (
            lambda: hvd.grouped_allreduce_(group, name="f", op=hvd.Sum),
            lambda: hvd.synchronize(hvd.grouped_allreduce_async_(group, name="f", op=hvd.Sum))),
    }


def main():
    args = calls_and_rounds(__doc__, 2000, 15)
    hvd.init()
    x = torch.ones(1)  # 4 bytes
    print("| 4-byte CPU tensor, one process | one call (us) | general path (us) |")
    print("| --- | --- | --- |")
    for label, (public, general) in cases(x, [torch.ones(1) for _ in range(4)]).items():
        print(f"| `{label}` | {best_per_call_us(public, args.calls, args.rounds):.2f} | "
              f"{best_per_call_us(general, args.calls, args.rounds):.2f} |", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
