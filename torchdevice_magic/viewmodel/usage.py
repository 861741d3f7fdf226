"""What an accelerator's used memory is made of, in one line: "I deleted the model and
nvidia-smi still shows 6 GiB" is answered by splitting what the driver calls used
(``total - free``) into what the user's variables hold, what tensors held elsewhere occupy,
what PyTorch's caching allocator keeps for reuse, and the rest (this process's CUDA context and
other processes). Pure: the figures come in (:class:`~torchdevice_magic.devices.UsageFigures`
or anything with the same fields), the text goes out."""

from __future__ import annotations

from typing import Any

from ..units import format_bytes


def used_memory_text(device: str, figures: Any, in_variables: int) -> str:
    """``figures``: total, free, reserved, allocated, processes ((pid, bytes) or None), pid.
    ``in_variables``: what the scan counted on ``device`` (each storage once)."""
    used = max(figures.total - figures.free, 0)
    others: list[tuple[int, int]] = []
    allocated = max(figures.allocated, 0)
    in_variables = min(max(in_variables, 0), allocated)  # the allocator rounds blocks up
    outside = allocated - in_variables
    cached = max(figures.reserved - allocated, 0)
    rest = max(used - figures.reserved, 0)
    parts = [
        f"{format_bytes(in_variables)} in your variables",
        f"{format_bytes(outside)} in tensors held outside them (%devices --holders)",
        f"{format_bytes(cached)} cached by PyTorch's allocator "
        f"(torch.cuda.empty_cache() returns it)",
    ]
    if figures.processes is None:
        parts.append(f"{format_bytes(rest)} this process's CUDA context and other processes")
    else:
        others = [(pid, n) for pid, n in figures.processes if pid != figures.pid]
        other_bytes = min(sum(n for _, n in others), rest)
        parts.append(f"{format_bytes(rest - other_bytes)} this process's CUDA context")
        if others:
            pids = ", ".join(str(pid) for pid, _ in others[:3]) + (" …" if len(others) > 3 else "")
            parts.append(
                f"{format_bytes(other_bytes)} used by {len(others)} other "
                f"process{'es' if len(others) > 1 else ''} (pid {pids})"
            )
    text = (
        f"{device}: {format_bytes(used)} used of {format_bytes(figures.total)} (what nvidia-smi "
        f"shows) = " + " + ".join(parts)
    )
    if figures.processes is not None and not others:
        text += "; no other process uses it"
    return text
