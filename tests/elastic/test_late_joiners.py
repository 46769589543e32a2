"""hvdlite/common/late_joiners.py on its own: the guard refuses collectives
before they are queued, says which and where, publishes that first, and
goes away again. (test_torch_elastic.py runs the whole story with a job.)"""
import re
from pathlib import Path

import pytest

from hvdlite.common import late_joiners, requests

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def published():
    messages = []
    yield messages
    late_joiners.unguard()


def test_a_guarded_collective_fails_before_it_is_queued_naming_it_and_the_line(published):
    original = requests.enqueue
    late_joiners.guard("worker w7 (rank 2 of 3), which joined round 4 of a running elastic job,",
                       published.append)
    assert late_joiners.guarded() and requests.enqueue is not original
    with pytest.raises(late_joiners.CollectiveOutsideRunError) as raised:
        requests.enqueue(op=requests.BROADCAST, name="broadcast_parameters.fc.weight")
    message = str(raised.value)
    assert published == [message]
    assert re.match(r"worker w7 \(rank 2 of 3\), which joined round 4 of a running elastic job, "
                    r"called a collective \('broadcast_parameters\.fc\.weight'\) at "
                    r"test_late_joiners\.py:\d+ in test_a_guarded_collective_fails_before_it_is_"
                    r"queued_naming_it_and_the_line before entering hvd\.elastic\.run", message)
    assert late_joiners.ADVICE in message
    late_joiners.unguard()
    assert requests.enqueue is original and not late_joiners.guarded()


def test_the_error_is_not_one_that_run_retries():
    from hvdlite.common.exceptions import HvdliteInternalError
    assert not issubclass(late_joiners.CollectiveOutsideRunError, HvdliteInternalError)


def test_every_tensorflow_collective_goes_through_the_guarded_entry_point():
    # hvdlite.tensorflow is not imported here (TensorFlow is slow to load): its
    # source must submit each collective op through ops.run_translated.
    assert ("hvdlite.tensorflow.ops", "run_translated") in late_joiners.ENTRY_POINTS
    calls = []
    for name in ("ops.py", "grouped_ops.py"):
        calls += [line for line in (REPO / "hvdlite" / "tensorflow" / name).read_text()
                  .splitlines() if "_ops().hvdlite_" in line]
    collectives = [line for line in calls if not re.search(r"hvdlite_(rank|size|local_rank|"
                                                           r"local_size)\(", line)]
    assert collectives and all("run_translated(" in line for line in collectives), collectives
