"""Issue figure: tracing overhead, ``trace(cell)`` against the same cell run untraced
(``exec`` of the same compiled code), interleaved round by round in one run.

Cells:
  small   1,000 small ops on 64-element float32 tensors (a loop of 250 x 4 elementwise ops)
  matmul  a cell dominated by 512x512 float32 matmuls (20 of them, plus a few small ops)

  training (for reference, no target) 10 steps of a 6-layer MLP (64 wide, batch 8): forward,
          backward, SGD step, loss.item() -- modules tracked, backward ops dispatched too

Prints:
  small_ops_ratio   traced / untraced   (target <= 5)
  matmul_ratio      traced / untraced   (target <= 1.2)
  training_ratio    traced / untraced   (reference)
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _namespace import median_ratio  # noqa: E402

from torchdevice_magic.trace import trace  # noqa: E402

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


def measure(name: str, cell: str, namespace: dict, target: float | None, rounds: int) -> float:
    code = compile(cell, "<bench>", "exec")
    report = trace(cell, namespace)
    assert report.error is None, report.error
    ratio, traced, plain = median_ratio(
        lambda: trace(cell, namespace), lambda: run_plain(code, namespace), rounds=rounds
    )
    print(
        f"{name + '_ratio:':<18} {ratio:6.2f}  (traced {traced * 1e3:.2f} ms, untraced "
        f"{plain * 1e3:.2f} ms, {report.ops} ops traced; "
        + (f"target <= {target})" if target else "reference)")
    )
    return ratio


def main() -> None:
    torch.manual_seed(0)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads"
    )
    print("ratios are medians of per-round ratios (untraced and traced interleaved)")
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
