"""Text and HTML renderings of an Inventory. Data stays in ``inventory``; formatting lives here.

Everything user-derived (names, type names, notes) is HTML-escaped in the HTML rendering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .records import Record
from .units import format_bytes

if TYPE_CHECKING:
    from .scanner import Inventory

#: Renderings list at most this many rows (biggest first); the rest is summarised in one line.
MAX_RENDERED_ROWS = 200

COLUMNS = ("name", "type", "device", "dtype", "shape", "size", "note")


def _shape(record: Record) -> str:
    if record.shape is not None:
        return "(" + ", ".join(map(str, record.shape)) + ")"
    if record.kind == "module":
        return f"{record.param_count:,} params"
    if record.kind == "container":
        return f"{record.element_count:,} items"
    if record.kind == "optimizer":
        return f"{record.numel:,} states"
    return ""


def _size(record: Record) -> str:
    if record.devices == ("meta",) or (record.bytes == 0 and record.would_need_bytes):
        return f"0 B (needs {format_bytes(record.would_need_bytes)})"
    text = format_bytes(record.bytes)
    if record.would_need_bytes > record.bytes:  # some parts on meta: say what they would need
        text += f" (+{format_bytes(record.would_need_bytes - record.bytes)} on meta)"
    if record.grad_bytes:
        text += f" + grad {format_bytes(record.grad_bytes)}"
    return text


def row_cells(record: Record) -> tuple[str, ...]:
    return (
        record.name + (" (hidden)" if record.hidden else ""),
        record.type,
        record.device,
        record.dtype or "",
        _shape(record),
        _size(record),
        record.note,
    )


def ordered_records(inventory: Inventory, limit: int = MAX_RENDERED_ROWS) -> list[Record]:
    records = sorted(inventory.records, key=Record.size_order)
    return records[:limit]


def totals_line(inventory: Inventory) -> str:
    parts = []
    needed = inventory.would_need()
    for device, nbytes in inventory.totals().items():
        if device == "meta":
            parts.append(f"meta: 0 B (needs {format_bytes(needed.get('meta', 0))})")
        else:
            parts.append(f"{device}: {format_bytes(nbytes)}")
    return "  ".join(parts) if parts else "nothing on any device"


def inventory_text(inventory: Inventory) -> str:
    if not inventory.torch_imported:
        return "torch is not imported: no tensors to show"
    records = inventory.records
    if not records:
        return "No tensors, modules or optimizers in this namespace."
    shown = ordered_records(inventory)
    rows = [COLUMNS] + [row_cells(r) for r in shown]
    # the last column (note) is never padded or cut
    widths = [min(40, max(len(row[i]) for row in rows)) for i in range(len(COLUMNS) - 1)]
    lines = [f"Devices — {totals_line(inventory)}"]
    lines += [f"warning: {w}" for w in inventory.mixed_warnings()]
    for row in rows:
        cells = [cell[:40].ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append(("  ".join(cells) + "  " + row[-1]).rstrip())
    if len(records) > len(shown):
        lines.append(
            f"… {len(records) - len(shown):,} more rows (Inventory.to_frame() has them all)"
        )
    return "\n".join(lines)


def inventory_html(inventory: Inventory) -> str:
    from html import escape

    if not inventory.torch_imported:
        return "<p>torch is not imported: no tensors to show</p>"
    records = inventory.records
    if not records:
        return "<p>No tensors, modules or optimizers in this namespace.</p>"
    shown = ordered_records(inventory)
    parts = [
        '<div class="torchdevice-magic">',
        f"<p><b>Devices</b> — {escape(totals_line(inventory))}</p>",
    ]
    for warning in inventory.mixed_warnings():
        parts.append(f'<p style="color:#b45309">⚠ {escape(warning)}</p>')
    parts.append("<table><thead><tr>")
    parts += [f'<th scope="col" style="text-align:left">{c}</th>' for c in COLUMNS]
    parts.append("</tr></thead><tbody>")
    for record in shown:
        cells = "".join(
            f'<td style="text-align:left">{escape(cell)}</td>' for cell in row_cells(record)
        )
        parts.append(f"<tr>{cells}</tr>")
    parts.append("</tbody></table>")
    if len(records) > len(shown):
        parts.append(f"<p>… {len(records) - len(shown):,} more rows</p>")
    parts.append("</div>")
    return "".join(parts)
