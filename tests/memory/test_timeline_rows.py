"""The memory timeline's message to the sidebar stays the size of what the chart draws, however
long the notebook's history (it goes out after every cell that changed tensors)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from torchdevice_magic.memory.timeline import CHART_CELLS, CellMemory, Timeline
from torchdevice_magic.scan import Scanner

CHART = Path(__file__).resolve().parents[2] / "labextension" / "src" / "timeline.ts"


def test_the_kernel_sends_as_many_cells_as_the_chart_draws():
    drawn = re.search(r"export const MAX_CELLS = (\d+);", CHART.read_text(encoding="utf-8"))
    assert drawn is not None and int(drawn.group(1)) == CHART_CELLS


def test_the_rows_sent_are_the_last_cells_however_long_the_history():
    namespace: dict[str, object] = {}
    scanner = Scanner()
    timeline = Timeline()
    cells = 3 * CHART_CELLS
    for cell in range(1, cells + 1):
        namespace[f"t{cell}"] = torch.zeros(cell)
        inventory = scanner.scan(namespace, changed=[f"t{cell}"])
        timeline.record(cell, inventory, namespace, [f"t{cell}"])
    rows = timeline.to_json()
    # the whole history stays in the kernel; the message has the chart's last cells
    assert [r.cell for r in timeline.rows] == list(range(1, cells + 1))
    assert [row["cell"] for row in rows] == list(range(cells - CHART_CELLS + 1, cells + 1))
    assert rows == [r.to_dict() for r in timeline.rows[-CHART_CELLS:]]


def test_each_device_keeps_its_own_last_cells():
    timeline = Timeline()
    # cpu changes every cell, the accelerator every fifth: the chart draws CHART_CELLS of each
    # (here 100 cells: 120 rows, all within the protocol's last 200)
    cells = 100
    for cell in range(1, cells + 1):
        timeline.rows.append(CellMemory(cell, "cpu", cell, 1))
        if cell % 5 == 0:
            timeline.rows.append(CellMemory(cell, "cuda:0", cell, 1))
    rows = timeline.to_json()
    cpu = [row["cell"] for row in rows if row["device"] == "cpu"]
    cuda = [row["cell"] for row in rows if row["device"] == "cuda:0"]
    assert cpu == list(range(cells - CHART_CELLS + 1, cells + 1))
    assert cuda == list(range(5, cells + 1, 5))
    assert [row["cell"] for row in rows] == sorted(row["cell"] for row in rows)  # oldest first
