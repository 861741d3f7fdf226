"""Issue figure: tracing overhead, ``trace(cell)`` against the same cell run untraced
(``exec`` of the same compiled code), interleaved round by round in one run.

Cells:
  small   1,000 small ops on 64-element float32 tensors (a loop of 250 x 4 elementwise ops)
  matmul  a cell dominated by 512x512 float32 matmuls (20 of them, plus a few small ops)

  training (for reference, no target) 10 steps of a 6-layer MLP (64 wide, batch 8): forward,
          backward, SGD step, loss.item() -- modules tracked, backward ops dispatched too

Each figure is the median of per-round ratios, untraced and traced interleaved round by round,
by two clocks: wall time (perf_counter) and the process's CPU time (process_time, all threads),
which a shared, overloaded machine disturbs much less (its other tenants take wall time, not our
CPU time).

Prints:
  small_ops_ratio   traced / untraced   (target <= 5)
  matmul_ratio      traced / untraced   (target <= 1.2)
  training_ratio    traced / untraced   (reference)
"""

from __future__ import annotations

import gc
import os
import platform
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


def median_ratios(function, baseline, rounds: int) -> tuple[float, float, float, float]:
    """(wall ratio, cpu ratio, median traced wall seconds, median untraced wall seconds)."""
    for _ in range(3):
        function()
        baseline()
    wall, cpu, traced, plain = [], [], [], []
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            w0, c0 = time.perf_counter(), time.process_time()
            baseline()
            w1, c1 = time.perf_counter(), time.process_time()
            function()
            w2, c2 = time.perf_counter(), time.process_time()
            wall.append((w2 - w1) / (w1 - w0))
            cpu.append((c2 - c1) / max(c1 - c0, 1e-9))
            traced.append(w2 - w1)
            plain.append(w1 - w0)
    finally:
        gc.enable()
    middle = rounds // 2
    return (
        sorted(wall)[middle],
        sorted(cpu)[middle],
        sorted(traced)[middle],
        sorted(plain)[middle],
    )


def measure(name: str, cell: str, namespace: dict, target: float | None, rounds: int) -> float:
    code = compile(cell, "<bench>", "exec")
    report = trace(cell, namespace)
    assert report.error is None, report.error
    wall, cpu, traced, plain = median_ratios(
        lambda: trace(cell, namespace), lambda: run_plain(code, namespace), rounds=rounds
    )
    goal = f"target <= {target}" if target else "reference"
    print(
        f"{name + '_ratio:':<18} wall {wall:5.2f}  cpu {cpu:5.2f}  (traced {traced * 1e3:.2f} ms, "
        f"untraced {plain * 1e3:.2f} ms, {report.ops} ops traced; {goal})"
    )
    return wall


def main() -> None:
    torch.manual_seed(0)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads"
    )
    print("ratios: medians of per-round ratios (untraced and traced interleaved), wall and cpu")
    measure("small_ops", SMALL, {"x": torch.randn(64)}, 5, rounds=41)
    measure(
        "matmul",
        MATMUL,
        {"a": torch.randn(512, 512), "b": torch.randn(512, 512)},
        1.2,
        rounds=21,
    )
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
    main()
