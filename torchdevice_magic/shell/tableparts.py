"""The parts of the widget table (:mod:`.widget`): how a row is drawn as HTML, the fixed pool
of row widgets, the controls, the per-device totals and the move's progress bar. Each part draws what the
view model (:mod:`torchdevice_magic.viewmodel`) says and decides nothing.

Why the rows are drawn the way they are:

* Only one page is shown, from a fixed pool of ``page_size`` row widgets created once and
  re-filled (:class:`RowPool`): the number of widgets never grows with the namespace.
* Columns: the name and size come first and are never cut; the descriptive columns after them
  are cut with an ellipsis (full text in the tooltip) so the row fits the notebook's width.
* Everything shown is HTML-escaped.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from html import escape
from typing import Any

import ipywidgets as widgets
from ipywidgets.widgets.widget_bool import CheckboxStyle
from ipywidgets.widgets.widget_string import HTMLStyle

from .. import viewmodel
from ..app import DeviceController
from ..scan import scan
from ..units import format_bytes
from ..viewmodel import Action, Header, LiveWindow, Row, WindowSpec

ERROR_STYLE = "color:#b91c1c"
OK_STYLE = "color:#166534"
WARN_STYLE = "color:#b45309"
MUTED_STYLE = "color:#6b7280;font-size:12px"
_ROW_STYLE = (
    "font-family:var(--jp-code-font-family, monospace);font-size:12px;line-height:26px;"
    "display:flex;align-items:center;white-space:nowrap;overflow:hidden;"
    # width 0 + min-width 100%: the row takes its column's width and adds nothing to the
    # minimum width of what holds it (else the HTML widget grows to the row's natural width)
    "width:0;min-width:100%"
)
#: size, grad, device: never cut (they take the width of their text); the rest shrink.
_WHOLE_CELL = "flex:0 0 auto;padding-right:1.5ch"
#: the name is never cut either: where the output is too narrow for it, it wraps (anywhere:
#: names have no spaces) and keeps the size beside it in sight
_NAME_CELL = (
    "flex:0 1 auto;min-width:8ch;padding-right:1.5ch;white-space:normal;"
    "overflow-wrap:anywhere;line-height:16px"
)
_CUT_CELL = "flex:0 1 auto;min-width:4ch;overflow:hidden;text-overflow:ellipsis;padding-right:1.5ch"
#: The order columns are drawn in: the ones that must stay in sight first.
_DRAWN = ("name", "size", "grad", "device", "dtype", "shape", "type", "status")

SORT_OPTIONS = (
    ("size (largest first)", "size"),
    ("name", "name"),
    ("device", "device"),
    ("type", "type"),
)


def row_html(row: Row | None, widths: dict[str, int]) -> str:
    values = (
        {c: c for c in _DRAWN}
        if row is None
        else {
            "name": row.name,
            "size": row.size,
            "grad": row.grad,
            "device": row.device,
            "dtype": row.dtype,
            "shape": row.shape,
            "type": row.type,
            "status": row.status,
        }
    )
    parts = []
    for column in _DRAWN:
        value = values[column]
        if column == "name":
            style = f"{_NAME_CELL};width:{widths[column]}ch"
        elif column in _CUT_LIMITS:
            style = (
                f"{_CUT_CELL};flex-basis:{widths[column]}ch;width:{widths[column]}ch;"
                f"flex-shrink:{_SHRINK[column]}"
            )
        else:
            style = f"{_WHOLE_CELL};width:{widths[column]}ch"
        shown = f"<b>{escape(value)}</b>" if row is None else escape(value)
        parts.append(
            f'<span class="tdm-cell-{column}" style="{style}" title="{escape(value)}">'
            f"{shown}</span>"
        )
    return f'<div class="tdm-row" style="{_ROW_STYLE}">{"".join(parts)}</div>'


#: columns that may be cut (with an ellipsis) when the output is narrow, and the most they take
_CUT_LIMITS = {"dtype": 10, "shape": 18, "type": 16, "status": 48}
#: how much each cut column gives up when the row is too narrow: the status text first, the
#: facts that tell rows apart (dtype, shape, type) last; name, size, grad and device never
_SHRINK = {"dtype": 1, "shape": 1, "type": 1, "status": 40}


def column_widths(rows: tuple[Row, ...]) -> dict[str, int]:
    """Widths (in ch) for every column, from the whole page: name, size and grad fit every
    figure (never cut); the others fit their longest text up to a limit. Every row gets the same
    widths, so the columns line up however each row's text runs."""
    widths = {column: len(column) for column in _DRAWN}  # at least the header's own labels
    for row in rows:
        for column in _DRAWN:
            widths[column] = max(widths[column], len(getattr(row, column) or ""))
    for column, limit in _CUT_LIMITS.items():
        widths[column] = min(widths[column], limit)
    return {k: v + 1 for k, v in widths.items()}


def error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def outcome_text(action: dict[str, Any] | None, result: Any) -> str:
    """The status line after a successful move or undo: the controller's outcome message and
    up to three of the names it skipped, with why."""
    text = action["message"] if action else result.summary()
    # the message names up to three skipped objects as "name (reason)": add only the others
    skipped = [s for s in (action or {}).get("skipped", []) if f"{s['name']} (" not in text]
    if skipped:
        shown = "; ".join(f"{s['name']}: {s['reason']}" for s in skipped[:3])
        more = f" (+{len(skipped) - 3} more)" if len(skipped) > 3 else ""
        text += " — skipped " + shown + more
    return text


def close_widgets(owned: Iterable[Any], children: Iterable[Any]) -> None:
    """Close ``owned`` and ``children`` with everything below them, and their Layout and Style
    models (ipywidgets keeps each open widget alive until it is closed)."""
    found = list(owned)
    stack = list(children)
    while stack:
        widget = stack.pop()
        found.append(widget)
        stack.extend(getattr(widget, "children", ()))
    for widget in found:
        for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
            if isinstance(part, widgets.Widget):
                part.close()
        widget.close()


def set_button(button: widgets.Button, action: Action, busy: bool = False) -> None:
    button.description = action.label
    button.disabled = busy or not action.enabled
    button.tooltip = "a move is running" if busy else action.reason


class RowPool:
    """``size`` row widgets (checkbox | cells | button), made once, under a header row, in one
    ``grid``. Each slot shows one row (by key) while that row stays on the page, so a row that
    moves up or down the page is a reordering of the grid, not every slot filled again.
    ``on_check(key, change)`` and ``on_click(key, button)`` get the key of the row the slot
    shows."""

    def __init__(
        self,
        size: int,
        on_check: Callable[[str, dict[str, Any]], None],
        on_click: Callable[[str, Any], None],
    ) -> None:
        self.head = (
            widgets.HTML(layout=widgets.Layout(width="28px")),
            widgets.HTML(layout=widgets.Layout(min_width="0")),
            widgets.HTML(),
        )
        self.slots: list[tuple[widgets.Checkbox, widgets.HTML, widgets.Button]] = []
        #: the key of the row each slot shows (None: the slot is not on the page)
        self.keys: list[str | None] = [None] * size
        #: the columns' widths drawn last (None: fit the next page afresh)
        self.widths: dict[str, int] | None = None
        #: what each slot was filled with last, (row, checked, busy); None: fill it again
        self._filled: list[tuple[Row, bool, bool] | None] = [None] * size
        self._on_check = on_check
        self._on_click = on_click
        checkbox_style = CheckboxStyle()
        button_layout = widgets.Layout(width="auto", height="26px")
        button_style = widgets.ButtonStyle()
        cells_layout = widgets.Layout(min_width="0", overflow="hidden", width="100%")
        cells_style = HTMLStyle()
        #: the Layout and Style models every row shares (closed with the pool)
        self.shared = (checkbox_style, button_layout, button_style, cells_layout, cells_style)
        for index in range(size):
            checkbox = widgets.Checkbox(
                value=False, indent=False, layout=widgets.Layout(width="28px"), style=checkbox_style
            )
            cells = widgets.HTML(layout=cells_layout, style=cells_style)
            button = widgets.Button(layout=button_layout, style=button_style)
            checkbox.observe(functools.partial(self._checked, index), names="value")
            button.on_click(functools.partial(self._clicked, index))
            self.slots.append((checkbox, cells, button))
        # checkbox | cells (take the rest, never wider than the output) | the row's button
        self.grid = widgets.GridBox(
            list(self.head),
            layout=widgets.Layout(
                grid_template_columns="28px minmax(0, 1fr) max-content",
                grid_gap="0px 6px",
                align_items="center",
                width="100%",
                min_width="0",
            ),
        )

    def _checked(self, index: int, change: dict[str, Any]) -> None:
        key = self.keys[index]
        if key is not None:
            self._on_check(key, change)

    def _clicked(self, index: int, button: Any) -> None:
        key = self.keys[index]
        if key is not None:
            self._on_click(key, button)

    def fit_widths(self) -> None:
        """The next draw fits the columns to its page afresh (the user sorted, filtered, paged
        or retargeted). Between cells the columns only widen: narrowing them would change every
        row's text, and so send every row again."""
        self.widths = None

    def disable_buttons(self) -> None:
        """A move runs: every row's button is disabled until the next draw fills it again."""
        for index, (_checkbox, _cells, button) in enumerate(self.slots):
            button.disabled = True
            self._filled[index] = None

    def place(self, rows: tuple[Row, ...]) -> list[int]:
        """The slot of each row: the one it had while it stays on the page, else a free one."""
        wanted = {row.key for row in rows}
        kept = {key: index for index, key in enumerate(self.keys) if key in wanted}
        free = [index for index, key in enumerate(self.keys) if key not in wanted]
        free.reverse()  # the first free slots first, off the end of the list
        order: list[int] = []
        for row in rows:
            index = kept.pop(row.key, None)
            if index is None:
                index = free.pop()
            order.append(index)
        self.keys = [None] * len(self.slots)
        for row, index in zip(rows, order, strict=True):
            self.keys[index] = row.key
        return order

    def draw(
        self, rows: tuple[Row, ...], selected: dict[str, str], busy: bool
    ) -> tuple[dict[str, widgets.Checkbox], dict[str, widgets.Button]]:
        """Show the first ``size`` rows; the checkboxes of selectable rows and every row's
        button, by row name. A widget sends its frontend only the values that changed, so a
        row that kept its slot and its text costs nothing. The caller ignores the checkbox
        events this causes."""
        rows = rows[: len(self.slots)]
        widths = column_widths(rows)
        if self.widths is not None:
            widths = {column: max(width, self.widths[column]) for column, width in widths.items()}
        if widths != self.widths:
            self._filled = [None] * len(self.slots)
            self.widths = widths
            self.head[1].value = row_html(None, widths)
        checkboxes: dict[str, widgets.Checkbox] = {}
        buttons: dict[str, widgets.Button] = {}
        order = self.place(rows)
        for row, index in zip(rows, order, strict=True):
            checkbox, cells, button = self.slots[index]
            filled = (row, row.selectable and row.name in selected, busy)
            if self._filled[index] != filled:  # a slot that shows what it showed is left be
                self._fill(index, *filled, widths)
            if row.selectable:
                checkboxes[row.name] = checkbox
            buttons[row.name] = button
        children = self.head + tuple(w for index in order for w in self.slots[index])
        if tuple(self.grid.children) != children:
            self.grid.children = children
        return checkboxes, buttons

    def _fill(
        self, index: int, row: Row, checked: bool, busy: bool, widths: dict[str, int]
    ) -> None:
        checkbox, cells, button = self.slots[index]
        cells.value = row_html(row, widths)
        checkbox.value = checked
        checkbox.disabled = not row.selectable
        checkbox.layout.visibility = "visible" if row.selectable else "hidden"
        checkbox.tooltip = f"select {row.name}" if row.selectable else None
        set_button(button, row.action, busy)
        self._filled[index] = (row, checked, busy)

    def owned(self) -> Iterator[Any]:
        """Every widget the pool made (for closing)."""
        yield from (w for slot in self.slots for w in slot)
        yield from self.head
        yield from self.shared


class DeviceTotals:
    """One row per device (name, ``FloatProgress``, figures) in ``box``, the ``note`` on what
    the totals include beyond the rows, and the header's ``warnings``."""

    def __init__(self) -> None:
        self.box = widgets.VBox()
        self.note = widgets.HTML()
        self.warnings = widgets.HTML(layout=widgets.Layout(display="none"))
        self.rows: dict[
            str, tuple[widgets.HBox, widgets.HTML, widgets.FloatProgress, widgets.HTML]
        ] = {}

    def draw(self, header: Header) -> None:
        children = []
        for bar in header.bars:
            row = self.rows.get(bar.device)
            if row is None:
                name = widgets.HTML(layout=widgets.Layout(width="90px"))
                progress = widgets.FloatProgress(
                    value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="200px")
                )
                figures = widgets.HTML()
                box = widgets.HBox(
                    [name, progress, figures],
                    layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
                )
                row = (box, name, progress, figures)
                self.rows[bar.device] = row
            box, name, progress, figures = row
            name.value = f"<b>{escape(bar.device)}</b>"
            progress.value = bar.fraction
            figures.value = f'<span style="font-size:12px">{escape(bar.text)}</span>'
            children.append(box)
        if tuple(self.box.children) != tuple(children):
            self.box.children = children
        notes = [note for note in (header.totals_note, *header.device_notes) if note]
        self.note.value = "<br>".join(
            f'<span style="{MUTED_STYLE}">{escape(note)}</span>' for note in notes
        )
        if header.warnings:
            lines = "<br>".join(f"⚠ {escape(w)}" for w in header.warnings)
            self.warnings.value = f'<div style="{WARN_STYLE}">{lines}</div>'
            self.warnings.layout.display = None
        else:
            self.warnings.value = ""
            self.warnings.layout.display = "none"

    def owned(self) -> Iterator[Any]:
        """The per-device rows' widgets (for closing; ``box``, ``note`` and ``warnings`` are
        the table's children)."""
        yield from (w for row in self.rows.values() for w in row)


class MoveProgress:
    """The move's progress: ``bar`` (bytes done of the total), ``label``, in ``box`` (hidden
    until the first move)."""

    def __init__(self) -> None:
        self.bar = widgets.IntProgress(
            value=0, min=0, max=1, description="move", layout=widgets.Layout(width="260px")
        )
        self.label = widgets.HTML()
        self.box = widgets.HBox([self.bar, self.label], layout=widgets.Layout(display="none"))

    def start(self, what: str) -> None:
        self.bar.value = 0
        self.bar.max = 1
        self.bar.bar_style = ""
        self.bar.description = "moving"
        self.label.value = escape(what)
        self.box.layout.display = None

    def update(self, done: int, total: int) -> None:
        total = max(int(total), 0)
        done = min(max(int(done), 0), total)
        if self.bar.value > total:
            self.bar.value = 0
        self.bar.max = total
        self.bar.value = done
        self.label.value = escape(f"{format_bytes(done)} of {format_bytes(total)}")

    def end(self, ok: bool) -> None:
        self.bar.bar_style = "success" if ok else "danger"
        self.bar.description = "done" if ok else "failed"


class TableControls:
    """The table's controls: the target, the move/undo/refresh buttons (in ``actions``) and
    sort, filter and paging (in ``pager``). The table wires their events."""

    def __init__(self) -> None:
        auto = widgets.Layout  # a fresh Layout each: a shared one would be closed twice
        self.target_dropdown = widgets.Dropdown(
            options=[], description="target", layout=auto(width="190px")
        )
        self.target_note = widgets.HTML()
        self.sort_dropdown = widgets.Dropdown(
            options=SORT_OPTIONS, value="size", description="sort by", layout=auto(width="230px")
        )
        self.filter_text = widgets.Text(
            placeholder="filter: name, type or device",
            continuous_update=False,
            layout=auto(width="220px"),
        )
        self.move_all_button = widgets.Button(
            description="Move all", icon="arrow-right", layout=auto(width="auto")
        )
        self.move_selected_button = widgets.Button(
            description="Move selected (0)", disabled=True, layout=auto(width="auto")
        )
        self.undo_button = widgets.Button(
            description="Undo", icon="undo", disabled=True, layout=auto(width="auto")
        )
        self.refresh_button = widgets.Button(
            description="Refresh", icon="refresh", layout=auto(width="auto")
        )
        self.prev_button = widgets.Button(
            description="Prev", icon="chevron-left", layout=auto(width="auto")
        )
        self.next_button = widgets.Button(
            description="Next", icon="chevron-right", layout=auto(width="auto")
        )
        self.page_label = widgets.HTML()
        self.actions = widgets.HBox(
            [
                self.target_dropdown,
                self.move_all_button,
                self.move_selected_button,
                self.undo_button,
                self.refresh_button,
            ],
            layout=auto(flex_flow="row wrap", align_items="center"),
        )
        self.pager = widgets.HBox(
            [
                self.sort_dropdown,
                self.filter_text,
                self.prev_button,
                self.next_button,
                self.page_label,
            ],
            layout=auto(flex_flow="row wrap", align_items="center"),
        )

    def draw_targets(self, header: Header) -> None:
        """The enabled targets in the dropdown, the others with their reasons in the note
        (the caller ignores the dropdown's events this causes)."""
        enabled = [t.device for t in header.targets if t.enabled]
        if list(self.target_dropdown.options) != enabled:
            self.target_dropdown.options = enabled
        if self.target_dropdown.value != header.target:
            self.target_dropdown.value = header.target
        disabled = viewmodel.unavailable(header.targets)
        note = " · ".join(f"{escape(d)}: {escape(r)}" for d, r in disabled)
        self.target_note.value = (
            f'<span style="{MUTED_STYLE}">not available: {note}</span>' if note else ""
        )

    def draw_pager(self, start: int, shown: int, page_size: int, matching: int, total: int) -> None:
        if matching:
            self.page_label.value = escape(
                f"rows {start + 1:,}–{start + shown:,} of {matching:,}"
                + (f" (filtered from {total:,})" if matching != total else "")
            )
        else:
            self.page_label.value = "no rows match" if self.filter_text.value else "no rows"
        self.prev_button.disabled = start == 0
        self.next_button.disabled = start + page_size >= matching

    def draw_buttons(self, header: Header, selected: list[str], busy: bool) -> None:
        set_button(self.move_all_button, header.move_all, busy)
        set_button(
            self.move_selected_button, viewmodel.move_selected_action(header, selected), busy
        )
        set_button(self.undo_button, header.undo, busy)
        set_button(self.refresh_button, header.refresh, busy)


class TableWindow:
    """What one table shows of the view model, without a widget: its live window (one page),
    the page, the header, the inventory it was computed from and the checked rows."""

    def __init__(self, page_size: int, include_hidden: bool) -> None:
        self.page_size = max(1, int(page_size))
        self.page = 0
        self.include_hidden = include_hidden
        self.live = LiveWindow(WindowSpec(limit=self.page_size))
        self.header: Header | None = None
        self.inventory: Any = None
        #: row name -> the top-level name it moves (kept across pages and refreshes)
        self.selected: dict[str, str] = {}

    def rows(self) -> tuple[Row, ...]:
        window = self.live.window
        return window.rows if window is not None else ()

    def spec(self, sort: str, filter_text: str, target: str | None) -> WindowSpec:
        offset = self.page * self.page_size
        return WindowSpec(
            sort=sort, filter=filter_text, offset=offset, limit=self.page_size, target=target
        )

    def take(self, app: DeviceController, sort: str, filter_text: str, wanted: str | None) -> None:
        """Take the namespace as it is now into the window (the target ``wanted`` while it is
        enabled); a page that is gone falls back to the last one; checked rows that no longer
        list a movable name are unchecked."""
        inventory = app.current_inventory()
        if self.include_hidden and inventory.torch_imported and not inventory.include_hidden:
            inventory = scan(app.namespace, include_hidden=True, previous=inventory)
        self.inventory = inventory
        target = app.choose_target(wanted)
        live = self.live
        if not live.shown or live.target != target:
            live.reset(inventory, self.spec(sort, filter_text, wanted), target)
        else:
            live.update(inventory)
        self.header = app.header(wanted, inventory=inventory, counts=live.counts)
        window = live.window
        if window is not None and self.page and self.page * self.page_size >= window.matching:
            # the page it was on is gone: back to the last page there is
            self.page = max(0, (window.matching - 1) // self.page_size)
            live.reset(inventory, self.spec(sort, filter_text, wanted), self.header.target)
        for name, root in list(self.selected.items()):
            # a checked row stays checked while its name still lists it, movable
            if not any(
                r.name == name and r.movable and not r.hidden for r in inventory.records_of(root)
            ):
                del self.selected[name]

    def rewindow(
        self, app: DeviceController, sort: str, filter_text: str, wanted: str | None
    ) -> None:
        """Sort, filter, page or target changed: a fresh window of the same namespace."""
        inventory = self.inventory
        target = app.choose_target(wanted)
        spec = self.spec(sort, filter_text, wanted)
        self.live.reset(inventory if inventory is not None else [], spec, target)
        self.header = app.header(wanted, inventory=inventory, counts=self.live.counts)

    def turn(self, pages: int) -> bool:
        """Go ``pages`` pages on (back, if negative) where there is such a page."""
        window = self.live.window
        page = self.page + pages
        if page < 0:
            return False
        if pages > 0 and (window is None or page * self.page_size >= window.matching):
            return False
        self.page = page
        return True


__all__ = [
    "DeviceTotals",
    "MoveProgress",
    "RowPool",
    "TableControls",
    "TableWindow",
    "SORT_OPTIONS",
    "close_widgets",
    "column_widths",
    "error_text",
    "outcome_text",
    "row_html",
    "set_button",
]
