"""A stall needs a rank that takes no part: while one rank's collective (or
join) stalls until the stall shutdown fails it, the others must submit
nothing. They used to sleep a fixed time past the shutdown time, which costs
that margin in every run and is still too short on a loaded machine; instead
the stalled rank says when its call has failed (mark_failed) and the others
wait for that (stay_away_until_failed), outside hvdlite.

The test names the marker file in STALLED_PEER_MARKER (a path in its
tmp_path, so that no two jobs share one)."""
import os
import time
from pathlib import Path

# Longer than any stall shutdown these workers set: past it, something is
# wrong with the stalled rank, and the job goes on to fail on it.
GIVE_UP_S = 30.0


def mark_failed():
    """Called by the stalled rank once its call has failed."""
    Path(os.environ["STALLED_PEER_MARKER"]).touch()


def stay_away_until_failed():
    """Waits, submitting nothing, until the stalled rank marked its failure
    (or GIVE_UP_S passed); returns the seconds waited."""
    marker = Path(os.environ["STALLED_PEER_MARKER"])
    start = time.monotonic()
    while not marker.exists() and time.monotonic() - start < GIVE_UP_S:
        time.sleep(0.05)
    return time.monotonic() - start
