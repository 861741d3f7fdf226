"""Small helpers every part shares: human-readable sizes (the one byte format: the sidebar
shows the text the view model writes with it), the order devices are listed in, and a pause of the
cyclic garbage collector for steps that build one object per row of a whole namespace."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(size: int | float) -> str:
    """``0 B``, ``512 B``, ``16.0 KiB``, ``1.5 GiB``."""
    size = float(size)
    if abs(size) < 1024:
        return f"{int(size)} B"
    for unit in _UNITS:
        size /= 1024
        if abs(size) < 1024 or unit == _UNITS[-1]:
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def device_sort_key(device: str) -> tuple[int, str, int]:
    """cpu first, then accelerators by type and index (cuda:2 before cuda:10), then meta, then
    "disk" (accelerate's disk-offloaded weights: files, not a device)."""
    kind, _, index = device.partition(":")
    rank = 0 if kind == "cpu" else 2 if kind == "meta" else 3 if kind == "disk" else 1
    return (rank, kind, int(index) if index.isdigit() else -1)


@contextmanager
def collector_paused(pause: bool = True) -> Iterator[None]:
    """The cyclic garbage collector off while a whole namespace's rows are built (records,
    sort keys: acyclic, nothing to collect). Allocating 100,000 of them starts a collection
    every 700 allocations, and the older generations' passes walk every object the kernel
    holds, the user's tensors included: measured ~40 % of building 100,000 records and ~2/3
    of sorting them for the sidebar's first window. Restored as it was, also on error (a
    collector the user turned off stays off)."""
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
