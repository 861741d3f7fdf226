"""Small helpers every part shares: human-readable sizes (the sidebar's TypeScript
``formatBytes`` follows the same rules) and the order devices are listed in."""

from __future__ import annotations

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
    """cpu first, then accelerators by type and index (cuda:2 before cuda:10), meta last."""
    kind, _, index = device.partition(":")
    rank = 0 if kind == "cpu" else 2 if kind == "meta" else 1
    return (rank, kind, int(index) if index.isdigit() else -1)
