"""Helpers the memory tests share: finding one holder, a failure inside a function that keeps
its batch in the traceback, running a cell and reading what it printed, small notebooks."""

from __future__ import annotations

import nbformat
import torch
from IPython.utils.capture import capture_output

from torchdevice_magic.memory import Holder

F32 = 4


def by_kind(found: list[Holder], kind: str) -> Holder:
    matches = [h for h in found if h.kind == kind]
    assert len(matches) == 1, [(h.kind, h.where) for h in found]
    return matches[0]


def fail_inside_train(batch: torch.Tensor) -> BaseException:
    def forward(x):
        hidden = x * 2  # an activation: the frame keeps it too
        raise RuntimeError(f"failed with {hidden.shape}")

    def train(batch):
        return forward(batch)

    try:
        train(batch)
    except RuntimeError as error:
        return error
    raise AssertionError("unreachable")


def run(shell, cell):
    with capture_output() as captured:
        result = shell.run_cell(cell, store_history=True)
    texts = [o.data.get("text/plain", "") for o in captured.outputs]
    return result, captured.stdout + captured.stderr, "\n".join(texts)


def timeline_of(shell):
    from torchdevice_magic.shell import get_session

    return get_session(shell).app.timeline


def rows_of_cell(shell, cell):
    """Run ``cell`` (it must succeed); the timeline's rows for it."""
    result, _, _ = run(shell, cell)
    assert result.success, cell
    return [r for r in timeline_of(shell).rows if r.cell == result.execution_count]


def notebook(*cells: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    return nb


def outputs_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output["text"])
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
        elif output.get("output_type") == "error":
            parts.append(f"{output['ename']}: {output['evalue']}")
    return "\n".join(parts)
