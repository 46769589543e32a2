"""A rank that must stay out of hvdlite until a peer got somewhere (its
stalled collective or join failed at the stall shutdown, its wait was
interrupted) waits for the peer to say so. A fixed sleep past that moment
costs its margin in every run and is still too short on a loaded machine;
this costs nothing and waits as long as the peer takes.

The test names the marker file in PEER_DONE_MARKER (a path in its
tmp_path, so that no two jobs share one)."""
import os
import time
from pathlib import Path

# Longer than any stall shutdown these workers set: past it, something is
# wrong with the peer, and the job goes on to fail on it.
GIVE_UP_S = 30.0


def mark_done():
    """Called by the peer once it got there."""
    Path(os.environ["PEER_DONE_MARKER"]).touch()


def wait_until_done():
    """Waits, submitting nothing, until the peer marked it got there (or
    GIVE_UP_S passed); returns the seconds waited."""
    marker = Path(os.environ["PEER_DONE_MARKER"])
    start = time.monotonic()
    while not marker.exists() and time.monotonic() - start < GIVE_UP_S:
        time.sleep(0.05)
    return time.monotonic() - start
