"""Rank 1 raises KeyError('missing shard 7') after init(); the others sleep
until they are stopped. Run as a script by hvdliterun, or imported for
hvdlite.run (tests/runner/test_failure_rule.py)."""
import time


def raise_on_rank_one():
    import hvdlite.numpy as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise KeyError("missing shard 7")
    time.sleep(30)  # the others must be stopped, not wait for this


if __name__ == "__main__":
    raise_on_rank_one()
