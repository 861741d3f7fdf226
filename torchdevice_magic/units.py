"""Human-readable sizes, shared by the text, HTML and widget renderings (the sidebar's
TypeScript ``formatBytes`` follows the same rules)."""

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
