"""Object collectives check each pickle's tag before unpickling it (Note
[Signed objects] in hvdlite/numpy/objects.py). argv[1]: the prefix of the
marker file that unpickling rank 0's forged object creates."""
import os
import sys

import hvdlite.numpy as hvd
from hvdlite.common.exceptions import HvdliteInternalError
from hvdlite.numpy.objects import allgather_object, broadcast_object

marker = sys.argv[1]


class Planted:
    """Unpickling this runs os.system (what a forged pickle would do): it
    leaves MARKER.<rank that unpickled it>."""

    def __reduce__(self):
        return (os.system, (f"touch {marker}.$HVDLITE_RANK",))


hvd.init()
rank = hvd.rank()
assert os.environ.get("HVDLITE_SECRET"), "hvdliterun gives every rank the job's secret"

# Objects of the job's ranks arrive intact.
assert broadcast_object({"step": 7, "rank": rank}, root_rank=1) == {"step": 7, "rank": 1}
assert allgather_object(("r", rank)) == [("r", r) for r in range(hvd.size())]

# Rank 0 signs under another key: as if its pickle had been swapped on the way.
real = os.environ["HVDLITE_SECRET"]
if rank == 0:
    os.environ["HVDLITE_SECRET"] = "not-the-job-secret"
for what, call in (("broadcast_object", lambda: broadcast_object(Planted(), root_rank=0,
                                                                      name="planted")),
                   ("allgather_object", lambda: allgather_object(Planted(), name="gathered"))):
    if rank == 0 and what == "broadcast_object":
        call()  # the root keeps its own object and unpickles nothing from others
        continue
    try:
        call()
        raise AssertionError(f"{what}: a forged pickle was unpickled")
    except HvdliteInternalError as error:
        text = str(error)
        sender = 1 if (rank == 0 and what == "allgather_object") else 0
        assert f"the object from rank {sender} failed its integrity check" in text, text
        assert "so it was not unpickled" in text, text
os.environ["HVDLITE_SECRET"] = real
# Rank 0 may unpickle its own object; no other rank ran its code.
assert rank == 0 or not os.path.exists(f"{marker}.{rank}"), f"rank {rank} ran a forged pickle"
assert broadcast_object("after", root_rank=0) == "after"
print(f"rank {rank}: signed objects OK", flush=True)
