"""Issue 24 figures for the dry run's memory forecast (torchdevice_magic/dryrun/memory.py).

1. The ten cells of tests/dryrun/memorycells.py: the peak predicted on fake tensors against the
   peak PyTorch's ``MemTracker`` measures in a real run on CPU (target: within 10%), and what the
   same counter says of the real run (the rule itself).
2. A forward + backward + AdamW step of a ~100M-parameter model: the dry run (fake copy of the
   namespace + fake run, counted) against the real run (uncounted), timed in the same process,
   interleaved, median of the repeats; and its predicted peak against the real run counted.

    python benchmarks/dryrun_memory.py [--repeats 3] [--skip-large]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "dryrun"))

from memorycells import (  # noqa: E402
    CELLS,
    TRAIN_STEP,
    Cell,
    counted,
    fake_copy,
    measured_by_memtracker,
    predicted,
)

from torchdevice_magic.dryrun.memory import MemoryCounter  # noqa: E402

MIB = 2**20


def accuracy_table() -> float:
    """Print the ten cells; return the worst relative error against MemTracker."""
    print(f"{'cell':32} {'predicted':>12} {'MemTracker':>12} {'error':>8} {'counted real':>13}")
    worst = 0.0
    for cell in CELLS:
        forecast, _ = predicted(cell)
        measured = measured_by_memtracker(cell)
        real, _ = counted(cell)
        error = (forecast.peak["cpu"] - measured) / measured
        worst = max(worst, abs(error))
        print(
            f"{cell.name:32} {forecast.peak['cpu'] / MIB:10.2f}Mi {measured / MIB:10.2f}Mi "
            f"{error:+8.3%} {real.peak['cpu'] / MIB:11.2f}Mi"
        )
    print(f"worst error: {worst:.3%} (target <= 10%)")
    return worst


def _large(device: str) -> dict[str, Any]:
    """Six 4096x4096 layers and a 4096 -> 10 head: 100.7M parameters."""
    layers: list[nn.Module] = []
    for _ in range(6):
        layers += [nn.Linear(4096, 4096), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(4096, 10))
    return {
        "model": model,
        "opt": torch.optim.AdamW(model.parameters(), lr=1e-4),
        "x": torch.randn(32, 4096),
        "y": torch.randint(0, 10, (32,)),
    }


LARGE = Cell("linear_100m_adamw_step", _large, TRAIN_STEP, True)


def _real_run() -> float:
    namespace = LARGE.namespace("cpu")
    started = time.perf_counter()
    LARGE.run(namespace)
    elapsed = time.perf_counter() - started
    del namespace
    gc.collect()
    return elapsed


def _dry_run() -> tuple[float, float, int]:
    """(seconds for fake copy + fake run, seconds for the fake run alone, predicted peak)."""
    namespace = LARGE.namespace("cpu")
    started = time.perf_counter()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    shadow = fake_copy(namespace, mode)
    copied = time.perf_counter()
    with mode, MemoryCounter(LARGE.filename) as counter:
        LARGE.run(shadow)
    forecast = counter.forecast(shadow)
    ended = time.perf_counter()
    del namespace, shadow
    gc.collect()
    return ended - started, ended - copied, forecast.peak["cpu"]


def large_model(repeats: int) -> None:
    namespace = LARGE.namespace("cpu")
    params = sum(p.numel() for p in namespace["model"].parameters())
    del namespace
    print(f"\n{LARGE.name}: {params / 1e6:.1f}M parameters, batch 32, AdamW")
    _dry_run()  # the first fake run pays for importing and warming fake mode's caches
    real_times: list[float] = []
    dry_times: list[float] = []
    fake_only: list[float] = []
    peak = 0
    for _ in range(repeats):
        real_times.append(_real_run())
        total, run_only, peak = _dry_run()
        dry_times.append(total)
        fake_only.append(run_only)
    real = statistics.median(real_times)
    dry = statistics.median(dry_times)
    print(f"real run (uncounted): {real:.2f} s (median of {repeats})")
    print(
        f"dry run (fake copy + fake run, counted): {dry:.2f} s; fake run alone: "
        f"{statistics.median(fake_only):.2f} s"
    )
    print(f"dry run / real run: {dry / real:.2f}x")
    real_forecast, _ = counted(LARGE)
    print(
        f"predicted peak {peak / MIB:.1f} Mi, real run counted {real_forecast.peak['cpu'] / MIB:.1f}"
        f" Mi ({(peak - real_forecast.peak['cpu']) / real_forecast.peak['cpu']:+.3%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-large", action="store_true")
    args = parser.parse_args()
    worst = accuracy_table()
    if not args.skip_large:
        large_model(args.repeats)
    if worst > 0.10:
        raise SystemExit(f"a predicted peak is {worst:.1%} off MemTracker's (target 10%)")


if __name__ == "__main__":
    main()
