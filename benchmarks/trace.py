"""Issue figure: tracing overhead, ``trace(cell)`` against the same cell run untraced
(``exec`` of the same compiled code), interleaved round by round in one run.

Cells:
  small   1,000 small ops on 64-element float32 tensors (a loop of 250 x 4 elementwise ops)
  matmul  a cell dominated by 512x512 float32 matmuls (20 of them, plus a few small ops)

  training (for reference, no target) 10 steps of a 6-layer MLP (64 wide, batch 8): forward,
          backward, SGD step, loss.item() -- modules tracked, backward ops dispatched too

Untraced and traced runs are interleaved round by round in one process. Two clocks: wall time
(perf_counter) and the process's CPU time (process_time, all threads), which the other tenants
of a shared machine disturb much less (they take wall time, not our CPU time). Each line prints:

  min      min traced / min untraced, on wall time: the quiet-run figure (the fastest round of
           each is the one nothing else interrupted); the target applies to it
  median   the median of per-round wall ratios (what a busy machine gives)
  cpu      min traced / min untraced, on CPU time

Prints, per cell: small_ops (target <= 5), matmul (target <= 1.2), training (reference). Run it
several times on a shared machine and report the spread of the min figure.
"""

from __future__ import annotations

import gc
import os
import platform
import sys
import time

import torch

from torchdevice_magic.trace import trace

SMALL = """\
for i in range(250):
    y = x + 1.0
    y = y * x
    y = y - 0.5
    y = y.relu()
"""

MATMUL = """\
for i in range(20):
    c = a @ b
    s = c.sum()
"""


TRAINING = """\
for i in range(10):
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
"""


def run_plain(code, namespace):
    exec(code, namespace)


def ratios(function, baseline, rounds: int) -> dict[str, float]:
    """min (wall), median (wall, per-round ratios), cpu (min) and the min times in seconds."""
    for _ in range(3):
        function()
        baseline()
    wall, cpu, wall_ratios = ([], []), ([], []), []
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            w0, c0 = time.perf_counter(), time.process_time()
            baseline()
            w1, c1 = time.perf_counter(), time.process_time()
            function()
            w2, c2 = time.perf_counter(), time.process_time()
            wall[0].append(w1 - w0)
            wall[1].append(w2 - w1)
            cpu[0].append(c1 - c0)
            cpu[1].append(c2 - c1)
            wall_ratios.append((w2 - w1) / (w1 - w0))
    finally:
        gc.enable()
    return {
        "min": min(wall[1]) / min(wall[0]),
        "median": sorted(wall_ratios)[rounds // 2],
        "cpu": min(cpu[1]) / max(min(cpu[0]), 1e-9),
        "traced": min(wall[1]),
        "untraced": min(wall[0]),
    }


def measure(name: str, cell: str, namespace: dict, target: float | None, rounds: int) -> float:
    code = compile(cell, "<bench>", "exec")
    report = trace(cell, namespace)
    assert report.error is None, report.error
    r = ratios(lambda: trace(cell, namespace), lambda: run_plain(code, namespace), rounds)
    goal = f"target <= {target}" if target else "reference"
    print(
        f"{name + '_ratio:':<16} min {r['min']:5.2f}  median {r['median']:5.2f}  "
        f"cpu {r['cpu']:5.2f}  (min traced {r['traced'] * 1e3:.2f} ms, untraced "
        f"{r['untraced'] * 1e3:.2f} ms, {report.ops} ops traced; {goal})"
    )
    return r["min"]


def main(only: list[str]) -> None:
    """Every cell, or only those named (``python benchmarks/trace.py small_ops``)."""
    torch.manual_seed(0)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads"
    )
    print(f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if not only or "small_ops" in only:
        measure("small_ops", SMALL, {"x": torch.randn(64)}, 5, rounds=101)
    if not only or "matmul" in only:
        measure(
            "matmul",
            MATMUL,
            {"a": torch.randn(512, 512), "b": torch.randn(512, 512)},
            1.2,
            rounds=21,
        )
    if only and "training" not in only:
        return
    layers = [m for _ in range(6) for m in (torch.nn.Linear(64, 64), torch.nn.ReLU())]
    model = torch.nn.Sequential(*layers)
    namespace = {
        "model": model,
        "x": torch.randn(8, 64),
        "optimizer": torch.optim.SGD(model.parameters(), lr=1e-3),
        "losses": [],
    }
    measure("training", TRAINING, namespace, None, rounds=21)


if __name__ == "__main__":
    main(sys.argv[1:])
