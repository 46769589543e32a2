"""Elastic JAX training (hvdlite.jax.elastic.JaxState) of a linear model with
optax.adamw in a jitted step, on the least-squares problem of reference.py:
each rank's shard is an equal part of the data, so the averaged gradient is
the full-batch one at any size, and the result must equal reference_optax().
Needs JAX_ENABLE_X64=1 (float64).

    --steps N        optimizer steps to train (a commit after each)
    --kill W:S       worker W kills itself (SIGKILL) before step S's collectives
    --grow FILE:S    at step S rank 0 adds a host to the discovery file FILE
    --sharding-stage S  DistributedOptimizer(sharding_stage=S): the optimizer state is
                     this rank's rows, re-sharded at every re-form

Prints "final <json>": committed steps, optimizer steps taken, size, the
parameters and the whole optimizer state's leaves.
"""
import json

import jax
import numpy as np
import optax

import hvdlite.jax as hvd
from job_changes import add_host, change_hosts, job_options, kill_self_if
from reference import DATA_X, DATA_Y, make_optax_problem


def main():
    parser = job_options(steps=12)
    parser.add_argument("--sharding-stage", type=int, default=0)
    args = parser.parse_args()

    hvd.init()
    first_size = hvd.size()
    params, adamw, loss = make_optax_problem()
    tx = hvd.DistributedOptimizer(adamw, sharding_stage=args.sharding_stage)
    # `applied` counts optimizer steps in the state's own history: a step
    # rolled back by restore() is not counted, one applied twice would be.
    state = hvd.elastic.JaxState(params=params, opt_state=tx.init(params), optimizer=tx,
                                 step=0, applied=0)

    @jax.jit
    def step(params, opt_state, x, y):
        updates, opt_state = tx.update(jax.grad(loss)(params, x, y), opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    @hvd.elastic.run
    def train(state):
        print(f"train from step {state.step} as rank {hvd.rank()} of {hvd.size()}", flush=True)
        while state.step < args.steps:
            rows = np.arange(hvd.rank(), len(DATA_X), hvd.size())
            kill_self_if(args.kill, state.step)
            state.params, state.opt_state = step(state.params, state.opt_state,
                                                 DATA_X[rows], DATA_Y[rows])
            state.applied += 1
            state.step += 1
            state.commit()
            if args.grow:
                change_hosts(hvd, args.grow, state, first_size, add_host)

    train(state)
    whole = (tx.consolidated_state(state.opt_state, state.params) if args.sharding_stage
             else state.opt_state)
    print("final " + json.dumps({
        "step": state.step, "applied": state.applied, "size": hvd.size(),
        "params": [np.asarray(v).tolist() for v in jax.tree_util.tree_leaves(state.params)],
        "opt_state": [np.asarray(v).tolist() for v in jax.tree_util.tree_leaves(whole)]}),
        flush=True)


if __name__ == "__main__":
    main()
