"""Other everyday cells with the sidebar open at N names (a companion to ``views.py``, through
the same real kernels over the wire).

``views.py`` measures the targets (a small cell rebinding one name, opening the sidebar, on
every growth path). This prints what other cells cost once the namespace was made by one cell,
each against the same cell in a kernel without the extension (one run each, in order, so every
cell sees the state the one before it left): a row entering and leaving the window, a cell
binding an int (sends nothing), ``del`` of a name, a new tensor, and a new alias of another
name (sharing changed: the view looks at everything again, by design).
Run: ``python benchmarks/views_cells.py [N]``.
"""

from __future__ import annotations

import sys

from views import Kernel, grow

CELLS = [
    "t5 = torch.zeros(1000)",
    "t5 = torch.zeros(4)",
    "del t7",
    "x = 1",
    "y = torch.ones(3)",
    "t9 = t10",
]


def main(n: int) -> None:
    with_ext, without = Kernel(sidebar=True), Kernel(sidebar=False)
    try:
        grow([with_ext, without], 0, n, 1)
        print(f"N = {n:,}")
        print(f"{'cell':28} {'without ext':>12} {'with sidebar':>13} {'added':>9} {'sent':>8}")
        for cell in CELLS:
            took, sent = with_ext.run(cell)
            plain, _ = without.run(cell)
            print(
                f"{cell!r:28} {plain * 1e3:9.2f} ms {took * 1e3:10.2f} ms"
                f" {(took - plain) * 1e3:6.1f} ms {sent:6d} B"
            )
    finally:
        with_ext.close()
        without.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
