"""``DeviceTable``: the live ipywidgets table ``%devices`` shows in a notebook.

A thin view: the rows come from ``session.inventory`` (:mod:`.inventory`), the cells from
:func:`.render.row_cells`, and every button goes through the session (``session.move`` /
``session.undo``), which runs the all-or-nothing engine in :mod:`.moves` and then calls
``refresh(session)`` on every live view, this one included.

Why it is built the way it is:

* A namespace can hold 10,000 tensors. Only one page is shown, and the row widgets (a checkbox,
  a "→ device" button and one HTML cell line per row) are a fixed pool of ``page_size`` rows
  created once and re-filled on every refresh: the number of widgets (and of comm channels to
  the frontend) never grows with the namespace, and a refresh sends only what changed.
* ipywidgets keeps every widget alive until it is closed, so nothing here is created per
  refresh except the small per-device header rows, which are reused by device name.
* A click never ends in a traceback: every handler catches what the session raises and writes
  ``Type: message`` to the status line (escaped, red). Everything shown is HTML-escaped.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable
from html import escape
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
from ipywidgets.widgets.widget_bool import CheckboxStyle
from ipywidgets.widgets.widget_string import HTMLStyle

from .records import Record
from .render import COLUMNS, row_cells
from .scanner import scan
from .units import device_sort_key, format_bytes

if TYPE_CHECKING:
    from .records import DeviceTotal
    from .scanner import Inventory

#: Column widths of the cell line, in ``ch`` (the note column takes what is left).
_WIDTHS = {"name": 22, "type": 14, "device": 10, "dtype": 9, "shape": 16, "size": 24}
_CELL = (
    "display:inline-block;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;"
    "vertical-align:middle;padding-right:1ch;box-sizing:border-box"
)
_ROW_STYLE = "font-family:var(--jp-code-font-family, monospace);font-size:12px;line-height:28px"
_ERROR_STYLE = "color:#b91c1c"
_OK_STYLE = "color:#166534"
_WARN_STYLE = "color:#b45309"
_MUTED_STYLE = "color:#6b7280;font-size:12px"

SORT_OPTIONS = (("size (largest first)", "size"), ("name", "name"), ("device", "device"))


def _cells_html(cells: tuple[str, ...], header: bool = False) -> str:
    parts = []
    for column, text in zip(COLUMNS, cells, strict=True):
        width = _WIDTHS.get(column)
        size = f"width:{width}ch;" if width else "max-width:40ch;"
        shown = f"<b>{escape(text)}</b>" if header else escape(text)
        parts.append(f'<span style="{_CELL};{size}" title="{escape(text)}">{shown}</span>')
    return f'<div style="{_ROW_STYLE};white-space:nowrap">{"".join(parts)}</div>'


def _same_device(device: str, target: str) -> bool:
    """``cuda`` and ``cuda:0`` (``mps`` and ``mps:0``) name the same device."""

    def norm(name: str) -> str:
        name = name.strip()
        return name if ":" in name or name in ("cpu", "meta") else name + ":0"

    return norm(device) == norm(target)


def _message(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _guarded(method: Callable[..., None]) -> Callable[..., None]:
    """Button/observer handlers: one at a time, and never a traceback into the frontend."""

    @functools.wraps(method)
    def handler(self: DeviceTable, *args: Any) -> None:
        if self._busy:
            return
        self._busy = True
        self._update_buttons()
        try:
            method(self, *args)
        except Exception as error:
            self._set_status(_message(error), error=True)
            with contextlib.suppress(Exception):  # show the namespace as it is now
                self.refresh(self.session)
        finally:
            self._busy = False
            # the row buttons were disabled while busy: give them their own state back
            with contextlib.suppress(Exception):
                self._render_page()
            self._update_buttons()

    return handler


class DeviceTable(widgets.VBox):
    """Every tensor, module, optimizer and tensor container of the kernel, with its device and
    memory, per-device totals, and buttons that move things (through ``session.move``).

    ``DeviceTable(session, include_hidden=False, page_size=50)``; registers itself with
    ``session.add_view`` so it re-renders after every cell and every move.

    Public attributes (tests press the buttons with ``Button.click()``):

    ``session``                 the :class:`~torchdevice_magic.session.DeviceSession` it shows
    ``include_hidden``          also list tensors kept alive only by ``Out`` / ``_``
    ``page_size``, ``page``     rows per page, the current page (0-based)
    ``totals``                  VBox: one row per device (name, ``FloatProgress``, figures)
    ``warnings``                HTML: objects spanning devices (``inventory.mixed_warnings()``)
    ``message``                 HTML: empty-state line (torch not imported, nothing found)
    ``target_dropdown``         Dropdown of the *enabled* targets of ``session.targets()``
    ``target_note``             HTML: the disabled targets and why ("cuda: CUDA is not ...")
    ``sort_dropdown``           Dropdown: ``"size"`` (default, largest first), ``"name"``,
                                ``"device"``
    ``move_all_button``         "Move all to <target>"
    ``move_selected_button``    "Move selected (n)": the checked rows' objects
    ``undo_button``             undoes the last move; disabled when ``session.undo_stack`` is empty
    ``refresh_button``          rescans the namespace
    ``prev_button``, ``next_button``, ``page_label`` ("rows 1–50 of 10,000")
    ``progress``                IntProgress (bytes done / total) fed by the move's ``progress``
    ``progress_label``          HTML beside it ("1.2 MiB of 4.0 MiB")
    ``status``                  HTML: the last outcome, or the refusal in red (escaped)
    ``grid``                    GridBox holding the header and the page's rows
    ``row_checkboxes``          {row name: Checkbox} for the movable, visible rows of the page
    ``row_buttons``             {row name: Button "→ <target>"} for every row of the page;
                                disabled (tooltip says why) when already there or not movable
    ``rendered_rows()``         the page's rows as :func:`render.row_cells` tuples
                                (name, type, device, dtype, shape, size, note)
    ``selected``                the checked row names (kept across pages and refreshes)

    A row of a small container (``batch['x']``) moves its whole top-level name (``batch``):
    moves take top-level names, and the row's tooltip says so.
    """

    def __init__(self, session: Any, include_hidden: bool = False, page_size: int = 50) -> None:
        super().__init__()
        self.session = session
        self.include_hidden = bool(include_hidden)
        self.page_size = max(1, int(page_size))
        self.page = 0
        self.row_checkboxes: dict[str, widgets.Checkbox] = {}
        self.row_buttons: dict[str, widgets.Button] = {}
        self._selected: dict[str, str] = {}  # row name -> the top-level name it moves
        self._busy = False
        self._syncing = False
        self._closed = False
        self._inventory_shown: Inventory | None = None
        self._hidden_scan: tuple[Any, Inventory] | None = None
        self._order_key: tuple[Any, str] | None = None
        self._ordered: list[Record] = []
        self._page_records: list[Record] = []
        # device -> (HBox, name, bar, figures): reused, so a refresh creates no widgets
        self._device_rows: dict[
            str, tuple[widgets.HBox, widgets.HTML, widgets.FloatProgress, widgets.HTML]
        ] = {}

        # -- header: per-device totals, mixed-device warnings -----------------------------------
        self.totals = widgets.VBox()
        self.warnings = widgets.HTML(layout=widgets.Layout(display="none"))
        self.message = widgets.HTML(layout=widgets.Layout(display="none"))

        # -- controls -----------------------------------------------------------------------------
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

        # -- the table: a fixed pool of page_size rows ------------------------------------------
        self.prev_button = widgets.Button(
            description="Prev", icon="chevron-left", layout=widgets.Layout(width="auto")
        )
        self.next_button = widgets.Button(
            description="Next", icon="chevron-right", layout=widgets.Layout(width="auto")
        )
        self.page_label = widgets.HTML()
        self._header = (
            widgets.HTML(layout=widgets.Layout(width="28px")),
            widgets.HTML(),
            widgets.HTML(_cells_html(COLUMNS, header=True)),
        )
        self._slots: list[tuple[widgets.Checkbox, widgets.Button, widgets.HTML]] = []
        # Every widget brings a Layout and a Style model of its own unless given one: the rows
        # share theirs (a checkbox keeps its own Layout, whose visibility hides it on rows
        # that cannot be selected), which about halves the models sent to the frontend.
        checkbox_style = CheckboxStyle()
        button_layout = widgets.Layout(width="auto", height="26px")
        button_style = widgets.ButtonStyle()
        cells_layout = widgets.Layout()
        cells_style = HTMLStyle()
        self._shared = (checkbox_style, button_layout, button_style, cells_layout, cells_style)
        for index in range(self.page_size):
            checkbox = widgets.Checkbox(
                value=False,
                indent=False,
                layout=widgets.Layout(width="28px"),
                style=checkbox_style,
            )
            button = widgets.Button(layout=button_layout, style=button_style)
            cells = widgets.HTML(layout=cells_layout, style=cells_style)
            checkbox.observe(functools.partial(self._on_check, index), names="value")
            button.on_click(functools.partial(self._on_row_click, index))
            self._slots.append((checkbox, button, cells))
        self.grid = widgets.GridBox(
            list(self._header),
            layout=widgets.Layout(
                grid_template_columns="28px max-content 1fr",
                grid_gap="0px 6px",
                align_items="center",
                overflow="auto",
            ),
        )

        self.target_dropdown.observe(self._on_target, names="value")
        self.sort_dropdown.observe(self._on_sort, names="value")
        self.move_all_button.on_click(self._on_move_all)
        self.move_selected_button.on_click(self._on_move_selected)
        self.undo_button.on_click(self._on_undo)
        self.refresh_button.on_click(self._on_refresh)
        self.prev_button.on_click(self._on_prev)
        self.next_button.on_click(self._on_next)

        controls = widgets.HBox(
            [
                self.target_dropdown,
                self.move_all_button,
                self.move_selected_button,
                self.undo_button,
                self.refresh_button,
            ],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        pager = widgets.HBox(
            [self.sort_dropdown, self.prev_button, self.next_button, self.page_label],
            layout=widgets.Layout(align_items="center"),
        )
        self.children = [
            self.totals,
            self.warnings,
            controls,
            self.target_note,
            self._progress_box,
            self.status,
            self.message,
            pager,
            self.grid,
        ]
        session.add_view(self)
        if "torch" in sys.modules:  # show the namespace as it is now (incremental: cheap)
            session.rescan()
        self.refresh(session)

    # -- what tests and callers read ----------------------------------------------------------
    @property
    def selected(self) -> list[str]:
        return list(self._selected)

    def rendered_rows(self) -> list[tuple[str, ...]]:
        """The rows on the current page, as :func:`render.row_cells` tuples."""
        return [row_cells(record) for record in self._page_records]

    # -- refresh ------------------------------------------------------------------------------
    def refresh(self, session: Any = None) -> None:
        """Re-render from ``session.inventory`` (the session calls this after every cell and
        every move)."""
        if self._closed:
            return
        inventory = self._inventory()
        self._inventory_shown = inventory
        self._update_targets()
        self._update_totals(inventory)
        if not inventory.torch_imported:
            self._show_message("torch is not imported: no tensors to show")
        elif not inventory.records:
            self._show_message("No tensors, modules or optimizers in this namespace.")
        else:
            self._show_message("")
        self._order(inventory)
        if self._selected:
            movable = {r.name for r in self._ordered if r.movable and not r.hidden}
            for name in [n for n in self._selected if n not in movable]:
                del self._selected[name]
        self._render_page()
        self._update_buttons()

    def _inventory(self) -> Inventory:
        session = self.session
        inventory = session.inventory
        if inventory is None or (not inventory.torch_imported and "torch" in sys.modules):
            inventory = session.rescan()
        if self.include_hidden and inventory.torch_imported and not inventory.include_hidden:
            # the session scans without hidden objects (unless configured to): look for them
            # here, incrementally from the session's own inventory
            cached = self._hidden_scan
            if cached is None or cached[0] is not inventory:
                hidden = scan(session.namespace, include_hidden=True, previous=inventory)
                self._hidden_scan = cached = (inventory, hidden)
            inventory = cached[1]
        return inventory

    def _order(self, inventory: Inventory) -> None:
        sort = self.sort_dropdown.value
        key = (inventory, sort)
        previous = self._order_key
        if previous is not None and previous[0] is inventory and previous[1] == sort:
            return
        records = inventory.records
        if not self.include_hidden:
            records = [r for r in records if not r.hidden]
        if sort == "name":
            ordered = sorted(records, key=lambda r: (r.name.lower(), r.name))
        elif sort == "device":
            ordered = sorted(
                records,
                key=lambda r: (
                    tuple(map(device_sort_key, r.devices)),
                    *r.size_order(),
                ),
            )
        else:
            ordered = sorted(records, key=Record.size_order)
        self._ordered = ordered
        self._order_key = key
        pages = max(1, -(-len(ordered) // self.page_size))
        self.page = min(self.page, pages - 1)

    def _render_page(self) -> None:
        ordered = self._ordered
        total = len(ordered)
        start = self.page * self.page_size
        page = ordered[start : start + self.page_size]
        self._page_records = page
        target = self.target_dropdown.value
        root_devices = self._root_devices(page)
        self.row_checkboxes = {}
        self.row_buttons = {}
        self._syncing = True
        try:
            for record, (checkbox, button, cells) in zip(page, self._slots, strict=False):
                cells.value = _cells_html(row_cells(record))
                selectable = record.movable and not record.hidden
                checkbox.value = selectable and record.name in self._selected
                checkbox.disabled = not selectable
                checkbox.layout.visibility = "visible" if selectable else "hidden"
                checkbox.tooltip = f"select {record.name}" if selectable else None
                if selectable:
                    self.row_checkboxes[record.name] = checkbox
                enabled, why = self._row_state(record, target, root_devices.get(record.root))
                button.description = f"→ {target}" if target else "→"
                button.disabled = not enabled or self._busy
                button.tooltip = why
                self.row_buttons[record.name] = button
        finally:
            self._syncing = False
        children = self._header + tuple(w for slot in self._slots[: len(page)] for w in slot)
        if tuple(self.grid.children) != children:
            self.grid.children = children
        if total:
            self.page_label.value = escape(f"rows {start + 1:,}–{start + len(page):,} of {total:,}")
        else:
            self.page_label.value = "no rows"
        self.prev_button.disabled = self.page == 0
        self.next_button.disabled = start + self.page_size >= total

    def _root_devices(self, page: list[Record]) -> dict[str, tuple[str, ...]]:
        """For rows that are parts of a top-level name (``batch['x']``): the devices of the
        whole name, which is what their button moves."""
        inventory = self._inventory_shown
        if inventory is None or all(r.root == r.name for r in page):
            return {}
        roots = inventory.roots()
        found: dict[str, tuple[str, ...]] = {}
        for record in page:
            if record.root != record.name and record.root not in found:
                devices = {d for r in roots.get(record.root, ()) for d in r.devices}
                found[record.root] = tuple(sorted(devices, key=device_sort_key))
        return found

    @staticmethod
    def _row_state(
        record: Record, target: str | None, root_devices: tuple[str, ...] | None
    ) -> tuple[bool, str]:
        """(can this row's button move it, the tooltip saying what it does or why not)."""
        if record.hidden:
            return False, f"{record.name} is held only by IPython's output history"
        if not record.movable:
            return False, f"{record.name} cannot be moved" + (
                f": {record.note}" if record.note else ""
            )
        if not target:
            return False, "no target device available"
        devices = root_devices if root_devices is not None else record.devices
        if not devices:
            return False, f"{record.root} holds no tensors"
        if all(_same_device(d, target) for d in devices):
            return False, f"{record.root} is already on {target}"
        if record.root != record.name:
            return True, f"Move {record.root} (all of it, not just {record.name}) to {target}"
        return True, f"Move {record.name} to {target}"

    def _update_targets(self) -> None:
        targets = self.session.targets()
        enabled = [str(t["device"]) for t in targets if t.get("enabled")]
        disabled = [
            (str(t["device"]), str(t.get("reason") or "not available"))
            for t in targets
            # meta is a target only where the config allows it; no need to advertise it
            if not t.get("enabled") and t["device"] != "meta"
        ]
        current = self.target_dropdown.value
        value = current if current in enabled else self._default_target(enabled)
        self._syncing = True
        try:
            if list(self.target_dropdown.options) != enabled:
                self.target_dropdown.options = enabled
            if self.target_dropdown.value != value:
                self.target_dropdown.value = value
        finally:
            self._syncing = False
        note = " · ".join(f"{escape(device)}: {escape(reason)}" for device, reason in disabled)
        self.target_note.value = (
            f'<span style="{_MUTED_STYLE}">not available: {note}</span>' if note else ""
        )

    def _default_target(self, enabled: list[str]) -> str | None:
        if not enabled:
            return None
        try:
            default = self.session.default_target()
        except Exception:
            default = None
        if default:
            for device in enabled:
                if _same_device(device, str(default)):
                    return device
        return enabled[0]

    def _update_totals(self, inventory: Inventory) -> None:
        rows = inventory.device_totals() if inventory.torch_imported else []
        relative = [t.bytes for t in rows if t.capacity is None and t.device != "meta"]
        largest = max(relative, default=0) or 1
        children = []
        for total in rows:
            row = self._device_rows.get(total.device)
            if row is None:
                name = widgets.HTML(layout=widgets.Layout(width="90px"))
                bar = widgets.FloatProgress(
                    value=0.0, min=0.0, max=1.0, layout=widgets.Layout(width="220px")
                )
                figures = widgets.HTML()
                row = (widgets.HBox([name, bar, figures]), name, bar, figures)
                self._device_rows[total.device] = row
            box, name, bar, figures = row
            name.value = f"<b>{escape(total.device)}</b>"
            maximum, value, text = _bar_figures(total, largest)
            if bar.value > maximum:
                bar.value = 0.0
            bar.max = maximum
            bar.value = min(value, maximum)
            figures.value = f'<span style="{_ROW_STYLE}">{escape(text)}</span>'
            children.append(box)
        if tuple(self.totals.children) != tuple(children):
            self.totals.children = children
        warnings = inventory.mixed_warnings() if inventory.torch_imported else []
        if warnings:
            lines = "<br>".join(f"⚠ {escape(w)}" for w in warnings)
            self.warnings.value = f'<div style="{_WARN_STYLE}">{lines}</div>'
            self.warnings.layout.display = None
        else:
            self.warnings.value = ""
            self.warnings.layout.display = "none"

    def _show_message(self, text: str) -> None:
        self.message.value = f'<p style="{_MUTED_STYLE}">{escape(text)}</p>' if text else ""
        self.message.layout.display = None if text else "none"

    def _update_buttons(self) -> None:
        busy = self._busy
        target = self.target_dropdown.value
        n = len(self._selected)
        self.move_all_button.description = f"Move all to {target}" if target else "Move all"
        self.move_all_button.disabled = busy or not target
        self.move_all_button.tooltip = (
            f"Move every tensor, module, optimizer and container of tensors to {target}"
            if target
            else "no target device available"
        )
        self.move_selected_button.description = f"Move selected ({n})"
        self.move_selected_button.disabled = busy or not target or n == 0
        self.move_selected_button.tooltip = (
            f"Move {', '.join(self._selected)} to {target}"
            if n and target
            else "check rows to move them"
        )
        stack = getattr(self.session, "undo_stack", [])
        self.undo_button.disabled = busy or not stack
        self.undo_button.tooltip = f"Undo: {stack[-1].summary()}" if stack else "nothing to undo"
        self.refresh_button.disabled = busy
        if busy:
            for button in self.row_buttons.values():
                button.disabled = True

    def _set_status(self, text: str, error: bool = False) -> None:
        style = _ERROR_STYLE if error else _OK_STYLE
        self.status.value = f'<span style="{style}">{escape(text)}</span>'

    # -- actions ------------------------------------------------------------------------------
    def _run_move(self, names: list[str] | None) -> None:
        target = self.target_dropdown.value
        if not target or target not in self._current_enabled():
            self._set_status(f"MoveError: {target or 'no device'} is not an available target", True)
            return
        self._start_progress(f"to {target}")
        try:
            result = self.session.move(target, names, progress=self._on_progress)
        except Exception:
            self._end_progress(False)
            raise  # the handler's guard shows it in the status line
        self._show_result(result)
        if result.ok:
            moved = {item.name for item in result.moved}
            for name in [n for n, root in self._selected.items() if root in moved]:
                del self._selected[name]
            self._update_buttons()

    def _current_enabled(self) -> list[str]:
        """Asked again at click time: a device can disappear, or meta be turned off."""
        return [str(t["device"]) for t in self.session.targets() if t.get("enabled")]

    def _show_result(self, result: Any) -> None:
        if not result.ok:
            self._end_progress(False)
            self._set_status(result.summary(), error=True)
            return
        self._end_progress(True)
        # the session's outcome line: the summary plus what the user must know (e.g. undo)
        action = self.session.last_action
        text = action["message"] if action else result.summary()
        reasons = [why for _, why in result.skipped if not why.startswith("already on")]
        if reasons:
            more = f" (+{len(reasons) - 3} more)" if len(reasons) > 3 else ""
            text += " — skipped: " + "; ".join(reasons[:3]) + more
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
        if index >= len(self._page_records):
            return
        record = self._page_records[index]
        enabled, why = self._row_state(
            record, self.target_dropdown.value, self._root_devices([record]).get(record.root)
        )
        if not enabled:
            self._set_status(why, error=True)
            return
        self._run_move([record.root])

    @_guarded
    def _on_undo(self, _button: Any = None) -> None:
        self._start_progress("undo")
        try:
            result = self.session.undo(progress=self._on_progress)
        except Exception:
            self._end_progress(False)
            raise
        self._show_result(result)

    @_guarded
    def _on_refresh(self, _button: Any = None) -> None:
        self.session.full_scan()
        self.session.refresh_views()  # every live view, this one included

    @_guarded
    def _on_prev(self, _button: Any = None) -> None:
        if self.page > 0:
            self.page -= 1
            self._render_page()

    @_guarded
    def _on_next(self, _button: Any = None) -> None:
        if (self.page + 1) * self.page_size < len(self._ordered):
            self.page += 1
            self._render_page()

    def _on_check(self, index: int, change: dict[str, Any]) -> None:
        if self._syncing or index >= len(self._page_records):
            return
        record = self._page_records[index]
        if change["new"] and record.movable and not record.hidden:
            self._selected[record.name] = record.root
        else:
            self._selected.pop(record.name, None)
        self._update_buttons()

    def _on_target(self, change: dict[str, Any]) -> None:
        if self._syncing:
            return
        try:
            self._render_page()
            self._update_buttons()
        except Exception as error:
            self._set_status(_message(error), error=True)

    def _on_sort(self, change: dict[str, Any]) -> None:
        if self._syncing:
            return
        try:
            self.page = 0
            if self._inventory_shown is not None:
                self._order(self._inventory_shown)
            self._render_page()
        except Exception as error:
            self._set_status(_message(error), error=True)

    def close(self) -> None:
        """Close every widget this table made, pooled rows and their Layout/Style models
        included (ipywidgets keeps each open widget alive until it is closed)."""
        owned: list[Any] = [w for slot in self._slots for w in slot]
        owned += [w for row in self._device_rows.values() for w in row]
        owned += [*self._header, *self._shared]
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
        self._closed = True  # the session holds views weakly; until this one goes, it is inert
        self.layout.close()
        super().close()


def _bar_figures(total: DeviceTotal, largest: int) -> tuple[float, float, str]:
    """(bar maximum, bar value, the figures beside it) for one device."""
    if total.device == "meta":
        return 1.0, 0.0, f"0 B (needs {format_bytes(total.would_need_bytes)})"
    if total.capacity:
        text = f"{format_bytes(total.bytes)} of {format_bytes(total.capacity)}"
        extra = []
        if total.allocated is not None:
            extra.append(f"allocated {format_bytes(total.allocated)}")
        if total.reserved is not None:
            extra.append(f"reserved {format_bytes(total.reserved)}")
        if extra:
            text += " (" + ", ".join(extra) + ")"
        return float(total.capacity), float(total.bytes), text
    return float(largest), float(total.bytes), format_bytes(total.bytes)


__all__ = ["DeviceTable"]
