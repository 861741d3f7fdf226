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

import os
import platform
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _namespace import build_namespace, floor_scan, median_ratio  # noqa: E402

import torchdevice_magic as tdm  # noqa: E402


def main() -> None:
    namespace = build_namespace()
    floor = lambda: floor_scan(namespace)  # noqa: E731
    full_ratio, full, floor_time = median_ratio(lambda: tdm.scan(namespace), floor)
    records_ratio, records, _ = median_ratio(lambda: tdm.scan(namespace).records, floor)

    previous = tdm.scan(namespace)
    replacements = [[torch.randn(64, 64) for _ in range(10)] for _ in range(2)]
    turn = [0]

    def rebind_ten() -> None:  # what a cell did; not timed
        turn[0] += 1
        for i, tensor in enumerate(replacements[turn[0] % 2]):
            namespace[f"t{i}"] = tensor

    incremental_ratio, incremental, _ = median_ratio(
        lambda: tdm.scan(namespace, previous=previous), floor, before_each=rebind_ten
    )
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, torch {torch.__version__}")
    print(f"floor loop:            {floor_time * 1e3:8.3f} ms  (median; ratios are medians of")
    print("                                    per-round ratios, floor and scan interleaved)")
    print(f"full_scan_ratio:       {full_ratio:8.2f}  (scan {full * 1e3:.3f} ms; target <= 1.5)")
    print(
        f"full_scan_with_records_ratio: {records_ratio:5.2f}  "
        f"(scan + building every Record {records * 1e3:.3f} ms)"
    )
    print(
        f"incremental_ratio:     {incremental_ratio:8.3f}  "
        f"(rescan after 10 rebound names, modules/optimizers re-checked "
        f"{incremental * 1e3:.3f} ms; target <= 0.2)"
    )


if __name__ == "__main__":
    main()
