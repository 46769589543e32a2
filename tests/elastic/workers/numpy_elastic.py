"""Elastic gradient descent on NumPy state (hvdlite.numpy.elastic.ObjectState).

Every rank holds the same weights; each step averages the gradients of the
ranks' shards of a fixed data set (so the step is the full-batch step at any
size) and commits. Options make one worker die mid-step or add a host.
Prints "final <json>" with the committed step count and the weights.

    --steps N          steps to train
    --kill W:S         worker number W kills itself (SIGKILL) in step S of its first round
    --grow FILE:S      rank 0 adds "127.0.0.3:1" to the discovery file FILE at
                       step S, then every rank commits until the job has grown
    --shrink FILE:S    the same, removing the host "127.0.0.2" from FILE
    --visit FILE:A:B   rank 0 adds the discovery line --visitor (host:slots) to
                       FILE at step A, and removes that host again at step B
    --die-in-rendezvous W:R   worker W dies right after counting in for round R
    --leave-segment    every worker leaves a file in /dev/shm named like one
                       of the job's segments, as a worker killed at init would
                       (and says after each reset which of those are still there)
    --report-states    print "state <json>" (step, layout, host, the address it
                       listens on, weights) after every commit
    --step-time S      sleep S seconds in every step (a job that trains for a while)
    --pid-dir DIR      write this worker's pid to DIR/<worker number> at start (for a
                       test that kills workers)
    --broadcast-first  broadcast the initial weights before hvd.elastic.run, as a script
                       ported from a static job does (Note [Late joiners])
"""
import json
import os
import socket
import time

import numpy as np

import hvdlite.numpy as hvd
from job_changes import add_host, change_hosts, die_in_rendezvous_if, job_options, kill_self_if, \
    leave_segment, leftover_segments, record_pid, remove_host, visit
from reference import DATA_X, DATA_Y, LEARNING_RATE, gradient, initial_weights


def main():
    parser = job_options(steps=20)
    parser.add_argument("--shrink")
    parser.add_argument("--visit")
    parser.add_argument("--visitor")
    parser.add_argument("--die-in-rendezvous")
    parser.add_argument("--leave-segment", action="store_true")
    parser.add_argument("--report-states", action="store_true")
    parser.add_argument("--step-time", type=float, default=0.0)
    parser.add_argument("--pid-dir")
    parser.add_argument("--broadcast-first", action="store_true")
    args = parser.parse_args()
    if args.pid_dir:
        record_pid(args.pid_dir)

    if args.leave_segment:
        print(f"left {leave_segment()}", flush=True)
    die_in_rendezvous_if(args.die_in_rendezvous)
    hvd.init()
    first_round_size = hvd.size()
    weights = initial_weights()
    if args.broadcast_first:
        weights = hvd.broadcast(weights, root_rank=0, name="initial_weights")
    state = hvd.elastic.ObjectState(step=0, weights=weights, visits=0)
    state.register_reset_callbacks([lambda: print(f"reset: now rank {hvd.rank()} of "
                                                  f"{hvd.size()}", flush=True)])
    if args.leave_segment:
        state.register_reset_callbacks([lambda: print(
            f"leftovers after reset: {json.dumps(leftover_segments())}", flush=True)])

    @hvd.elastic.run
    def train(state):
        print(f"train from step {state.step} as rank {hvd.rank()} of {hvd.size()}", flush=True)
        while state.step < args.steps:
            shard = np.arange(hvd.rank(), len(DATA_X), hvd.size())
            local = gradient(state.weights, DATA_X[shard], DATA_Y[shard]) * len(shard)
            kill_self_if(args.kill, state.step)  # mid-step: the others are in the allreduce
            time.sleep(args.step_time)
            total = hvd.allreduce(local, op=hvd.Sum, name="grad")
            state.weights = state.weights - LEARNING_RATE * total / len(DATA_X)
            state.step += 1
            state.commit()
            if args.report_states:
                print("state " + json.dumps({
                    "step": state.step, "rank": hvd.rank(), "size": hvd.size(),
                    "local_rank": hvd.local_rank(), "cross_rank": hvd.cross_rank(),
                    "host": socket.gethostname(), "job": os.environ["HVDLITE_JOB_ID"],
                    "bind_addr": os.environ.get("HVDLITE_BIND_ADDR"),
                    "weights": state.weights.tolist()}), flush=True)
            if args.visit:
                visit(hvd, args.visit, args.visitor, state)
            if args.grow:
                change_hosts(hvd, args.grow, state, first_round_size, add_host)
            if args.shrink:
                change_hosts(hvd, args.shrink, state, first_round_size, remove_host)

    train(state)
    print("final " + json.dumps({"step": state.step, "size": hvd.size(),
                                 "job": os.environ["HVDLITE_JOB_ID"],
                                 "weights": state.weights.tolist()}), flush=True)


if __name__ == "__main__":
    main()
