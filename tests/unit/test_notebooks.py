"""The example notebooks (issue 29) run from top to bottom in a real Jupyter kernel (nbclient, ipykernel), on the
stored sweeps shipped beside them (examples/data), so they cannot rot: every code cell runs without an error,
the figure cells draw a PNG, and each notebook's last cell checks the seed's finding on its data."""

from __future__ import annotations

import base64
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))


def test_there_are_two_notebooks_and_their_data():
    assert [p.name for p in NOTEBOOKS] == ["s0-latency-against-loss.ipynb", "s1-udp-throughput-against-size.ipynb"]
    for name in ("v2v-loss", "tcp-udp-link"):
        assert len(list((EXAMPLES / "data" / name).glob("*/*/record.json"))) == 12, name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_the_notebook_runs_in_a_kernel_and_draws_its_figure(path: Path, tmp_path: Path, monkeypatch) -> None:
    results = tmp_path / "results"
    monkeypatch.setenv("ROUGHNET_EXAMPLE_RESULTS", str(results))  # not examples/example-results: the tree stays clean
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core's paths without its deprecation warning
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code)
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    pngs = [o.data["image/png"] for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(b"\x89PNG"), len(pngs)
    assert code[-1].outputs and "text/html" in code[-1].outputs[0].data  # the table the last check ends with
    assert (results / "results.duckdb").exists() and not (EXAMPLES / "example-results").exists()
