"""How much does ``move()`` cost over a bare ``.to()`` loop, and how fast does it fill a GPU?

    .venv/bin/python benchmarks/move.py [--repeats 15] [--tensors 10000]

1. ``meta``: 10,000 small tensors (64x64 float32) through ``move(ns, "meta")`` against
   ``{k: v.to("meta") for k, v in ns.items()}``, alternating in the same run; medians.
   ``meta`` runs the real move path without copying data, so this is the bookkeeping
   overhead (checks, plan, rollback records, rebinding, still-held accounting). Target <= 1.3.
2. CUDA (skipped without a GPU): 1 GiB in 10,000 tensors, cpu -> cuda, through ``move()``
   against a naive per-tensor ``.to("cuda")`` loop and one pinned 1 GiB copy; GB/s and ratios.
   Target: ``move()`` reaches >= 80% of the pinned copy's bandwidth.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchdevice_magic.moves import move  # noqa: E402


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    finally:
        gc.enable()


def bench_meta(n: int, repeats: int) -> None:
    tensors = {f"t{i}": torch.randn(64, 64) for i in range(n)}
    move_times, loop_times, ratios = [], [], []
    for i in range(repeats + 1):  # the first round warms up
        box: list[object] = []
        ns = dict(tensors)
        plain = dict(tensors)
        # alternate which goes first, so drift and cache effects fall on both sides
        order = ("move", "loop") if i % 2 else ("loop", "move")
        times = {}
        for what in order:
            if what == "move":
                times[what] = timed(lambda ns=ns, box=box: box.append(move(ns, "meta")))
            else:
                times[what] = timed(lambda plain=plain: {k: v.to("meta") for k, v in plain.items()})
        result = box[0]
        assert result.ok and len(result.moved) == n, result.summary()  # type: ignore[attr-defined]
        if i:
            move_times.append(times["move"])
            loop_times.append(times["loop"])
            ratios.append(times["move"] / times["loop"])
    m = statistics.median(move_times) * 1000
    p = statistics.median(loop_times) * 1000
    print(
        f"move_overhead_ratio: {m / p:.2f}  (move {m:.1f} ms vs plain loop {p:.1f} ms, "
        f"{n} tensors, medians of {repeats}; median of per-round ratios "
        f"{statistics.median(ratios):.2f}; target <= 1.3)"
    )
    print(f"meta_move_per_tensor_us: {m * 1000 / n:.2f}  (plain loop {p * 1000 / n:.2f})")


def bench_cuda(n: int, repeats: int) -> None:
    if not torch.cuda.is_available():
        print("cuda: skipped (CUDA is not available in this kernel)")
        return
    total_bytes = 1 << 30
    per = total_bytes // (4 * n)
    sources = {f"t{i}": torch.randn(per) for i in range(n)}
    moved_bytes = per * 4 * n
    gib = moved_bytes / 2**30
    dev = torch.device("cuda", 0)
    torch.ones(1, device=dev)  # create the context outside the timings

    def run_move() -> None:
        ns = dict(sources)
        result = move(ns, dev)
        assert result.ok, result.failed
        del ns

    def run_naive() -> None:
        out = {k: v.to(dev) for k, v in sources.items()}
        torch.cuda.synchronize(dev)
        del out

    pinned = torch.empty(moved_bytes // 4, pin_memory=True)

    def run_pinned() -> None:
        out = pinned.to(dev, non_blocking=True)
        torch.cuda.synchronize(dev)
        del out

    pinned_sources = {k: v.pin_memory() for k, v in sources.items()}

    def run_move_pinned() -> None:
        ns = dict(pinned_sources)
        result = move(ns, dev)
        assert result.ok, result.failed
        del ns

    results: dict[str, list[float]] = {"move": [], "naive": [], "pinned": [], "move_pinned": []}
    runs = {
        "move": run_move,
        "naive": run_naive,
        "pinned": run_pinned,
        "move_pinned": run_move_pinned,
    }
    for i in range(repeats + 1):
        for name, fn in runs.items():
            t = timed(fn)
            torch.cuda.synchronize(dev)
            torch.cuda.empty_cache()
            if i:
                results[name].append(t)
    med = {k: statistics.median(v) for k, v in results.items()}
    gbps = {k: moved_bytes / v / 1e9 for k, v in med.items()}
    for name in ("move", "move_pinned", "naive", "pinned"):
        print(
            f"{name}_cuda_gbps: {gbps[name]:.1f}  ({med[name] * 1000:.1f} ms for {gib:.2f} GiB "
            f"in {n if name != 'pinned' else 1} tensor(s))"
        )
    print(f"move_vs_pinned_ratio: {gbps['move'] / gbps['pinned']:.2f}  (target >= 0.80)")
    print(f"move_pinned_vs_pinned_ratio: {gbps['move_pinned'] / gbps['pinned']:.2f}")
    print(f"move_vs_naive_ratio: {gbps['move'] / gbps['naive']:.2f}  (> 1: move is faster)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--tensors", type=int, default=10_000)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}")
    bench_meta(args.tensors, args.repeats)
    bench_cuda(args.tensors, max(3, args.repeats // 3))


if __name__ == "__main__":
    main()
