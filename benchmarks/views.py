"""Issue 12 figures: what the sidebar costs per cell, and opening it.

With the sidebar's comm open (a stand-in comm in-process, as tests/shell/test_comm.py does), a cell
that rebinds one name in a namespace of N top-level tensors, against the same cell with the
extension not loaded, in the same run (interleaved rounds, garbage collector off):

    N        added ms per cell (target)     bytes sent per cell (target)
    2,000    <= 2 ms                        <= 16 kB
    100,000  <= 20 ms                       <= 16 kB

and opening the sidebar (the first window) on 100,000 objects <= 300 ms in the kernel.
The added time is split into the hook's own rescan (what the extension costs with no view
open) and the sidebar's part (the view model's delta + the message), so the figures say
which layer spends what. Run: ``python benchmarks/views.py [N ...]``.
"""

from __future__ import annotations

import gc
import json
import sys
import time

import torch
from IPython.testing.globalipapp import get_ipython

from torchdevice_magic.shell import get_session


class FakeComm:
    comm_id = "bench"

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: dict) -> None:
        # what ipykernel would put on the wire
        self.sent.append(json.dumps(data, separators=(",", ":")).encode())

    def on_msg(self, handler) -> None:
        self.handler = handler

    def on_close(self, handler) -> None:
        pass

    def close(self) -> None:
        pass


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def measure(shell, n: int, rounds: int, block: int = 5) -> dict[str, float]:
    ns = shell.user_ns
    for name in [k for k in ns if k.startswith("t") and k[1:].isdigit()]:
        del ns[name]
    ns.update({f"t{i}": torch.zeros(4) for i in range(n)})
    ns["flip"] = 0
    # rebinds one name; its size alternates, so the row moves in and out of the first window
    # (a cell whose rebinding shows nowhere would send nothing at all)
    cell = f"flip = 1 - flip\nt{n // 2} = torch.zeros(4 + 252 * flip)"

    def run() -> float:
        start = time.perf_counter()
        shell.run_cell(cell, store_history=False)
        return time.perf_counter() - start

    inventory_s: list[float] = []
    view_s: list[float] = []

    def split_push(session) -> None:
        """Time the sidebar's part of a cell in two: what the Inventory answers (what changed
        since the inventory the sidebar showed, the totals: the scanner's cost) and the view
        model + message. The sidebar never asks for every record (``inventory.records``)."""
        original = session.channel.push

        def push(s) -> None:
            if not session.channel.comms:  # the hook-only rounds: no sidebar, nothing to time
                return
            start = time.perf_counter()
            inventory = s.current_inventory()
            shown = next(iter(session.channel.comms.values())).live._source
            inventory.view_changes(shown)  # brings the book up to date; push then reads it
            inventory.device_totals()
            inventory.mixed_warnings()
            middle = time.perf_counter()
            original(s)
            inventory_s.append(middle - start)
            view_s.append(time.perf_counter() - middle)

        session.app.remove_listener(original)
        session.channel.push = push  # _attach/_detach now add and remove the wrapper
        session.app.add_listener(push)

    shell.run_line_magic("load_ext", "torchdevice_magic")
    session = get_session(shell)
    session.app.full_scan()
    comm = FakeComm()
    gc.collect()
    start = time.perf_counter()
    session.channel._on_open(comm, {})
    open_s = time.perf_counter() - start
    open_bytes = len(comm.sent[-1])
    split_push(session)
    for _ in range(3):
        run()
    inventory_s.clear()
    view_s.clear()

    # Blocks of cells in the steady state (the scanner has seen the namespace before), the
    # three set-ups alternating block by block so the VM's slow drifts hit them alike:
    # sidebar open / extension loaded without a view / extension not loaded.
    with_ext, without_ext, hook_only, sent = [], [], [], []
    warm = 2  # the first cells of a block settle the scanner's state: not measured
    gc.disable()
    try:
        for _ in range(rounds):
            for i in range(warm + block):
                comm.sent.clear()
                took = run()
                if i >= warm:
                    with_ext.append(took)
                    sent.append(sum(map(len, comm.sent)))
                else:
                    inventory_s.pop()
                    view_s.pop()
            session.channel._detach("bench")
            for i in range(warm + block):
                took = run()
                if i >= warm:
                    hook_only.append(took)
            shell.run_line_magic("unload_ext", "torchdevice_magic")
            for i in range(warm + block):
                took = run()
                if i >= warm:
                    without_ext.append(took)
            shell.run_line_magic("load_ext", "torchdevice_magic")
            session = get_session(shell)
            session.app.full_scan()
            comm = FakeComm()
            session.channel._on_open(comm, {})
            split_push(session)
    finally:
        gc.enable()
    shell.run_line_magic("unload_ext", "torchdevice_magic")
    base = _median(without_ext)
    return {
        "n": n,
        "cell_ms": base * 1e3,
        "added_ms": (_median(with_ext) - base) * 1e3,
        "hook_ms": (_median(hook_only) - base) * 1e3,
        "sidebar_ms": (_median(with_ext) - _median(hook_only)) * 1e3,
        "bytes": _median(sent),
        "inventory_ms": _median(inventory_s) * 1e3 if inventory_s else float("nan"),
        "view_ms": _median(view_s) * 1e3 if view_s else float("nan"),
        "open_ms": open_s * 1e3,
        "open_bytes": open_bytes,
    }


def main(sizes: list[int]) -> None:
    shell = get_ipython()
    shell.run_cell("import torch", store_history=False)
    print(
        f"{'N':>8} {'cell w/o ext':>13} {'added/cell':>11} {'(hook':>8} {'+ sidebar)':>11}"
        f" {'sent/cell':>10} {'open sidebar':>13} {'first window':>13}"
        f"   sidebar split: {'Inventory API':>13} {'view+msg':>9}"
    )
    for n in sizes:
        rounds = 4 if n <= 20_000 else 2
        r = measure(shell, n, rounds)
        print(
            f"{n:>8,} {r['cell_ms']:>10.2f} ms {r['added_ms']:>8.2f} ms {r['hook_ms']:>5.2f} ms"
            f" {r['sidebar_ms']:>8.2f} ms {r['bytes'] / 1000:>7.2f} kB {r['open_ms']:>10.1f} ms"
            f" {r['open_bytes'] / 1000:>9.1f} kB"
            f"                  {r['inventory_ms']:>10.2f} ms {r['view_ms']:>6.2f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [200, 2_000, 20_000, 100_000])
