"""Issue 24's speed figure: a dry run of a forward + backward + optimizer step of a model with
about 100M parameters, against the real step on the same CPU, in the same process.

The model is a stack of ``Linear(4096, 4096)`` layers (6 of them: 100.7M parameters) with
AdamW; the cell is ``loss = model(x).square().mean(); loss.backward(); opt.step()`` on a
batch of 64. The real step is timed once the model and its optimizer state exist (as in a
notebook's second training cell; the first step would also allocate AdamW's state); the dry
run is timed on the same namespace, after one dry run that imports what it needs.

    python benchmarks/dryrun_speed.py [--layers 6] [--width 4096] [--batch 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from torchdevice_magic import dry_run  # noqa: E402
from torchdevice_magic.units import format_bytes  # noqa: E402

CELL = "loss = model(x).square().mean()\nloss.backward()\nopt.step()\nopt.zero_grad()"


def namespace(layers: int, width: int, batch: int) -> dict:
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ns = {"torch": torch, "model": model, "opt": opt, "x": torch.randn(batch, width)}
    exec(CELL, ns)  # AdamW's state exists, as after a first training cell
    return ns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ns = namespace(args.layers, args.width, args.batch)
    params = sum(p.numel() for p in ns["model"].parameters())
    dry_run(CELL, ns)  # the imports (diagnose, the fake mode) happen once per kernel
    real, dry = [], []
    for _ in range(args.rounds):
        started = time.perf_counter()
        exec(CELL, ns)
        real.append(time.perf_counter() - started)
        started = time.perf_counter()
        report = dry_run(CELL, ns)
        dry.append(time.perf_counter() - started)
    assert report.completed and not report.device_error, report.text()
    real_s, dry_s = statistics.median(real), statistics.median(dry)
    print(f"model: {params / 1e6:.1f}M parameters, batch {args.batch}, AdamW")
    print(f"real step {real_s:.2f} s   dry run {dry_s:.2f} s   dry / real {dry_s / real_s:.2f}")
    print(
        f"predicted peak on cpu {format_bytes(report.memory.peak['cpu'])}, "
        f"left {format_bytes(report.memory.left['cpu'])}, "
        f"start {format_bytes(report.memory.start['cpu'])}"
    )


if __name__ == "__main__":
    main()
