"""A cell run silently (``run_cell(silent=True)``: what ipyparallel's ``execute`` does on an
engine) fires no ``pre_run_cell`` hook: its error is still explained from its own source, read
back from where IPython cached the cell, never from the cell that ran before it."""

from __future__ import annotations

from typing import Any

from IPython.utils.capture import capture_output

SETUP = "import torch\nmodel = torch.nn.Linear(8, 4).to('meta')\n"


def shown_diagnoses(shell: Any, cell: str, silent: bool) -> list[str]:
    with capture_output() as captured:
        shell.run_cell(cell, silent=silent)
    return [out.data.get("text/plain", "") for out in captured.outputs]


def test_a_silent_cell_is_explained_from_its_own_source(ip) -> None:
    shown_diagnoses(ip, SETUP, silent=False)  # the last cell the hooks saw
    (shown,) = shown_diagnoses(ip, "x = torch.randn(2, 8)\ny = model(x)", silent=True)
    assert shown.startswith("Device mismatch: model (Linear, 144 B) is on meta; x (Tensor, 64 B)")
    assert "torch.nn.Linear(8, 4).to('meta')" not in shown  # the setup cell's expression


def test_a_plain_cell_after_a_silent_one_is_explained_from_its_own_source(ip) -> None:
    shown_diagnoses(ip, SETUP, silent=True)
    (shown,) = shown_diagnoses(ip, "inputs = torch.randn(2, 8)\nout = model(inputs)", silent=False)
    assert shown.startswith("Device mismatch: model (Linear, 144 B) is on meta; inputs (Tensor,")
