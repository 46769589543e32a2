"""Separate hvdlite.jax collectives inside one jitted step are queued without
waiting for each other and fused by the core (Note [Asynchronous calls on the
CPU] in csrc/jax/collective_handler.cc): their results equal NumPy's at 2 and
3 ranks (dtypes, ops, allgathers and broadcasts mixed in, a process set,
io_callback collectives beside them), and the timeline shows far fewer
collectives than tensors (a blocking call per tensor would show one each)."""
import json
from pathlib import Path

import pytest

pytest.importorskip("jax")

WORKER = Path(__file__).parent / "workers" / "jax_fused_step.py"
ENV = {"JAX_PLATFORMS": "cpu"}


@pytest.mark.parametrize("np_", [2, 3])
def test_a_jitted_step_of_many_separate_collectives_equals_numpy(world, np_):
    world(np_, WORKER, timeout=150, env=ENV).expect_ok().expect_line("jax fused step OK", range(np_))


def test_separate_allreduces_in_one_jitted_step_fuse(world, tmp_path):
    timeline = tmp_path / "timeline.json"
    world(2, WORKER, "fusion", timeout=120, env={**ENV, "HVDLITE_TIMELINE": str(timeline)}).expect_ok()
    events = json.loads(timeline.read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    rows = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    # Each tensor's op span is named ALLREDUCE on its own row; each collective
    # is an activity of the same name on the row of its batch's first member.
    begins = [rows.get(e["pid"], "") for e in events if e.get("ph") == "B" and e.get("name") == "ALLREDUCE"]
    fused = [name for name in begins if name.startswith("fused.")]
    tensors = 2 * 100  # two runs of the step
    collectives = len(fused) - tensors
    # One or two collectives a step when the step's calls are all queued
    # before the first negotiation ends; a loaded machine may split a step
    # over a few more cycles. Calls that each waited for their own
    # negotiation would make it 200.
    assert 2 <= collectives <= tensors // 5, (collectives, len(fused))
