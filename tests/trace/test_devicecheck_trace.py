"""``%%devicecheck --trace``: in an in-process shell and in a real kernel, the first divergence
is shown before the diagnosis, earlier cells' functions are named as IPython names them."""

from __future__ import annotations

import pytest
from trace_checks import no_modes_left


def run_in(shell, source: str):
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        result = shell.run_cell(source)
    shown = "\n".join(o.data.get("text/plain", "") for o in captured.outputs)
    return result, captured.stdout + captured.stderr, shown


def test_devicecheck_trace_shows_the_first_divergence_then_the_diagnosis(ip) -> None:
    run_in(ip, "import torch\nx = torch.randn(4, 3)\nw = torch.randn(3, 2)")
    result, printed, shown = run_in(
        ip,
        "%%devicecheck --trace\nh = x * 2\nfor i in range(3):\n    m = h.to('meta')\n"
        "s = w.sum().item()\ny = m + h\n",
    )
    assert not result.success
    trace_at = shown.index("First divergence: line 5: add.Tensor failed mixing m (4×3) on meta")
    assert "h (4×3) on cpu" in shown and "    y = m + h" in shown
    assert "line 3     cpu -> meta h: 3 copies, 144 B" in shown
    assert "line 4     1 on cpu (.item())" in shown
    assert "Hint: line 3 copies h from cpu to meta 3 times, 144 B" in shown
    diagnosis_at = shown.index("Device mismatch")
    assert trace_at < diagnosis_at and shown.count("Device mismatch") == 1
    # the traceback is the cell's: the recorder's own frames are hidden from it
    assert "Cell In[" in printed and "torchdevice_magic/trace/" not in printed
    assert no_modes_left()
    # the post-execute hook's scan ran inside the traced run_cell: none of its work is the
    # cell's (only lines of the cell appear)
    assert "line 6" not in shown.split("First divergence")[1].split("Device mismatch")[0]


def test_devicecheck_trace_names_functions_of_earlier_cells_as_ipython_does(ip) -> None:
    run_in(ip, "import torch\nx = torch.randn(4, 3)")
    defined, _, _ = run_in(ip, "def step(t):\n    moved = t.to('meta')\n    return moved + t")
    number = defined.execution_count
    _, _, shown = run_in(
        ip,
        "%%devicecheck --trace\ndef local(t):\n    return t.to('meta')\nz = local(x)\ny = step(x)",
    )
    assert f"step() In[{number}] line 3: add.Tensor failed mixing moved (4×3) on meta" in shown
    assert "local() line 2 cpu -> meta t: 1 copy" in shown  # this cell's own function: no In[]
    assert f"step() In[{number}] line 2 cpu -> meta t: 1 copy" in shown


def test_devicecheck_trace_composes_with_the_other_options(ip) -> None:
    run_in(ip, "import torch\nx = torch.randn(4, 3)\nmodel = torch.nn.Linear(3, 2)")
    # --to moves like the buttons: meta only where the config allows it
    ip.run_line_magic("config", "TorchDeviceMagic.allow_meta_target = True")
    result, printed, shown = run_in(
        ip, "%%devicecheck --trace --to meta -d meta --quiet\ny = model(x)"
    )
    assert result.success, result.error_in_exec
    assert "Moved" in printed  # --to moved first (not traced: it happened before the cell)
    assert "Trace: " in shown and "No op mixed devices." in shown and "Transfers" not in shown
    assert ip.user_ns["y"].device.type == "meta"
    result, printed, shown = run_in(
        ip, "%%devicecheck --trace --strict\nz = x.cpu() if False else x"
    )
    assert result.success and "Trace: 0 ops" in shown
    help_text = ip.magics_manager.magics["cell"]["devicecheck"].__doc__
    assert "--trace" in help_text and no_modes_left()


def test_devicecheck_trace_without_torch_says_so(ip) -> None:
    import sys

    saved = sys.modules.pop("torch")
    try:
        result, printed, _ = run_in(ip, "%%devicecheck --trace\nran = 1")
    finally:
        sys.modules["torch"] = saved
    assert result.success and ip.user_ns["ran"] == 1
    assert "torch is not imported yet, nothing to trace" in printed


@pytest.mark.kernel
def test_a_real_kernel_prints_the_first_divergence_then_the_diagnosis() -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(source)
        for source in (
            "%load_ext torchdevice_magic",
            "import torch\nfrom torchdevice_magic.testing import simulated_accelerator\n"
            "dev = simulated_accelerator()\n"
            "w = torch.randn(3, 2).to(dev)\nx = torch.randn(4, 3)",
            "%%devicecheck --trace\nh = x * 2\nfor i in range(2):\n    s = h.sum().item()\n"
            "y = h @ w",
        )
    ]
    NotebookClient(nb, timeout=180, kernel_name="python3", allow_errors=True).execute()
    outputs = nb.cells[2].outputs
    kinds = [o.output_type for o in outputs]
    texts = [o.get("data", {}).get("text/plain", "") for o in outputs]
    html = [o.get("data", {}).get("text/html", "") for o in outputs]
    trace_at = next(i for i, t in enumerate(texts) if t.startswith("Trace: "))
    diagnosis_at = next(i for i, t in enumerate(texts) if t.startswith("Device mismatch"))
    # the trace report, the diagnosis, then the (short) traceback, as for any explained error
    assert trace_at < diagnosis_at < kinds.index("error")
    report = texts[trace_at]
    assert (
        "First divergence: line 4: mm failed mixing h (4×3) on cpu, w (3×2) on simdev:0" in report
    )
    assert "    y = h @ w" in report
    assert "line 3     2 on cpu (.item())" in report
    assert report.startswith("Trace: 6 ops on cpu, simdev:0;")  # the failing op counts too
    assert "First divergence" in html[trace_at]
    # (the diagnosis's own wording is diagnose's; the trace only has to come first)
    assert (
        "is on simdev:0" in texts[diagnosis_at]
        and "h (Tensor, 48 B) is on cpu" in texts[diagnosis_at]
    )
