"""The memory chart's words: what the sidebar shows for each row of
:meth:`memory.Timeline.to_json <torchdevice_magic.memory.Timeline.to_json>` (the label over a
device's chart, a point's tooltip). Written here, with :func:`~torchdevice_magic.units.format_bytes`,
so the chart says every size exactly as the tables and the text do; the sidebar draws these
strings and formats no number itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..units import format_bytes


def change_text(nbytes: int) -> str:
    """``+2.0 KiB``, ``-512 B``, ``+0 B``: a cell's change in bytes."""
    return ("+" if nbytes >= 0 else "-") + format_bytes(abs(nbytes))


def held_label(row: Mapping[str, Any]) -> str:
    """What the device holds after the row's cell (or the move or undo after it) and, apart,
    what of it holders outside the named variables keep, so it agrees with the device
    table's total (the variables only)."""
    outside = row["outside"]
    kept = f", {format_bytes(outside)} of it outside your variables" if outside > 0 else ""
    held = format_bytes(row["bytes"])
    by = f"by the {row['action']}" if row.get("action") else "last cell"
    return f"{row['device']}: {held} held{kept} ({change_text(row['delta'])} {by})"


def point_tooltip(row: Mapping[str, Any]) -> str:
    """One point's tooltip: the cell, the device, its change, the peak, what grew, the note."""
    when = (
        f"the {row['action']} after cell {row['cell']}"
        if row.get("action")
        else f"cell {row['cell']}"
    )
    text = f"{when}, {row['device']}: {format_bytes(row['bytes'])} ({change_text(row['delta'])})"
    if row["peak"] is not None:
        text += f", peak {format_bytes(row['peak'])}"
    for name, nbytes in row["changes"]:
        text += f"\n{name} {change_text(nbytes)}"
    if row["note"]:
        text += "\n" + row["note"]
    return text


def timeline_texts(row: Mapping[str, Any]) -> dict[str, str]:
    """The ``label`` and ``tooltip`` fields of a ``TimelineRow`` on the wire."""
    return {"label": held_label(row), "tooltip": point_tooltip(row)}
