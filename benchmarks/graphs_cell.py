"""Issue 21 item 3 / issue 25: what the post-cell hook adds to a cell whose result keeps its
autograd graph (``out = model(x); loss = out.sum()``, no backward), where the memory timeline
looks for the tensors each kept graph saved.

In this process's IPython shell, two namespaces: the engines' one (a small model on the
simulated accelerator, Adam after one step, 200 tensors; ``benchmarks/engines_cell.py``) and
the issue's 2,000-object one (``benchmarks/_namespace.py``) with the same small model on the
CPU. Each round runs the graph cell 10 times with the extension loaded and 10 times with it
unloaded and 10 times loaded with the graph holders left out (``_graph_source`` answering
None), rotating which goes first; the figures are medians over rounds of the per-cell
differences (ms): what the hook adds, and the graph holders' share of it. Counted, not timed
(the same on any load): graph walks per cell, the autograd nodes they visit, and the
``scan()`` calls the graph holders make for the tensors the graphs saved.

A third namespace: a trainer object holding a 100,000-float history, the cell
``trainer.step()`` (what the graph holders' look at an object's attributes costs where a list
attribute is long: its last 4,096 elements are read).

Run: ``python benchmarks/graphs_cell.py [rounds]`` from the repository root.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engines_cell import CELL, SETUP  # noqa: E402

CPU_SETUP = """
import torch
from _namespace import build_namespace
globals().update(build_namespace())
bench_model = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
)
bench_opt = torch.optim.Adam(bench_model.parameters())
bench_batch = torch.randn(32, 64)
bench_model(bench_batch).sum().backward()
bench_opt.step()
"""


#: an object whose list attribute is long: the graph holders look at its last elements only
TRAINER_SETUP = """
import torch
class Trainer:
    def __init__(self):
        self.model = torch.nn.Linear(64, 10)
        self.history = [0.5] * 100_000
    def step(self):
        self.history.append(self.model(torch.randn(8, 64)).sum().item())
trainer = Trainer()
"""
TRAINER_CELL = "trainer.step()\n"


def nodes_in(roots: list[Any]) -> int:
    """Autograd nodes reachable from ``roots`` (what one walk of their graphs visits)."""
    seen: set[int] = set()
    stack = [r.grad_fn for r in roots if r.grad_fn is not None]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            stack.extend(child for child, _ in node.next_functions if child is not None)
    return len(seen)


def per_cell_ms(shell: Any, runs: int = 10, cell: str = CELL) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        shell.run_cell(cell)
    return (time.perf_counter() - start) / runs * 1e3


def measure(shell: Any, rounds: int, cell: str = CELL) -> tuple[list[float], list[float]]:
    """Per round: (ms the hook adds per cell, ms of it that the graph holders take: loaded with
    the graph holders versus loaded without them)."""
    from torchdevice_magic.memory import sources

    original, original_attributes = sources._graph_source, sources._attribute_graph_sources
    extensions = shell.extension_manager
    added, graphs_share = [], []
    for round_number in range(rounds):
        times = {}
        order = ["off", "on", "no graphs"]
        for variant in order[round_number % 3 :] + order[: round_number % 3]:
            if variant == "off":
                extensions.unload_extension("torchdevice_magic")
            else:
                extensions.load_extension("torchdevice_magic")
            if variant == "no graphs":
                sources._graph_source = lambda *arguments: None
                sources._attribute_graph_sources = lambda *arguments: []
            try:
                per_cell_ms(shell, 2, cell)
                times[variant] = per_cell_ms(shell, cell=cell)
            finally:
                sources._graph_source = original
                sources._attribute_graph_sources = original_attributes
        added.append(times["on"] - times["off"])
        graphs_share.append(times["on"] - times["no graphs"])
    extensions.unload_extension("torchdevice_magic")
    return added, graphs_share


def count_walks(shell: Any, cell: str = CELL) -> tuple[int, int, int]:
    """(graph walks, nodes visited, scans of saved tensors) in one run of the graph cell with
    the extension loaded."""
    from torchdevice_magic.memory import graphs

    walked: list[int] = []
    scans: list[int] = []
    original, original_scan = graphs.graph_tensors, graphs._keys_of

    def counting(roots: Any, limit: int = 200_000) -> list[Any]:
        roots = list(roots)
        walked.append(nodes_in(roots))
        return original(roots, limit)

    def counting_scans(parts: Any) -> Any:
        scans.append(1)
        return original_scan(parts)

    shell.extension_manager.load_extension("torchdevice_magic")
    shell.run_cell(cell)
    graphs.graph_tensors = counting  # type: ignore[assignment]
    graphs._keys_of = counting_scans  # type: ignore[assignment]
    try:
        shell.run_cell(cell)
    finally:
        graphs.graph_tensors, graphs._keys_of = original, original_scan  # type: ignore[assignment]
        shell.extension_manager.unload_extension("torchdevice_magic")
    return len(walked), sum(walked), len(scans)


def main() -> None:
    from IPython.testing.globalipapp import get_ipython

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    shell = get_ipython()
    for name, setup, cell in (
        ("graph cell, engines' namespace (simdev)", SETUP, CELL),
        ("graph cell, 2,000 objects (cpu)", CPU_SETUP, CELL),
        ("trainer.step(), a trainer holding a 100,000-float history", TRAINER_SETUP, TRAINER_CELL),
    ):
        shell.reset(new_session=False)
        shell.run_cell(setup)
        walks, nodes, scans = count_walks(shell, cell)
        added, graphs_share = measure(shell, rounds, cell)
        quartiles = statistics.quantiles(added, n=4)
        print(
            f"{name}: added {statistics.median(added):5.2f} ms per cell "
            f"(quartiles {quartiles[0]:.2f} - {quartiles[2]:.2f}), of which the graph "
            f"holders {statistics.median(graphs_share):5.2f} ms; "
            f"{walks} graph walks, {nodes} autograd nodes visited, {scans} scans of saved "
            "tensors per cell"
        )


if __name__ == "__main__":
    main()
