"""DeviceTable cost on a 10,000-tensor namespace, as ratios to the scan's floor loop.

Namespace: 10,000 float32 tensors of 1-97 elements in an in-process IPython shell with the
extension loaded. Floor: ``_namespace.floor_scan`` (visit each value, read its storage's
data_ptr() and nbytes()), measured in the same run.

Prints:
  build_ratio        DeviceTable(session) (one page of 50 rows) / floor
  refresh_ratio      what a cell adds for the table: table.refresh after one rebound name
                     (re-sort 10,000 records, re-fill one page) / floor
  next_page_ratio    Next button / floor
  widget models      per table for 10 and for 10,000 objects (must not grow with the namespace)
"""

from __future__ import annotations

import platform
import sys
import warnings
from pathlib import Path

import torch
from ipywidgets.widgets import widget as widget_module

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _namespace import floor_scan, median_seconds  # noqa: E402
from IPython.testing import globalipapp  # noqa: E402

from torchdevice_magic.shell import load  # noqa: E402
from torchdevice_magic.shell.widget import DeviceTable  # noqa: E402


def models_per_table(session: object) -> int:
    before = len(widget_module._instances)
    table = DeviceTable(session.app)
    made = len(widget_module._instances) - before
    table.close()
    return made


def main(repeats: int = 21) -> None:
    warnings.simplefilter("ignore", DeprecationWarning)
    shell = globalipapp.get_ipython()
    session = load(shell)
    shell.run_cell("import torch", store_history=False)
    shell.user_ns.update({f"s{i}": torch.ones(i + 1) for i in range(10)})
    small_models = models_per_table(session)

    objects = {f"t{i:05d}": torch.ones(i % 97 + 1) for i in range(10_000)}
    shell.user_ns.update(objects)
    session.app.full_scan()
    floor = median_seconds(lambda: floor_scan(shell.user_ns), repeats)
    build = median_seconds(lambda: DeviceTable(session.app).close(), repeats)
    big_models = models_per_table(session)

    table = DeviceTable(session.app, live=True)  # a live table follows cells
    replacements = [torch.ones(3), torch.ones(4)]
    state = {"i": 0}

    def cell_refresh() -> None:
        state["i"] ^= 1
        shell.user_ns["t00000"] = replacements[state["i"]]
        session.app.rescan(["t00000"])  # what the hook does anyway, with or without a table
        table.refresh(session)

    def rescan_only() -> None:
        state["i"] ^= 1
        shell.user_ns["t00000"] = replacements[state["i"]]
        session.app.rescan(["t00000"])

    with_table = median_seconds(cell_refresh, repeats)
    without = median_seconds(rescan_only, repeats)
    refresh = max(with_table - without, 0.0)

    def next_page() -> None:
        table.page = 0
        table.next_button.click()

    next_click = median_seconds(next_page, repeats)
    table.close()

    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}")
    print(f"floor loop (10,000 tensors): {floor * 1e3:8.3f} ms")
    print(f"build_ratio:      {build / floor:7.2f}  (DeviceTable() {build * 1e3:.2f} ms)")
    print(
        f"refresh_ratio:    {refresh / floor:7.2f}  (table.refresh after a cell "
        f"{refresh * 1e3:.2f} ms; the hook's rescan alone {without * 1e3:.2f} ms)"
    )
    print(f"next_page_ratio:  {next_click / floor:7.2f}  (Next {next_click * 1e3:.2f} ms)")
    print(f"widget models per table: {small_models} for 10 objects, {big_models} for 10,000")


if __name__ == "__main__":
    main()
