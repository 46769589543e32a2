"""A fixed number of 4-byte synchronous allreduce_ calls (hvdlite.numpy or
hvdlite.torch), for counting instructions per call on a machine too loaded for
wall time: run it twice under callgrind, with N1 and N2 measured calls after
the same warm-up, and divide the difference by N2 - N1.

    # one process: the binding and the caller's path, no peer to wait for
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file=OUT1 \\
        python bench/call_profile.py torch 500 5000     # and OUT2 with 25000
    # 2 ranks, rank 0 under callgrind (bench/step_profile.sh); its waits for the
    # unslowed peer are inflated, so read the transport's waits apart
    # (shm::Progress::waitAll); on a loaded machine rank 0 may reach init()
    # after rank 1's 30 s start timeout: raise it
    HVDLITE_START_TIMEOUT=600 hvdliterun -np 2 bench/step_profile.sh OUT \
        python bench/call_profile.py numpy 500 1000

OUT*-01 is the Python thread. `callgrind_annotate --inclusive=yes` on each,
subtracted function by function, says where a call's instructions go (the
core's one-call entry, Session::submit, Session::wait and the cycle in it).
"""
import argparse


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("binding", choices=("numpy", "torch"))
    parser.add_argument("warmup", type=int)
    parser.add_argument("calls", type=int)
    args = parser.parse_args()
    if args.binding == "torch":
        import torch

        import hvdlite.torch as hvd
        torch.set_num_threads(1)
        x = torch.ones(1)
    else:
        import numpy as np

        import hvdlite.numpy as hvd
        x = np.ones(1, np.float32)
    hvd.init()
    allreduce_, op = hvd.allreduce_, hvd.Sum
    for _ in range(args.warmup):
        allreduce_(x, op=op, name="call")
    hvd.barrier()
    for _ in range(args.calls):
        allreduce_(x, op=op, name="call")
    hvd.barrier()
    hvd.shutdown()


if __name__ == "__main__":
    main()
