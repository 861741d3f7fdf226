"""Issue figure: scan() cost as a ratio to a floor loop measured in the same run.

Namespace: 2,000 tensors of 64x64 float32, a 24-layer TransformerEncoder (d_model 256, 8 heads,
feedforward 512) with Adam after one step, a dict batch of two tensors, a list of 100 tensors,
200 ints. Floor: visit each value; for each tensor or module parameter/buffer read
untyped_storage() data_ptr() and nbytes() into a set.

Prints:
  full_scan_ratio        full scan / floor                       (target <= 1.5)
  incremental_ratio      rescan after 10 rebound names / floor   (target <= 0.2)
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _namespace import build_namespace, floor_scan, median_seconds  # noqa: E402

import torchdevice_magic as tdm  # noqa: E402


def measure(repeats: int = 41) -> dict[str, float]:
    namespace = build_namespace()
    floor = median_seconds(lambda: floor_scan(namespace), repeats)
    full = median_seconds(lambda: tdm.scan(namespace), repeats)
    full_with_records = median_seconds(lambda: tdm.scan(namespace).records, repeats)

    previous = tdm.scan(namespace)
    replacements = [torch.randn(64, 64) for _ in range(10)]

    def rebind_ten_and_rescan() -> None:
        for i, tensor in enumerate(replacements):
            namespace[f"t{i}"] = tensor
        tdm.scan(namespace, previous=previous)

    # the rebinding itself (10 dict stores) is part of what is timed: it is negligible
    incremental = median_seconds(rebind_ten_and_rescan, repeats)
    return {
        "floor_ms": floor * 1e3,
        "full_ms": full * 1e3,
        "full_with_records_ms": full_with_records * 1e3,
        "incremental_ms": incremental * 1e3,
    }


def main() -> None:
    figures = measure()
    floor = figures["floor_ms"]
    print(f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}")
    print(f"floor loop:            {floor:8.3f} ms")
    print(
        f"full_scan_ratio:       {figures['full_ms'] / floor:8.2f}  "
        f"(scan {figures['full_ms']:.3f} ms; target <= 1.5)"
    )
    print(
        f"full_scan_with_records_ratio: {figures['full_with_records_ms'] / floor:5.2f}  "
        f"(scan + building every Record {figures['full_with_records_ms']:.3f} ms)"
    )
    print(
        f"incremental_ratio:     {figures['incremental_ms'] / floor:8.3f}  "
        f"(rescan after 10 rebound names {figures['incremental_ms']:.3f} ms; target <= 0.2)"
    )


if __name__ == "__main__":
    main()
