"""``DeviceTable``: the ipywidgets table ``%devices`` shows in a notebook. It draws the view
model (:mod:`.viewmodel`) and decides nothing: rows, sizes, totals, sort orders, the default
target and every button's state and reason come from there.

A table is a record of its moment: it shows the namespace as it was when its cell ran ("as of
[n]") and changes only by its own buttons (Move / Undo / Refresh, after which it says so). With
``live=True`` (``%devices --live``) it follows every cell instead, labelled "live".

Why it is built the way it is:

* Only one page is shown, from a fixed pool of ``page_size`` row widgets created once and
  re-filled: the number of widgets never grows with the namespace.
* Columns: the name and size come first and are never cut; the descriptive columns after them
  are cut with an ellipsis (full text in the tooltip) so the row fits the notebook's width.
* A click never ends in a traceback: every handler catches what the session raises and writes
  ``Type: message`` to the status line (escaped, red). Everything shown is HTML-escaped.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable
from html import escape
from typing import Any

import ipywidgets as widgets
from ipywidgets.widgets.widget_bool import CheckboxStyle
from ipywidgets.widgets.widget_string import HTMLStyle

from .. import viewmodel
from ..scan import scan
from ..units import format_bytes
from ..viewmodel import Action, Header, LiveWindow, Row, WindowSpec

_ERROR_STYLE = "color:#b91c1c"
_OK_STYLE = "color:#166534"
_WARN_STYLE = "color:#b45309"
_MUTED_STYLE = "color:#6b7280;font-size:12px"
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


def _cells(row: Row | None, widths: dict[str, int]) -> str:
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


def _column_widths(rows: tuple[Row, ...]) -> dict[str, int]:
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


def _message(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _set_button(button: widgets.Button, action: Action, busy: bool = False) -> None:
    button.description = action.label
    button.disabled = busy or not action.enabled
    button.tooltip = "a move is running" if busy else action.reason


def _guarded(method: Callable[..., None]) -> Callable[..., None]:
    """Button/observer handlers: one at a time, and never a traceback into the frontend."""

    @functools.wraps(method)
    def handler(self: DeviceTable, *args: Any) -> None:
        if self._busy:
            return
        self._busy = True
        self._draw_buttons()
        try:
            method(self, *args)
        except Exception as error:
            self._set_status(_message(error), error=True)
            with contextlib.suppress(Exception):  # show the namespace as it is now
                self._recompute(reason="after an error")
        finally:
            self._busy = False
            with contextlib.suppress(Exception):
                self._draw_page()
            self._draw_buttons()

    return handler


# ipywidgets publishes no type information: VBox is Any to mypy
class DeviceTable(widgets.VBox):  # type: ignore[misc]
    """Every tensor, module, optimizer and tensor container of the kernel, with its device and
    memory, per-device totals, and buttons that move things (through ``session.move``).

    ``DeviceTable(session, include_hidden=False, page_size=50, live=False, as_of=None)``.

    Public attributes (tests press the buttons with ``Button.click()``):

    ``session``, ``include_hidden``, ``live``, ``as_of`` (the execution count it shows)
    ``page_size``, ``page``     rows per page, the current page (0-based)
    ``stamp``                   HTML: "as of [n]" / "live" / "as of [n]; moved by its button"
    ``totals``                  VBox: one row per device (name, ``FloatProgress``, figures)
    ``totals_note``             HTML: what the totals include beyond the rows
    ``warnings``, ``message``   HTML
    ``target_dropdown``         Dropdown of the *enabled* targets; ``target_note`` the others
    ``sort_dropdown``           ``"size"`` (default), ``"name"``, ``"device"``, ``"type"``
    ``filter_text``             Text: filters rows by name, type or device
    ``move_all_button``, ``move_selected_button``, ``undo_button``, ``refresh_button``
    ``prev_button``, ``next_button``, ``page_label``
    ``progress``, ``progress_label``, ``status``
    ``row_checkboxes``          {row name: Checkbox} for the selectable rows of the page
    ``row_buttons``             {row name: Button "→ <target>"} for every row of the page
    ``rows()``                  the page's :class:`~.viewmodel.Row` objects
    ``rendered_rows()``         their text cells (name, type, device, dtype, shape, size, grad)
    ``selected``                the checked row names (kept across pages and refreshes)
    """

    def __init__(
        self,
        session: Any,
        include_hidden: bool = False,
        page_size: int = 50,
        live: bool = False,
        as_of: int | None = None,
    ) -> None:
        # never wider than the output area: the rows below shrink (and names wrap) instead of
        # the whole table overflowing out of sight in a narrow notebook
        super().__init__(layout=widgets.Layout(width="100%", min_width="0"))
        self.session = session
        self.include_hidden = bool(include_hidden)
        self.page_size = max(1, int(page_size))
        self.page = 0
        self.live = bool(live)
        self.as_of = as_of
        self.row_checkboxes: dict[str, widgets.Checkbox] = {}
        self.row_buttons: dict[str, widgets.Button] = {}
        self._selected: dict[str, str] = {}  # row name -> the top-level name it moves
        self._busy = False
        self._syncing = False
        self._closed = False
        self._window = LiveWindow(WindowSpec(limit=self.page_size))
        self._header: Header | None = None
        self._inventory: Any = None
        self._device_rows: dict[
            str, tuple[widgets.HBox, widgets.HTML, widgets.FloatProgress, widgets.HTML]
        ] = {}

        self.stamp = widgets.HTML()
        self.totals = widgets.VBox()
        self.totals_note = widgets.HTML()
        self.warnings = widgets.HTML(layout=widgets.Layout(display="none"))
        self.message = widgets.HTML(layout=widgets.Layout(display="none"))
        self.target_dropdown = widgets.Dropdown(
            options=[], description="target", layout=widgets.Layout(width="190px")
        )
        self.target_note = widgets.HTML()
        self.sort_dropdown = widgets.Dropdown(
            options=SORT_OPTIONS,
            value="size",
            description="sort by",
            layout=widgets.Layout(width="230px"),
        )
        self.filter_text = widgets.Text(
            placeholder="filter: name, type or device",
            continuous_update=False,
            layout=widgets.Layout(width="220px"),
        )
        self.move_all_button = widgets.Button(
            description="Move all", icon="arrow-right", layout=widgets.Layout(width="auto")
        )
        self.move_selected_button = widgets.Button(
            description="Move selected (0)", disabled=True, layout=widgets.Layout(width="auto")
        )
        self.undo_button = widgets.Button(
            description="Undo", icon="undo", disabled=True, layout=widgets.Layout(width="auto")
        )
        self.refresh_button = widgets.Button(
            description="Refresh", icon="refresh", layout=widgets.Layout(width="auto")
        )
        self.progress = widgets.IntProgress(
            value=0, min=0, max=1, description="move", layout=widgets.Layout(width="260px")
        )
        self.progress_label = widgets.HTML()
        self._progress_box = widgets.HBox(
            [self.progress, self.progress_label], layout=widgets.Layout(display="none")
        )
        self.status = widgets.HTML()
        self.prev_button = widgets.Button(
            description="Prev", icon="chevron-left", layout=widgets.Layout(width="auto")
        )
        self.next_button = widgets.Button(
            description="Next", icon="chevron-right", layout=widgets.Layout(width="auto")
        )
        self.page_label = widgets.HTML()
        self._head = (
            widgets.HTML(layout=widgets.Layout(width="28px")),
            widgets.HTML(layout=widgets.Layout(min_width="0")),
            widgets.HTML(),
        )
        self._slots: list[tuple[widgets.Checkbox, widgets.HTML, widgets.Button]] = []
        checkbox_style = CheckboxStyle()
        button_layout = widgets.Layout(width="auto", height="26px")
        button_style = widgets.ButtonStyle()
        cells_layout = widgets.Layout(min_width="0", overflow="hidden", width="100%")
        cells_style = HTMLStyle()
        self._shared = (checkbox_style, button_layout, button_style, cells_layout, cells_style)
        for index in range(self.page_size):
            checkbox = widgets.Checkbox(
                value=False, indent=False, layout=widgets.Layout(width="28px"), style=checkbox_style
            )
            cells = widgets.HTML(layout=cells_layout, style=cells_style)
            button = widgets.Button(layout=button_layout, style=button_style)
            checkbox.observe(functools.partial(self._on_check, index), names="value")
            button.on_click(functools.partial(self._on_row_click, index))
            self._slots.append((checkbox, cells, button))
        # checkbox | cells (take the rest, never wider than the output) | the row's button
        self.grid = widgets.GridBox(
            list(self._head),
            layout=widgets.Layout(
                grid_template_columns="28px minmax(0, 1fr) max-content",
                grid_gap="0px 6px",
                align_items="center",
                width="100%",
                min_width="0",
            ),
        )

        self.target_dropdown.observe(self._on_target, names="value")
        self.sort_dropdown.observe(self._on_sort, names="value")
        self.filter_text.observe(self._on_filter, names="value")
        self.move_all_button.on_click(self._on_move_all)
        self.move_selected_button.on_click(self._on_move_selected)
        self.undo_button.on_click(self._on_undo)
        self.refresh_button.on_click(self._on_refresh)
        self.prev_button.on_click(self._on_prev)
        self.next_button.on_click(self._on_next)

        wrap = widgets.Layout(flex_flow="row wrap", align_items="center")
        controls = widgets.HBox(
            [
                self.target_dropdown,
                self.move_all_button,
                self.move_selected_button,
                self.undo_button,
                self.refresh_button,
            ],
            layout=wrap,
        )
        pager = widgets.HBox(
            [
                self.sort_dropdown,
                self.filter_text,
                self.prev_button,
                self.next_button,
                self.page_label,
            ],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        self.children = [
            self.stamp,
            self.totals,
            self.totals_note,
            self.warnings,
            controls,
            self.target_note,
            self._progress_box,
            self.status,
            self.message,
            pager,
            self.grid,
        ]
        self._stamp_text = "live" if self.live else f"as of [{as_of}]" if as_of else ""
        if self.live:
            session.add_view(self)
        if "torch" in sys.modules:  # show the namespace as it is now (incremental: cheap)
            session.rescan()
        self._recompute()

    # -- what tests and callers read ----------------------------------------------------------
    @property
    def selected(self) -> list[str]:
        return list(self._selected)

    def rows(self) -> list[Row]:
        window = self._window.window
        return list(window.rows) if window is not None else []

    def rendered_rows(self) -> list[tuple[str, ...]]:
        return [row.cells() for row in self.rows()]

    @property
    def header(self) -> Header | None:
        return self._header

    # -- the view model --------------------------------------------------------------------------
    def refresh(self, session: Any = None) -> None:
        """Follow the session (live tables only: the session calls this after every cell)."""
        if self._closed or not self.live:
            return
        self._recompute()

    def _current_inventory(self) -> Any:
        session = self.session
        inventory = session.current_inventory()
        if self.include_hidden and inventory.torch_imported and not inventory.include_hidden:
            inventory = scan(session.namespace, include_hidden=True, previous=inventory)
        return inventory

    def _spec(self) -> WindowSpec:
        return WindowSpec(
            sort=self.sort_dropdown.value,
            filter=self.filter_text.value,
            offset=self.page * self.page_size,
            limit=self.page_size,
            target=self.target_dropdown.value,
        )

    def _recompute(self, reason: str = "", reset: bool = False) -> None:
        """Take the namespace as it is now into the view model, then draw."""
        inventory = self._current_inventory()
        self._inventory = inventory
        wanted = self.target_dropdown.value
        target = self.session.choose_target(wanted)
        live = self._window
        if reset or live.window is None or live.target != target:
            live.reset(inventory, self._spec(), target)
        else:
            live.update(inventory)
        self._header = self.session.header(wanted, inventory=inventory, counts=live.counts)
        if reason and not self.live:
            self._stamp_text = f"as of [{self.as_of}]; {reason}" if self.as_of else reason
        window = live.window
        if window is not None and self.page and self.page * self.page_size >= window.matching:
            # the page it was on is gone: back to the last page there is
            self.page = max(0, (window.matching - 1) // self.page_size)
            live.reset(inventory, self._spec(), self._header.target)
        for name, root in list(self._selected.items()):
            # a checked row stays checked while its name still lists it, movable
            if not any(
                r.name == name and r.movable and not r.hidden for r in inventory.records_of(root)
            ):
                del self._selected[name]
        self._draw()

    def _rewindow(self) -> None:
        """Sort, filter, page or target changed: a fresh window of the same namespace."""
        inventory = self._inventory
        target = self.session.choose_target(self.target_dropdown.value)
        self._window.reset(inventory if inventory is not None else [], self._spec(), target)
        self._header = self.session.header(
            self.target_dropdown.value, inventory=inventory, counts=self._window.counts
        )
        self._draw()

    # -- drawing ---------------------------------------------------------------------------------
    def _draw(self) -> None:
        header = self._header
        if header is None:
            return
        stamp = self._stamp_text
        self.stamp.value = f'<span style="{_MUTED_STYLE}">{escape(stamp)}</span>' if stamp else ""
        self._draw_targets(header)
        self._draw_totals(header)
        self.message.value = (
            f'<p style="{_MUTED_STYLE}">{escape(header.message)}</p>' if header.message else ""
        )
        self.message.layout.display = None if header.message else "none"
        self._draw_page()
        self._draw_buttons()

    def _draw_targets(self, header: Header) -> None:
        enabled = [t.device for t in header.targets if t.enabled]
        disabled = viewmodel.unavailable(header.targets)
        self._syncing = True
        try:
            if list(self.target_dropdown.options) != enabled:
                self.target_dropdown.options = enabled
            if self.target_dropdown.value != header.target:
                self.target_dropdown.value = header.target
        finally:
            self._syncing = False
        note = " · ".join(f"{escape(d)}: {escape(r)}" for d, r in disabled)
        self.target_note.value = (
            f'<span style="{_MUTED_STYLE}">not available: {note}</span>' if note else ""
        )

    def _draw_totals(self, header: Header) -> None:
        children = []
        for bar in header.bars:
            row = self._device_rows.get(bar.device)
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
                self._device_rows[bar.device] = row
            box, name, progress, figures = row
            name.value = f"<b>{escape(bar.device)}</b>"
            progress.value = bar.fraction
            figures.value = f'<span style="font-size:12px">{escape(bar.text)}</span>'
            children.append(box)
        if tuple(self.totals.children) != tuple(children):
            self.totals.children = children
        self.totals_note.value = (
            f'<span style="{_MUTED_STYLE}">{escape(header.totals_note)}</span>'
            if header.totals_note
            else ""
        )
        if header.warnings:
            lines = "<br>".join(f"⚠ {escape(w)}" for w in header.warnings)
            self.warnings.value = f'<div style="{_WARN_STYLE}">{lines}</div>'
            self.warnings.layout.display = None
        else:
            self.warnings.value = ""
            self.warnings.layout.display = "none"

    def _draw_page(self) -> None:
        window = self._window.window
        rows = window.rows if window is not None else ()
        widths = _column_widths(rows)
        self._head[1].value = _cells(None, widths)
        self.row_checkboxes = {}
        self.row_buttons = {}
        self._syncing = True
        try:
            for row, (checkbox, cells, button) in zip(rows, self._slots, strict=False):
                cells.value = _cells(row, widths)
                checkbox.value = row.selectable and row.name in self._selected
                checkbox.disabled = not row.selectable
                checkbox.layout.visibility = "visible" if row.selectable else "hidden"
                checkbox.tooltip = f"select {row.name}" if row.selectable else None
                if row.selectable:
                    self.row_checkboxes[row.name] = checkbox
                _set_button(button, row.action, self._busy)
                self.row_buttons[row.name] = button
        finally:
            self._syncing = False
        children = self._head + tuple(w for slot in self._slots[: len(rows)] for w in slot)
        if tuple(self.grid.children) != children:
            self.grid.children = children
        matching = window.matching if window is not None else 0
        total = window.total if window is not None else 0
        start = self.page * self.page_size
        if matching:
            self.page_label.value = escape(
                f"rows {start + 1:,}–{start + len(rows):,} of {matching:,}"
                + (f" (filtered from {total:,})" if matching != total else "")
            )
        else:
            self.page_label.value = "no rows match" if self.filter_text.value else "no rows"
        self.prev_button.disabled = self.page == 0
        self.next_button.disabled = start + self.page_size >= matching

    def _draw_buttons(self) -> None:
        header = self._header
        if header is None:
            return
        busy = self._busy
        _set_button(self.move_all_button, header.move_all, busy)
        _set_button(
            self.move_selected_button,
            viewmodel.move_selected_action(header, list(self._selected)),
            busy,
        )
        _set_button(self.undo_button, header.undo, busy)
        _set_button(self.refresh_button, header.refresh, busy)
        if busy:
            for button in self.row_buttons.values():
                button.disabled = True

    def _set_status(self, text: str, error: bool = False) -> None:
        style = _ERROR_STYLE if error else _OK_STYLE
        self.status.value = f'<span style="{style}">{escape(text)}</span>'

    # -- actions ------------------------------------------------------------------------------
    def _execution_count(self) -> Any:
        return self.session.cell_number()

    def _run_move(self, names: list[str] | None) -> None:
        target = self.target_dropdown.value
        enabled = [t.device for t in self.session.targets() if t.enabled]
        if not target or target not in enabled:  # asked again: meta may have been turned off
            self._set_status(f"MoveError: {target or 'no device'} is not an available target", True)
            return
        self._start_progress(f"to {target}")
        try:
            result = self.session.move(target, names, progress=self._on_progress)
        except Exception:
            self._end_progress(False)
            raise
        self._show_result(result)
        if result.ok:
            moved = {item.name for item in result.moved}
            for name in [n for n, root in self._selected.items() if root in moved]:
                del self._selected[name]
        self._recompute(reason=f"then moved by its button (kernel at [{self._execution_count()}])")

    def _show_result(self, result: Any) -> None:
        if not result.ok:
            self._end_progress(False)
            self._set_status(result.summary(), error=True)
            return
        self._end_progress(True)
        action = self.session.last_action
        text = action["message"] if action else result.summary()
        skipped = action.get("skipped", []) if action else []
        if skipped:
            shown = "; ".join(f"{s['name']}: {s['reason']}" for s in skipped[:3])
            more = f" (+{len(skipped) - 3} more)" if len(skipped) > 3 else ""
            text += " — skipped " + shown + more
        self._set_status(text, error=False)

    def _start_progress(self, what: str) -> None:
        self.progress.value = 0
        self.progress.max = 1
        self.progress.bar_style = ""
        self.progress.description = "moving"
        self.progress_label.value = escape(what)
        self._progress_box.layout.display = None

    def _on_progress(self, done: int, total: int) -> None:
        total = max(int(total), 0)
        done = min(max(int(done), 0), total)
        if self.progress.value > total:
            self.progress.value = 0
        self.progress.max = total
        self.progress.value = done
        self.progress_label.value = escape(f"{format_bytes(done)} of {format_bytes(total)}")

    def _end_progress(self, ok: bool) -> None:
        self.progress.bar_style = "success" if ok else "danger"
        self.progress.description = "done" if ok else "failed"

    @_guarded
    def _on_move_all(self, _button: Any = None) -> None:
        self._run_move(None)

    @_guarded
    def _on_move_selected(self, _button: Any = None) -> None:
        names = list(dict.fromkeys(self._selected.values()))
        if not names:
            self._set_status("nothing selected", error=True)
            return
        self._run_move(names)

    @_guarded
    def _on_row_click(self, index: int, _button: Any = None) -> None:
        rows = self.rows()
        if index >= len(rows):
            return
        row = rows[index]
        if not row.action.enabled:
            self._set_status(row.action.reason, error=True)
            return
        self._run_move([row.root])

    @_guarded
    def _on_undo(self, _button: Any = None) -> None:
        self._start_progress("undo")
        try:
            result = self.session.undo(progress=self._on_progress)
        except Exception:
            self._end_progress(False)
            raise
        self._show_result(result)
        self._recompute(reason=f"then undone by its button (kernel at [{self._execution_count()}])")

    @_guarded
    def _on_refresh(self, _button: Any = None) -> None:
        self.session.full_scan()
        self._recompute(reason=f"refreshed by its button (kernel at [{self._execution_count()}])")

    @_guarded
    def _on_prev(self, _button: Any = None) -> None:
        if self.page > 0:
            self.page -= 1
            self._rewindow()

    @_guarded
    def _on_next(self, _button: Any = None) -> None:
        window = self._window.window
        if window is not None and (self.page + 1) * self.page_size < window.matching:
            self.page += 1
            self._rewindow()

    def _on_check(self, index: int, change: dict[str, Any]) -> None:
        rows = self.rows()
        if self._syncing or index >= len(rows):
            return
        row = rows[index]
        if change["new"] and row.selectable:
            self._selected[row.name] = row.root
        else:
            self._selected.pop(row.name, None)
        self._draw_buttons()

    def _on_change(self) -> None:
        if self._syncing:
            return
        try:
            self._rewindow()
        except Exception as error:
            self._set_status(_message(error), error=True)

    def _on_target(self, change: dict[str, Any]) -> None:
        self._on_change()

    def _on_sort(self, change: dict[str, Any]) -> None:
        self.page = 0
        self._on_change()

    def _on_filter(self, change: dict[str, Any]) -> None:
        self.page = 0
        self._on_change()

    def close(self) -> None:
        """Close every widget this table made, pooled rows and their Layout/Style models
        included (ipywidgets keeps each open widget alive until it is closed)."""
        owned: list[Any] = [w for slot in self._slots for w in slot]
        owned += [w for row in self._device_rows.values() for w in row]
        owned += [*self._head, *self._shared]
        stack = list(self.children)
        while stack:
            widget = stack.pop()
            owned.append(widget)
            stack.extend(getattr(widget, "children", ()))
        for widget in owned:
            for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
                if isinstance(part, widgets.Widget):
                    part.close()
            widget.close()
        self._closed = True
        self.layout.close()
        super().close()


__all__ = ["DeviceTable"]
