"""Issue figure: tracing overhead, ``trace(cell)`` against the same cell run untraced
(``exec`` of the same compiled code), interleaved round by round in one run.

Cells:
  small   1,000 small ops on 64-element float32 tensors (a loop of 250 x 4 elementwise ops)
  matmul  a cell dominated by 512x512 float32 matmuls (20 of them, plus a few small ops)

Prints:
  small_ops_ratio   traced / untraced   (target <= 5)
  matmul_ratio      traced / untraced   (target <= 1.2)
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


def run_plain(code, namespace):
    exec(code, namespace)


def measure(name: str, cell: str, namespace: dict, target: float, rounds: int) -> float:
    code = compile(cell, "<bench>", "exec")
    report = trace(cell, namespace)
    assert report.error is None, report.error
    ratio, traced, plain = median_ratio(
        lambda: trace(cell, namespace), lambda: run_plain(code, namespace), rounds=rounds
    )
    print(
        f"{name + '_ratio:':<18} {ratio:6.2f}  (traced {traced * 1e3:.2f} ms, untraced "
        f"{plain * 1e3:.2f} ms, {report.ops} ops traced; target <= {target})"
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


if __name__ == "__main__":
    main()
