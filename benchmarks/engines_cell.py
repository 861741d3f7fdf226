"""Issue 25 figure: what the extension adds to a ``%%px`` cell on each ipyparallel engine.

A real cluster (``ipp.Cluster(n=2)``), each engine with the simulated accelerator and a
namespace of a small model, its Adam state after one step and 200 tensors. Two cells: a forward
pass under ``no_grad`` and one whose result keeps its autograd graph. Each round runs the
same cell on both engines as ``%%px`` sends it (``execute(cell, silent=False)``: the hooks run)
twice: once with the extension loaded and once with it unloaded (``%unload_ext``), in
alternating order. Time is the engine's own: from the moment it started the request to the
date on its reply (ipyparallel's ``started`` and ``completed`` metadata), so the client's and
the network's share is not in it. Figures per engine: median of the per-round differences
(target <= 5 ms) and of the per-round ratios. A failing cell (the diagnosis' cost) is printed
for reference, and the same two cells in this process's own IPython shell (no engine, the
same namespace): what the ordinary hook costs there.

Run: ``python benchmarks/engines_cell.py [rounds]`` from the repository root.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

SETUP = """
from torchdevice_magic.testing import simulated_accelerator
simulated_accelerator()
import torch
bench_model = torch.nn.Sequential(
    torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
).to("simdev:0")
bench_opt = torch.optim.Adam(bench_model.parameters())
bench_batch = torch.randn(32, 64, device="simdev:0")
bench_model(bench_batch).sum().backward()
bench_opt.step()
bench_tensors = [torch.randn(16, 16) for _ in range(200)]
"""
#: a forward pass whose result keeps its autograd graph (the memory timeline then looks for
#: what the graph holds), and the same pass under no_grad
CELL = "bench_out = bench_model(bench_batch)\nbench_loss = bench_out.sum()\n"
NO_GRAD_CELL = "with torch.no_grad():\n    bench_out = bench_model(bench_batch)\n"
FAILING = "bench_cpu = torch.randn(32, 64)\nbench_out = bench_model(bench_cpu)\n"


def engine_seconds(view: Any, cell: str) -> list[float]:
    """Each engine's own time for ``cell`` run as ``%%px`` runs it."""
    result = view.execute(cell, silent=False, block=False)
    try:
        result.get(timeout=120)
    except Exception as error:  # the failing cell fails on every engine, as it should
        if "CompositeError" not in type(error).__name__:
            raise
    return [(md["completed"] - md["started"]).total_seconds() for md in result.metadata]


def measure(view: Any, cell: str, rounds: int) -> list[tuple[list[float], list[float]]]:
    """Per round: (each engine's time with the extension, each engine's time without)."""
    out = []
    for round_number in range(rounds):
        times: dict[bool, list[float]] = {}
        for loaded in (True, False) if round_number % 2 else (False, True):
            view.execute(
                "%load_ext torchdevice_magic" if loaded else "%unload_ext torchdevice_magic",
                silent=False,
                block=True,
            )
            engine_seconds(view, "bench_warm = 1")  # the next cell is not the first after it
            times[loaded] = engine_seconds(view, cell)
        out.append((times[True], times[False]))
    return out


def report(name: str, rounds: list[tuple[list[float], list[float]]], target: str) -> None:
    engines = len(rounds[0][0])
    for engine in range(engines):
        added = [(w[engine] - wo[engine]) * 1e3 for w, wo in rounds]
        ratio = [w[engine] / wo[engine] for w, wo in rounds if wo[engine] > 0]
        with_ms = statistics.median(w[engine] for w, _ in rounds) * 1e3
        without_ms = statistics.median(wo[engine] for _, wo in rounds) * 1e3
        quartiles = statistics.quantiles(added, n=4)
        print(
            f"{name} engine {engine}: added {statistics.median(added):6.2f} ms "
            f"(quartiles {quartiles[0]:.2f} - {quartiles[2]:.2f}; {target}); "
            f"ratio {statistics.median(ratio):5.2f}; "
            f"with {with_ms:6.2f} ms, without {without_ms:6.2f} ms (medians)"
        )


def in_process(cell: str, rounds: int) -> list[float]:
    """The same comparison in this process's IPython shell (no engine): per round, the mean
    time of 10 runs of ``cell`` with the extension minus without it, in ms."""
    import time

    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    if "bench_model" not in shell.user_ns:
        shell.run_cell(SETUP)

    def mean_ms(runs: int = 10) -> float:
        start = time.perf_counter()
        for _ in range(runs):
            shell.run_cell(cell)
        return (time.perf_counter() - start) / runs * 1e3

    added = []
    for _ in range(rounds):
        shell.run_line_magic("load_ext", "torchdevice_magic")
        mean_ms(2)
        loaded = mean_ms()
        shell.run_line_magic("unload_ext", "torchdevice_magic")
        mean_ms(2)
        added.append(loaded - mean_ms())
    return added


def main() -> None:
    import ipyparallel as ipp

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    cluster = ipp.Cluster(n=2, log_level=40)
    client = cluster.start_and_connect_sync()
    try:
        client.wait_for_engines(2, timeout=120)
        view = client[:]
        view.execute(SETUP, block=True)
        print(f"2 engines, {rounds} rounds, extension loaded / unloaded alternating")
        report("no_grad cell", measure(view, NO_GRAD_CELL, rounds), "target <= 5 ms")
        report("graph cell  ", measure(view, CELL, rounds), "target <= 5 ms")
        report("failing cell", measure(view, FAILING, max(5, rounds // 3)), "for reference")
    finally:
        client.close()
        cluster.stop_cluster_sync()
    for name, cell in (("no_grad cell", NO_GRAD_CELL), ("graph cell  ", CELL)):
        added = in_process(cell, 15)
        quartiles = statistics.quantiles(added, n=4)
        print(
            f"{name} in this process (no engine): added {statistics.median(added):6.2f} ms "
            f"(quartiles {quartiles[0]:.2f} - {quartiles[2]:.2f})"
        )


if __name__ == "__main__":
    main()
