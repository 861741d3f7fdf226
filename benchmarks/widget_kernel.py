"""The widget table's cost per cell on the path users take, through real kernels over the wire
(a companion to ``views.py``, whose ``Kernel`` it drives).

Kernels side by side, each this interpreter with ``PYTHONPATH`` = this checkout:

- ``plain``: without the extension;
- ``static``: the extension loaded in a frontend without the sidebar (the comm it announces on
  load is closed, as JupyterLab closes a comm to a target it does not know) and ``%devices``
  shown: a table of that cell's moment, which follows no later cell, so this kernel costs what
  the extension alone costs;
- ``live``: the same with ``%devices --live``, the table that follows every cell: after each
  cell the hook calls ``app.refresh_views()`` -> ``DeviceTable.refresh`` -> ``TableWindow.take``
  (the view model's ``LiveWindow.update`` from the cell's inventory, and the header) ->
  ``DeviceTable._draw`` (totals, targets, the page's row widgets, buttons: each widget whose
  value changed sends one comm message);
- ``sidebar``: the extension with the sidebar's comm open (``views.py``'s kernel), for the
  same minutes' comparison.

The namespace grows by cells (``views.py``'s ``GROW_CELL``): ``staged``, one set of kernels
reaching each size by 20 cells per stage, or ``one-go``, fresh kernels per size, the whole
namespace made by one cell. The garbage collector stays on. At each size the small cell
(``views.py``'s ``SMALL_CELL``: a rebinding whose row enters and leaves the table's first page
every cell) runs in the kernels in turn, the order rotating each round (2 warm-up rounds not
counted). Printed per size, medians: a plain cell; what each kernel adds to it (wall, from
``execute_request`` to ``idle``, and the kernel process's CPU time); the live table's own cost
(live - static, the same cells' pairwise differences: median and quartiles); the live table's
comm messages and bytes per cell.

Run: ``python benchmarks/widget_kernel.py [--paths staged one-go] [--sizes 2000 100000]
[--cells 12] [--kernels plain static live sidebar] [--checkout PATH]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import views
from views import SMALL_CELL, STAGE_CELLS, Kernel, grow

KINDS = ("plain", "static", "live", "sidebar")


def start(kind: str) -> Kernel:
    """A kernel of one kind, ready for the small cell (see the module's docstring)."""
    if kind == "plain":
        return Kernel(sidebar=False)
    if kind == "sidebar":
        return Kernel(sidebar=True)
    kernel = Kernel(sidebar=False, extension=True)
    kernel.run("%devices --live" if kind == "live" else "%devices")
    # the table is a widget (a kernel renders them) and only the live one follows cells
    kernel.run(
        "from torchdevice_magic.shell import get_session\n"
        "print('views:', get_session(get_ipython()).app.has_views())"
    )
    shown = kernel.printed[-1].strip()
    if shown != f"views: {kind == 'live'}":
        raise RuntimeError(f"the {kind} kernel's table is not what it should be: {shown}")
    return kernel


def per_cell(kernels: dict[str, Kernel], size: int, cells: int) -> dict[str, Any]:
    """The small cell in every kernel in turn: wall and CPU seconds per kernel, per cell."""
    code = SMALL_CELL.format(half=size // 2)
    kinds = list(kernels)
    wall: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    sent: list[int] = []
    messages: list[int] = []
    for index in range(cells + 2):
        turn = index % len(kinds)
        for kind in kinds[turn:] + kinds[:turn]:
            kernel = kernels[kind]
            took, nbytes = kernel.run(code)
            if index < 2:
                continue
            wall[kind].append(took * 1e3)
            cpu[kind].append((kernel.last_cpu or float("nan")) * 1e3)
            if kind == "live":
                sent.append(nbytes)
                messages.append(kernel.last_messages)
    return {"wall": wall, "cpu": cpu, "sent": sent, "messages": messages}


def _median_difference(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """The pairwise differences of the same rounds: (first quartile, median, third quartile)."""
    differences = sorted(x - y for x, y in zip(a, b, strict=True))
    quarter = len(differences) // 4
    return differences[quarter], statistics.median(differences), differences[-1 - quarter]


def summarize(path: str, size: int, measured: dict[str, Any]) -> dict[str, Any]:
    wall, cpu = measured["wall"], measured["cpu"]
    row: dict[str, Any] = {"path": path, "n": size}
    plain = statistics.median(wall["plain"]) if "plain" in wall else float("nan")
    row["plain_ms"] = plain
    for kind in wall:
        if kind != "plain" and "plain" in wall:
            row[f"{kind}_added_ms"] = statistics.median(wall[kind]) - plain
            row[f"{kind}_cpu_added_ms"] = statistics.median(cpu[kind]) - statistics.median(
                cpu["plain"]
            )
    if "live" in wall and "static" in wall:
        row["own_q"] = _median_difference(wall["live"], wall["static"])
        row["own_cpu_q"] = _median_difference(cpu["live"], cpu["static"])
    if measured["sent"]:
        row["messages"] = statistics.median(measured["messages"])
        row["sent_kb"] = statistics.median(measured["sent"]) / 1000
    return row


def print_row(row: dict[str, Any]) -> None:
    nan = float("nan")
    parts = [f"{row['path']:7} {row['n']:>8,} {row['plain_ms']:6.1f} ms"]
    for kind in KINDS[1:]:
        wall = row.get(f"{kind}_added_ms", nan)
        cpu = row.get(f"{kind}_cpu_added_ms", nan)
        parts.append(f"{wall:6.1f} / {cpu:5.1f}")
    q1, own, q3 = row.get("own_q", (nan, nan, nan))
    _, own_cpu, _ = row.get("own_cpu_q", (nan, nan, nan))
    parts.append(f"{own:6.1f} ({q1:5.1f} – {q3:5.1f}) / {own_cpu:5.1f}")
    parts.append(f"{row.get('messages', nan):4g} {row.get('sent_kb', nan):6.2f} kB")
    print("  ".join(parts), flush=True)


HEADER = (
    f"{'path':7} {'N':>8} {'plain':>9}  {'static added':>14}  {'live added':>14}"
    f"  {'sidebar added':>14}  {'live table own (q1 – q3)':>30}  {'msgs':>4} {'sent':>9}\n"
    f"{'':26}{'(wall / cpu ms)':>14}  {'(wall / cpu ms)':>14}  {'(wall / cpu ms)':>14}"
    f"  {'(wall ms ... / cpu ms)':>30}"
)


def run_path(path: str, sizes: list[int], kinds: list[str], cells: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    kernels: dict[str, Kernel] = {}
    try:
        reached = 0
        for size in sizes:
            if path == "one-go" or not kernels:
                for kernel in kernels.values():
                    kernel.close()
                kernels = {kind: start(kind) for kind in kinds}
                reached = 0
            grow(list(kernels.values()), reached, size, STAGE_CELLS if path == "staged" else 1)
            reached = size
            row = summarize(path, size, per_cell(kernels, size, cells))
            print_row(row)
            rows.append(row)
    finally:
        for kernel in kernels.values():
            kernel.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", nargs="+", default=["staged", "one-go"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[2_000, 100_000])
    parser.add_argument("--cells", type=int, default=12, help="small cells per measurement")
    parser.add_argument("--kernels", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument(
        "--checkout",
        type=Path,
        default=views.ROOT,
        help="the checkout the kernels import torchdevice_magic from (another commit's, for a"
        " baseline measured the same minutes)",
    )
    args = parser.parse_args()
    views.ROOT = args.checkout.resolve()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; the sidebar's targets:"
          " <= 2 ms added at 2,000, <= 20 ms at 100,000")  # fmt: skip
    print(HEADER)
    started = time.perf_counter()
    for path in args.paths:
        run_path(path, args.sizes, args.kernels, args.cells)
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
