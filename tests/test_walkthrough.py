"""docs/walkthrough.ipynb runs top to bottom: executed at reduced size (BRORL_WALKTHROUGH_QUICK=1)
so it cannot rot when the code it calls changes."""

import os

import pytest

from conftest import ROOT

nbclient = pytest.importorskip("nbclient",
                               reason="the notebook test needs requirements-dev.txt (nbclient)")
nbformat = pytest.importorskip("nbformat",
                               reason="the notebook test needs requirements-dev.txt (nbformat)")

NOTEBOOK = ROOT / "docs" / "walkthrough.ipynb"


def execute(notebook_path, tmp_path):
    """Run every cell of a copy of the notebook in a fresh kernel (cwd: docs/, as `jupyter notebook`
    would), in quick mode; returns the executed copy. A cell that raises fails with nbclient's
    CellExecutionError."""
    notebook = nbformat.read(notebook_path, as_version=4)
    os.environ["BRORL_WALKTHROUGH_QUICK"] = "1"  # the kernel inherits this process's environment
    try:  # timeout per cell: generous, for a loaded CI machine
        nbclient.NotebookClient(notebook, timeout=1800, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    finally:
        del os.environ["BRORL_WALKTHROUGH_QUICK"]
        # what ran, to read after a failure
        nbformat.write(notebook, tmp_path / "walkthrough.executed.ipynb")
    return notebook


def outputs_text(notebook) -> str:
    return "\n".join(output.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                     for output in cell.get("outputs", []))


def test_the_walkthrough_runs_top_to_bottom_in_quick_mode(tmp_path):
    notebook = execute(NOTEBOOK, tmp_path)
    text = outputs_text(notebook)
    assert "quick mode" in text  # the switch reached the kernel: every size was the reduced one
    assert "ΔQ_pos (sum)" in text and "autograd check" in text  # Theorem 1 on the step's tokens
    assert text.count("steps in") == 2  # both short training runs finished
    figures = sum("image/png" in output.get("data", {}) for cell in notebook.cells
                  if cell.cell_type == "code"
                  for output in cell.get("outputs", []))
    assert figures == 4  # the clip, the step's changes, Theorem 1 over N, the two runs


def test_a_cell_that_raises_fails_the_run(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # before the setup
    notebook.cells.insert(1, nbformat.v4.new_code_cell("raise RuntimeError('a cell broke')"))
    broken = tmp_path / "broken.ipynb"
    nbformat.write(notebook, broken)
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="a cell broke"):
        execute(broken, tmp_path)

