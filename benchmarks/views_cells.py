"""Other cells with the sidebar open at 100,000 names (a companion to ``views.py``).

``views.py`` measures the issue's figures (a cell rebinding one name; opening the sidebar).
This prints what other everyday cells cost in the same set-up, each against the same cell
with the extension not loaded (one run each, in order, so every cell sees the state the one
before it left): a row entering and leaving the window, a cell binding an int (sends nothing),
``del`` of a name (the scan and the book take it by name), a new tensor, and a new alias of
another name (sharing changed: the view looks at everything again, by design). Also the
first cell after ``%load_ext`` (a one-time cost). Run: ``python benchmarks/views_cells.py [N]``.
"""

from __future__ import annotations

import sys
import time

import torch
from IPython.testing.globalipapp import get_ipython
from views import FakeComm

from torchdevice_magic.shell import get_session

CELLS = [
    "t5 = torch.zeros(1000)",
    "t5 = torch.zeros(4)",
    "del t7",
    "x = 1",
    "y = torch.ones(3)",
    "t9 = t10",
]


def timed(shell, cell: str) -> float:
    start = time.perf_counter()
    shell.run_cell(cell, store_history=False)
    return time.perf_counter() - start


def fresh(shell, n: int) -> None:
    ns = shell.user_ns
    for name in [k for k in ns if k[:1] in "txy" and (k[1:].isdigit() or len(k) == 1)]:
        del ns[name]
    ns.update({f"t{i}": torch.zeros(4) for i in range(n)})


def main(n: int) -> None:
    shell = get_ipython()
    shell.run_cell("import torch", store_history=False)
    fresh(shell, n)
    baseline = {cell: timed(shell, cell) for cell in CELLS}
    fresh(shell, n)
    shell.run_line_magic("load_ext", "torchdevice_magic")
    first = timed(shell, "pass")
    session = get_session(shell)
    comm = FakeComm()
    start = time.perf_counter()
    session.channel._on_open(comm, {})
    opened = time.perf_counter() - start
    print(f"N = {n:,}: first cell after %load_ext {first * 1e3:.1f} ms; sidebar opened in "
          f"{opened * 1e3:.1f} ms")  # fmt: skip
    print(f"{'cell':28} {'without ext':>12} {'with sidebar':>13} {'added':>9} {'sent':>8}")
    for cell in CELLS:
        comm.sent.clear()
        took = timed(shell, cell)
        sent = sum(map(len, comm.sent))
        print(
            f"{cell!r:28} {baseline[cell] * 1e3:9.2f} ms {took * 1e3:10.2f} ms"
            f" {(took - baseline[cell]) * 1e3:6.1f} ms {sent:6d} B"
        )
    shell.run_line_magic("unload_ext", "torchdevice_magic")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
