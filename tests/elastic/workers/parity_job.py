"""A short elastic job for tests/elastic/test_driver_horovod_parity.py.
Every rank trains --steps steps (an allreduce of ones each, committed) and
prints "placed <json>" (its HOROVOD_HOSTNAME, rank, local and cross layout)
in its first round and "final <json>" at the end.

    --grow-at-end FILE   after the last commit rank 0 adds --host to the
                         discovery file FILE, and every rank exits 0 --linger
                         seconds later: a round with a new worker is published
                         as training ends (Note [Training over] in
                         hvdlite/runner/elastic/driver.py)
"""
import argparse
import json
import os
import time

import numpy as np

import hvdlite.numpy as hvd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--grow-at-end")
    parser.add_argument("--host", default="127.0.0.3:1")
    parser.add_argument("--linger", type=float, default=2.0)
    args = parser.parse_args()

    hvd.init()
    print("placed " + json.dumps({
        "hostname": os.environ["HOROVOD_HOSTNAME"], "rank": hvd.rank(), "size": hvd.size(),
        "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
        "cross_size": hvd.cross_size()}), flush=True)
    state = hvd.elastic.ObjectState(step=0, total=0.0)

    @hvd.elastic.run
    def train(state):
        while state.step < args.steps:
            state.total += float(hvd.allreduce(np.ones(1), op=hvd.Sum, name="ones")[0])
            state.step += 1
            state.commit()

    train(state)
    if args.grow_at_end:
        if hvd.rank() == 0:
            with open(args.grow_at_end, "a") as hosts:
                hosts.write(args.host + "\n")
        time.sleep(args.linger)
    print("final " + json.dumps({"step": state.step, "total": state.total,
                                 "size": hvd.size()}), flush=True)


if __name__ == "__main__":
    main()
