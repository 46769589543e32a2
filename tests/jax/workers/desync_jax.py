"""hvdlite.jax's part of the desync scenarios (tests/common/workers/desync_scenarios.py),
inside jax.jit: each collective is an XLA custom call, whose call site is the
line that called it when the step was traced."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import hvdlite.jax as hvd

sys.path.insert(0, str(Path(__file__).parents[2] / "common" / "workers"))
from desync_scenarios import run  # noqa: E402


# One jitted allreduce per call site: each is reported at its lambda's line.
step = jax.jit(lambda x: hvd.allreduce(x, name="loss"))  # SITE:step
evaluate = jax.jit(lambda x: hvd.allreduce(x, name="val_loss"))  # SITE:evaluate
widths = jax.jit(lambda x: hvd.allreduce(x, name="w"))  # SITE:mismatch
one_step = jax.jit(lambda x: hvd.allreduce(x, name="step"))  # SITE:skip_step
final = jax.jit(lambda x: hvd.allreduce(x, name="final"))  # SITE:skip_final


def pair(first, second):
    @jax.jit
    def both(x):
        y = hvd.allreduce(x, name=first)  # SITE:first
        return hvd.allreduce(y, name=second)  # SITE:second
    return both


class Jit:
    hvdlite_error = staticmethod(hvd.hvdlite_error)

    def mismatch(self, rank):
        widths(jnp.ones(2 if rank == 0 else 3)).block_until_ready()

    def branches(self, rank):
        (step if rank == 0 else evaluate)(jnp.ones(4)).block_until_ready()

    def reorder(self, rank):
        pair(*(("a", "b") if rank == 0 else ("b", "a")))(jnp.ones(4)).block_until_ready()

    def skip(self, rank):
        x = jnp.ones(4)
        for i in range(3):
            if rank == 1 and i == 1:
                continue
            one_step(x).block_until_ready()
        final(x).block_until_ready()


if __name__ == "__main__":
    hvd.init()
    run(hvd.rank(), Jit(), lambda name: hvd.allreduce(np.zeros(1, np.float32), name=name))
    hvd.shutdown()
