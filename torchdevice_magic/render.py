"""Text and HTML drawings of the view model (:mod:`.viewmodel`): nothing is decided here.

:class:`Table` is a table *of its moment*: it is computed when it is made (the cell that shows
it) and never changes, so a saved or re-run notebook tells what each cell saw ("as of [n]").
Everything user-derived (names, type names, notes) is HTML-escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from . import viewmodel
from .scan import register_drawing
from .viewmodel import COLUMNS, Header, Row, Window

#: Renderings list at most this many rows (biggest first); the rest is summarised in one line.
MAX_RENDERED_ROWS = 200

#: Columns that are never cut (the rest may be, with the full text in the tooltip); the device
#: is whole as in the widget table and the sidebar.
_WHOLE = ("name", "size", "grad", "device")


def as_of_text(as_of: int | None, live: bool = False) -> str:
    if live:
        return "live"
    return f"as of [{as_of}]" if as_of is not None else ""


class Table:
    """A static table of an Inventory: header + first window, computed now."""

    def __init__(
        self,
        inventory: Any,
        targets: Any = (),
        *,
        default_target: str | None = None,
        as_of: int | None = None,
        title: str = "Devices",
        limit: int = MAX_RENDERED_ROWS,
        device_notes: Sequence[str] = (),
    ) -> None:
        targets = tuple(targets)
        spec = viewmodel.WindowSpec(limit=limit)
        # the view model's live window: the first rows chosen from the scan's columns, the
        # counts column-wise (no record per tensor of a big namespace)
        live = viewmodel.LiveWindow(spec)
        target = viewmodel.choose_target(targets, None, default_target)
        self.window: Window = live.reset(inventory, spec, target)
        self.header: Header = viewmodel.header(
            inventory,
            targets,
            default_target=default_target,
            counts=live.counts,
            device_notes=device_notes,
        )
        self.as_of = as_of
        self.title = title

    def __repr__(self) -> str:
        return text(self.header, self.window, self.as_of, self.title)

    def _repr_html_(self) -> str:
        return html(self.header, self.window, self.as_of, self.title)


def totals_line(header: Header) -> str:
    parts = [f"{bar.device}: {bar.text}" for bar in header.bars]
    return "  ".join(parts) if parts else "nothing on any device"


def text(header: Header, window: Window, as_of: int | None = None, title: str = "Devices") -> str:
    if header.message:
        return header.message
    rows = [COLUMNS + ("status",)] + [row.cells() + (row.status,) for row in window.rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    # only the descriptive columns are capped; names and sizes are never cut
    for i, column in enumerate(COLUMNS):
        if column not in _WHOLE:
            widths[i] = min(widths[i], 24)
    stamp = as_of_text(as_of)
    lines = [f"{title}{' (' + stamp + ')' if stamp else ''} — {totals_line(header)}"]
    if header.totals_note:
        lines.append(header.totals_note)
    lines += list(header.device_notes)
    lines += [f"warning: {w}" for w in header.warnings]
    for row in rows:
        cells = []
        for i, cell in enumerate(row[:-1]):
            if COLUMNS[i] not in _WHOLE and len(cell) > widths[i]:
                cell = cell[: widths[i] - 1] + "…"
            cells.append(cell.ljust(widths[i]))
        lines.append(("  ".join(cells) + "  " + row[-1]).rstrip())
    if window.matching > len(window.rows):
        lines.append(f"… {window.matching - len(window.rows):,} more rows")
    return "\n".join(lines)


_TABLE_CSS = (
    "border-collapse:collapse;font-size:12px;font-family:var(--jp-code-font-family,monospace)"
)


def _cell(column: str, value: str, tag: str = "td") -> str:
    if column in _WHOLE:
        style = "text-align:left;white-space:nowrap;padding:2px 8px 2px 0"
        if column == "name":
            # the name stays in sight when the table scrolls sideways
            style += ";position:sticky;left:0;background:var(--jp-layout-color0,#fff)"
    else:
        style = (
            "text-align:left;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;"
            "max-width:22ch;padding:2px 8px 2px 0"
        )
    return f'<{tag} style="{style}" title="{escape(value)}">{escape(value)}</{tag}>'


def row_html(row: Row) -> str:
    cells = "".join(_cell(c, v) for c, v in zip(COLUMNS, row.cells(), strict=True))
    return f"<tr>{cells}{_cell('status', row.status)}</tr>"


def html(header: Header, window: Window, as_of: int | None = None, title: str = "Devices") -> str:
    if header.message:
        return f"<p>{escape(header.message)}</p>"
    stamp = as_of_text(as_of)
    parts = [
        '<div class="torchdevice-magic" style="max-width:100%;overflow-x:auto">',
        f"<p><b>{escape(title)}</b>{' <i>' + escape(stamp) + '</i>' if stamp else ''}"
        f" — {escape(totals_line(header))}</p>",
    ]
    if header.totals_note:
        parts.append(f'<p style="color:#6b7280;font-size:12px">{escape(header.totals_note)}</p>')
    for note in header.device_notes:
        parts.append(f'<p style="color:#6b7280;font-size:12px">{escape(note)}</p>')
    for warning in header.warnings:
        parts.append(f'<p style="color:#b45309">⚠ {escape(warning)}</p>')
    parts.append(f'<table style="{_TABLE_CSS}"><thead><tr>')
    parts += [_cell(c, c, "th") for c in (*COLUMNS, "status")]
    parts.append("</tr></thead><tbody>")
    parts += [row_html(row) for row in window.rows]
    parts.append("</tbody></table>")
    if window.matching > len(window.rows):
        parts.append(f"<p>… {window.matching - len(window.rows):,} more rows</p>")
    parts.append("</div>")
    return "".join(parts)


def inventory_text(inventory: Any) -> str:
    return repr(Table(inventory))


def inventory_html(inventory: Any) -> str:
    return Table(inventory)._repr_html_()


# an Inventory's repr and notebook display are these tables
register_drawing("text", inventory_text)
register_drawing("html", inventory_html)
