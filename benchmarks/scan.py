"""Issue 11 "Speed": scan() cost as a ratio to a floor loop measured in the same run.

Namespace (``_namespace.build_namespace``): 2,000 tensors of 64x64 float32, a 24-layer
TransformerEncoder (d_model 256, 8 heads, feedforward 512) with Adam after one step, a dict
batch of two tensors, a list of 100 tensors, 200 ints.

Floor (``_namespace.floor_facts``): visit each value; for each tensor (top-level, in a top-level
container, module parameters/buffers, their gradients, optimizer state) read its storage's
data_ptr()/nbytes(), device, dtype and shape once -- the facts the table needs. Top-level
tensors' gradients are looked for too (requires_grad, then .grad); the ratio against the
literal floor without them is printed as well. Floor and scan alternate which runs first.

Prints:
  full_scan_ratio       full scan / floor                                       (target <= 1.2)
  incremental_ratio     rescan after a cell that rebound 10 names / floor
  no_tensor_objects     what 200,000 floats in a list, a 50,000-key dict of ints and 1,000
                        plain objects without tensors add to a full scan and to a rescan
  curve                 200 / 2,000 / 20,000 / 100,000 top-level tensors: full scan, floor,
                        ratio, and the incremental rescan after a 10-name cell
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _namespace import (  # noqa: E402
    build_namespace,
    floor_facts,
    median_ratio,
    median_seconds,
    ratio_rounds,
)

import torchdevice_magic as tdm  # noqa: E402
from torchdevice_magic.scan import Scanner  # noqa: E402


class _Plain:
    def __init__(self, i: int) -> None:
        self.name = f"object {i}"
        self.size = i
        self.ratio = i / 3
        self.tags = ["a", "b"]
        self.options = {"lr": 0.1}


def _rebinder(namespace: dict, count: int = 10):
    """What a cell that assigns ``count`` tensors does (not timed): alternate two sets."""
    replacements = [[torch.randn(8, 8) for _ in range(count)] for _ in range(2)]
    names = [f"t{i}" for i in range(count)]
    turn = [0]

    def rebind() -> None:
        turn[0] += 1
        for name, tensor in zip(names, replacements[turn[0] % 2], strict=True):
            namespace[name] = tensor

    return rebind, names


def _incremental(namespace: dict, rounds: int) -> float:
    """Median seconds of the hook's rescan after a cell that rebound 10 names."""
    rebind, names = _rebinder(namespace)
    scanner = Scanner()
    scanner.scan(namespace)

    def cell_then_rescan() -> None:
        scanner.scan(namespace, changed=names)

    # the rebinding happens between timed calls: time only the rescan
    times = []
    import gc
    import time

    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds + 3):
            rebind()
            start = time.perf_counter()
            cell_then_rescan()
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    times = sorted(times[3:])
    return times[len(times) // 2]


def main() -> None:
    namespace = build_namespace()
    floor = lambda: floor_facts(namespace)  # noqa: E731
    rounds = 31
    ratios, times, floors = ratio_rounds(lambda: tdm.scan(namespace), floor, rounds)
    full_ratio, full, floor_time = ratios[rounds // 2], times[rounds // 2], floors[rounds // 2]
    quartiles = f"{ratios[rounds // 4]:.2f} - {ratios[3 * rounds // 4]:.2f}"
    literal = lambda: floor_facts(namespace, top_level_grads=False)  # noqa: E731
    literal_ratio, _, literal_time = median_ratio(lambda: tdm.scan(namespace), literal, rounds)
    records_ratio, records, _ = median_ratio(lambda: tdm.scan(namespace).records, floor)
    rebind, names = _rebinder(namespace)
    scanner = Scanner()
    scanner.scan(namespace)
    incremental_ratio, incremental, _ = median_ratio(
        lambda: scanner.scan(namespace, changed=names), floor, before_each=rebind
    )

    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}")
    print(f"floor loop:            {floor_time * 1e3:8.3f} ms  (median; ratios are medians of")
    print("                                    per-round ratios, floor and scan interleaved)")
    print(
        f"full_scan_ratio:       {full_ratio:8.2f}  (scan {full * 1e3:.3f} ms; target <= 1.2; "
        f"middle half of the rounds {quartiles})"
    )
    print(
        f"  against the floor without top-level grads: {literal_ratio:.2f}  "
        f"(that floor {literal_time * 1e3:.3f} ms: requires_grad of top-level tensors unread)"
    )
    print(
        f"full_scan_with_records_ratio: {records_ratio:5.2f}  "
        f"(scan + building every Record {records * 1e3:.3f} ms)"
    )
    print(
        f"incremental_ratio:     {incremental_ratio:8.3f}  "
        f"(rescan after a 10-name cell, everything re-checked: {incremental * 1e3:.3f} ms)"
    )

    # objects without tensors must cost next to nothing
    extra = {
        "floats": [float(i) for i in range(200_000)],
        "vocab": {f"w{i}": i for i in range(50_000)},
        **{f"obj{i}": _Plain(i) for i in range(1_000)},
    }
    with_extra = {**namespace, **extra}
    base_full = median_seconds(lambda: tdm.scan(namespace), 11)
    extra_full = median_seconds(lambda: tdm.scan(with_extra), 11)
    base_rescan = _incremental(dict(namespace), 21)
    extra_rescan = _incremental(with_extra, 21)
    print(
        f"no_tensor_objects:     full scan +{(extra_full - base_full) * 1e3:.2f} ms "
        f"({extra_full / base_full:.2f}x), rescan +{(extra_rescan - base_rescan) * 1e3:.3f} ms "
        f"({extra_rescan / base_rescan:.2f}x)  [200,000 floats, 50,000-key dict, 1,000 objects]"
    )

    print("curve (top-level 8x8 float32 tensors):")
    print("       n   full scan      floor   ratio   rescan after 10-name cell")
    for n in (200, 2_000, 20_000, 100_000):
        curve_ns = {f"t{i}": torch.randn(8, 8) for i in range(n)}
        rounds = 21 if n <= 20_000 else 7
        ratio, scan_time, floor_n = median_ratio(
            lambda ns=curve_ns: tdm.scan(ns), lambda ns=curve_ns: floor_facts(ns), rounds
        )
        rescan = _incremental(curve_ns, rounds)
        print(
            f"{n:8,} {scan_time * 1e3:9.2f} ms {floor_n * 1e3:7.2f} ms {ratio:7.2f}   "
            f"{rescan * 1e3:8.3f} ms ({rescan / floor_n:.3f} of the floor)"
        )


if __name__ == "__main__":
    main()
