"""A collective that fails inside a compiled step (tf.function, jax.jit)
reaches Python as the framework's own error; hvdlite gives back its kind and
fields from the core's record (carried_failure, Note [Failures by message]
in csrc/api/session.h), not from its words. First a shape mismatch
(CollectiveMismatchError: tensor, field, each rank's value), then rank 1
killed (killed_rank_scenario.py): the survivor's line names the kind and
fields carried, for the test to check. Usage: failure_fields.py <tensorflow|jax>."""
import sys

import numpy as np

from checks import check
from killed_rank_scenario import ignore_launcher_stop, run_until_failure


def tensorflow_adapter():
    import tensorflow as tf
    import hvdlite.tensorflow as hvd

    def compiled(fn):
        step = tf.function(fn)
        return lambda array: step(tf.constant(array)).numpy()
    return hvd, compiled


def jax_adapter():
    import jax
    import jax.numpy as jnp
    import hvdlite.jax as hvd

    def compiled(fn):
        step = jax.jit(fn)
        return lambda array: np.asarray(step(jnp.asarray(array)).block_until_ready())
    return hvd, compiled


ADAPTERS = {"tensorflow": tensorflow_adapter, "jax": jax_adapter}


def described(error):
    from hvdlite.common.carried_failures import carried_failure
    failure = carried_failure(error)
    if failure is None:
        return f"no hvdlite failure carried by {type(error).__name__}: {error}"
    return f"{type(failure).__name__} ranks={failure.ranks} tensors={failure.tensor_names}"


def check_mismatch(hvd, compiled, rank):
    from hvdlite.common.carried_failures import carried_failure
    from hvdlite.common.exceptions import CollectiveMismatchError
    step = compiled(lambda x: hvd.allreduce(x, op=hvd.Sum, name="fields.mismatch"))
    try:
        step(np.ones(rank + 1, np.float32))
    except Exception as error:  # noqa: BLE001 - the framework's own type; checked below
        failure = carried_failure(error)
        check(isinstance(failure, CollectiveMismatchError), described(error))
        check(failure.tensor_names == ("fields.mismatch",), f"tensors {failure.tensor_names}")
        check(failure.field == "shape", f"field {failure.field!r}")
        check(failure.values == {0: "[1]", 1: "[2]"}, f"values {failure.values}")
        print(f"rank {rank}: mismatch carried as CollectiveMismatchError", flush=True)
        return
    check(False, "an allreduce of mismatched shapes completed")


def main():
    hvd, compiled = ADAPTERS[sys.argv[1]]()
    ignore_launcher_stop()
    hvd.init()
    rank = hvd.rank()
    check_mismatch(hvd, compiled, rank)
    step = compiled(lambda x: hvd.allreduce(x, name="fields.step"))
    error = run_until_failure(rank, lambda i: step(np.ones(100, np.float32)), Exception,
                              kill_at=3, steps=100, message=described)
    sys.exit(0 if error is None else 17)


if __name__ == "__main__":
    main()
