"""Executes examples/notebooks/train_pytorch.ipynb headlessly in a real
Jupyter kernel of this Python (nbclient + ipykernel): hvdlite.run from a
notebook cell, with the ranks' output in the cell's output."""
import json
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
