"""A real Jupyter kernel (nbclient + ipykernel): the extension loads, a real cpu/meta mismatch
is explained in the failing cell's own outputs, and %%devicecheck --strict fails a cell."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.kernel


def notebook(*cells: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    return nb


def cell_text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output["text"])
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
            parts.append(output["data"].get("text/html", ""))
        elif output.get("output_type") == "error":
            parts.append(f"{output['ename']}: {output['evalue']}")
            parts.extend(output.get("traceback", []))
    return "\n".join(parts)


def test_real_kernel_explains_a_device_mismatch_in_the_cell_output():
    nb = notebook(
        "%load_ext torchdevice_magic",
        "import torch\nmodel = torch.nn.Linear(3, 2).to('meta')\nx = torch.randn(4, 3)",
        "y = model(x)",
        "%%devicecheck --strict --quiet\na = x.sum()\nb = model.weight.sum()",
        "frame = %devices -o\nprint(sorted(frame['name']))",
        "%%devicecheck\ny = model(x)",
    )
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    failing = nb.cells[2]
    errors = [o for o in failing.outputs if o.output_type == "error"]
    assert errors and errors[0]["ename"] == "RuntimeError"
    explained = cell_text(failing)
    assert "model (Linear, 32 B) is on meta" in explained
    assert "x (Tensor, 48 B) is on cpu" in explained
    # nothing real is moved to meta by default: the meta model is materialised instead
    assert 'Fix: model.to_empty(device="cpu")' in explained
    # the diagnosis comes first, then the traceback with torch's own frames collapsed
    kinds = [o.output_type for o in failing.outputs]
    assert kinds.index("display_data") < kinds.index("error")
    assert "frames inside torch hidden" in explained

    strict = nb.cells[3]
    strict_errors = [o for o in strict.outputs if o.output_type == "error"]
    assert strict_errors and strict_errors[0]["ename"] == "MixedDevicesError"
    assert "spans 2 devices: cpu, meta" in cell_text(strict)
    assert "['a', 'b', 'model', 'x']" in cell_text(nb.cells[4])

    # %%devicecheck explains a failure the same way: diagnosis first, then a short traceback
    checked = nb.cells[5]
    kinds = [o.output_type for o in checked.outputs]
    text = cell_text(checked)
    assert "display_data" in kinds and kinds.index("display_data") < kinds.index("error"), kinds
    diagnoses = [
        o for o in checked.outputs if "Device mismatch" in o.get("data", {}).get("text/plain", "")
    ]
    assert len(diagnoses) == 1 and "frames inside torch hidden" in text
    assert "CellFailed" in text


def widget_state_text(nb: nbformat.NotebookNode, cell: nbformat.NotebookNode) -> str:
    """Every string of every widget model that the cell's table (its root widget) reaches,
    from the notebook's saved widget state."""
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    roots = [
        o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"]
        for o in cell.outputs
        if "application/vnd.jupyter.widget-view+json" in o.get("data", {})
    ]
    assert roots, "the cell shows no widget"
    seen, stack, texts = set(), list(roots), []
    while stack:
        model_id = stack.pop()
        if model_id in seen or model_id not in state:
            continue
        seen.add(model_id)
        for value in state[model_id]["state"].values():
            values = value if isinstance(value, list) else [value]
            for item in values:
                if isinstance(item, str) and item.startswith("IPY_MODEL_"):
                    stack.append(item.removeprefix("IPY_MODEL_"))
                elif isinstance(item, str):
                    texts.append(item)
    return "\n".join(texts)


def test_tables_are_records_of_their_moment_in_the_saved_notebook():
    nb = notebook(
        "%load_ext torchdevice_magic",
        "import torch\nearly_tensor = torch.ones(10)",
        "%devices",
        "%devices --live",
        "later_tensor = torch.ones(20)",
        "%devices",
        "%devices --text",
    )
    NotebookClient(nb, timeout=120, kernel_name="python3", store_widget_state=True).execute()
    first, live, second = (widget_state_text(nb, nb.cells[i]) for i in (2, 3, 5))
    assert "early_tensor" in first and "later_tensor" not in first
    assert "as of [3]" in first
    assert "later_tensor" in second and "as of [6]" in second
    assert "later_tensor" in live and "live" in live
    # the static text/HTML rendering says its moment too
    assert "Devices (as of [7])" in cell_text(nb.cells[6])
