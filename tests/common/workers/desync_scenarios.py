"""Ranks that stop agreeing, for every binding (tests/common/test_desync.py):
each binding's worker (an adapter) defines where its collectives are called,
and this runs the scenarios on real ranks, one after the other in one job:

    mismatch  the ranks allreduce one name with different shapes
    branches  rank 0 in step() allreduces 'loss', the others in evaluate() 'val_loss'
    reorder   rank 0 allreduces 'a' then 'b', the others 'b' then 'a', each blocking
    skip      the ranks run 3 steps of 'step' then 'final'; rank 1 skips step 1
    late      (numpy only) rank 1 is merely late: it sleeps, then joins in

The adapter's functions take the rank and run the scenario's collectives,
blocking; each line that calls hvdlite carries a `# SITE:<key>` comment, from
which the test learns the line each report must name. After each scenario
every rank prints one line, "DESYNC <json>": what it raised (type, message,
fields) and when it started (time.time()) and how long it took, then the
ranks meet in `sync` so that the next scenario starts together.
"""
import json
import sys
import time

SCENARIOS = ("mismatch", "branches", "reorder", "skip")


def describe(error):
    """What the test checks of a raised error: its classes (TensorFlow's and
    hvdlite's), its message and hvdlite's fields."""
    from hvdlite.common.exceptions import HvdliteInternalError
    record = {"types": [cls.__name__ for cls in type(error).__mro__],
              "message": getattr(error, "message", None) or str(error)}
    if isinstance(error, HvdliteInternalError):
        fields = error.fields()
        fields["calls"] = [[c.rank, c.tensor_name, c.op, list(c.call_site) if c.call_site else None,
                            c.value, c.blocked] for c in error.calls]
        record["fields"] = fields
    return record


def run(rank, adapter, sync, scenarios=None, prefix=""):
    """Runs each scenario (default: argv[1:] or SCENARIOS) and prints its
    record, named prefix + scenario (a binding with several modes runs each)."""
    scenarios = scenarios or sys.argv[1:] or SCENARIOS
    for scenario in scenarios:
        start = time.time()
        record = {"scenario": prefix + scenario, "rank": rank, "start": start, "error": None}
        try:
            getattr(adapter, scenario)(rank)
        except Exception as error:  # noqa: BLE001 - every binding raises its own types
            record["error"] = describe(error)
            # A binding whose framework raises its own type (JAX) gives hvdlite's too.
            translate = getattr(adapter, "hvdlite_error", None)
            known = translate(error) if translate else None
            if known is not None:
                record["hvdlite_error"] = describe(known)
        record["elapsed"] = time.time() - start
        print("DESYNC " + json.dumps(record), flush=True)
        sync(f"desync.{prefix}{scenario}.done")
    print(f"rank {rank}: desync scenarios {prefix or ''}done", flush=True)
