"""Execute every notebook in notebooks/ (nbclient); any cell error fails the test.

The kernel is this interpreter (the project's virtualenv): a kernelspec named ``python3``
pointing at ``sys.executable`` is written to a temporary directory placed first on
JUPYTER_PATH, so a ``python3`` kernelspec elsewhere (the user's, the system's) cannot
pick another Python without pandas or jstall.
"""

import glob
import json
import os
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "notebooks")
PATHS = sorted(glob.glob(os.path.join(NOTEBOOKS, "*.ipynb")))
#: What a plotly figure leaves in a cell's outputs under the notebook's renderer.
FIGURE_MIMETYPES = ("application/vnd.plotly.v1+json", "text/html")


@pytest.fixture
def python3_kernel(tmp_path, monkeypatch):
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (jstall tests)",
        "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(
        [str(tmp_path / "jupyter")] + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return "python3"


def test_there_are_notebooks():
    assert PATHS, "notebooks/ holds no notebook"


@pytest.mark.parametrize("path", PATHS, ids=[os.path.basename(p) for p in PATHS])
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [c.get("id") for c in nb.cells if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{os.path.basename(path)}: cells stored with outputs: {dirty}"


@pytest.mark.parametrize("path", PATHS, ids=[os.path.basename(p) for p in PATHS])
def test_notebook_runs(path, python3_kernel):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name=python3_kernel,
                                     resources={"metadata": {"path": NOTEBOOKS}})
    client.execute()  # raises CellExecutionError on the first failing cell
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
    assert all(c.execution_count for c in code), "a code cell did not run"
    assert sum(1 for c in code if c.outputs) >= 5
    figures = [c for c in code if "figure" in c.metadata.get("tags", [])]
    assert figures, "no cell tagged 'figure'"
    for c in figures:
        shown = {k for o in c.outputs if o.get("output_type") in ("display_data", "execute_result")
                 for k in o.get("data", {})}
        assert shown & set(FIGURE_MIMETYPES), f"figure cell {c.get('id')} showed no figure: {shown}"
