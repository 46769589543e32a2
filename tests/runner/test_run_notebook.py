"""Executes examples/notebooks/train_pytorch.ipynb headlessly in a real
Jupyter kernel of this Python (nbclient + ipykernel): hvdlite.run from a
notebook cell, with the ranks' output in the cell's output; and interrupts
a kernel that runs hvdlite.run."""
import json
import queue
import re
import time
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="needs nbclient and ipykernel (make venv "
                                                  "installs them)")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
torch = pytest.importorskip("torch", reason="needs torch==2.13.0 (make venv installs it)")

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "notebooks" / "train_pytorch.ipynb"


def cell_text(cell):
    return "".join(output.get("text", "") for output in cell.outputs
                   if output.output_type == "stream")


def reference_model(epochs, lr):
    """One process, the whole batch: what 2 ranks averaging the gradients of
    their halves compute."""
    torch.manual_seed(0)
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(1))
    y = x @ torch.arange(1.0, 9.0) + 0.5
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(epochs):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x).squeeze(1), y).backward()
        optimizer.step()
    return model.weight.detach().flatten().tolist(), model.bias.item()


@pytest.mark.timeout(180)
def test_the_notebook_trains_on_two_ranks():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    run_cell, check_cell = notebook.cells[2], notebook.cells[3]
    output = cell_text(run_cell)
    for rank in (0, 1):  # the ranks' output, prefixed, in the cell that called run()
        assert f"[{rank}]<stdout>:epoch 0: loss " in output, output
        assert f"[{rank}]<stdout>:epoch 30: loss " in output, output
        assert f"rank {rank}: final loss " in output, output
    model = json.loads(cell_text(check_cell).split("model ", 1)[1])
    weight, bias = reference_model(40, 0.1)
    assert model["weight"] == pytest.approx(weight, rel=1e-4, abs=1e-5)
    assert model["bias"] == pytest.approx(bias, rel=1e-4, abs=1e-5)
    assert model["loss"] < 1.0


INTERRUPTED_CELL = """
import os, time
import hvdlite

def wait_forever():
    print("pid", os.getpid(), flush=True)
    while True:
        time.sleep(0.1)

try:
    hvdlite.run(wait_forever, np=2)
except KeyboardInterrupt as interrupt:
    print("interrupted:", interrupt)
"""


@pytest.mark.timeout(90)
def test_interrupting_the_kernel_stops_every_rank():
    from jupyter_client.manager import start_new_kernel
    from test_launch_local import is_alive, wait_until
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        output, interrupted_at = _run_and_interrupt(manager, client, INTERRUPTED_CELL)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    pids = [int(pid) for pid in re.findall(r"<stdout>:pid (\d+)", output)]
    assert len(pids) == 2, output
    assert "interrupted: hvdlite.run was stopped by SIGINT; every rank was stopped" in output
    assert time.monotonic() - interrupted_at < 15
    assert wait_until(lambda: not any(is_alive(pid) for pid in pids), 5), pids


def _run_and_interrupt(manager, client, code):
    """Runs `code` in the kernel, interrupts it once both ranks printed their
    pid, and returns (the cell's stream output, when it was interrupted)."""
    msg_id = client.execute(code)
    output, interrupted_at = "", None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            message = client.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        if message["parent_header"].get("msg_id") != msg_id:
            continue
        if message["msg_type"] == "stream":
            output += message["content"]["text"]
        elif message["msg_type"] == "status" and \
                message["content"]["execution_state"] == "idle":
            return output, interrupted_at
        if interrupted_at is None and output.count("<stdout>:pid") == 2:
            manager.interrupt_kernel()
            interrupted_at = time.monotonic()
    pytest.fail(f"the cell did not end within 60 s: {output}")
