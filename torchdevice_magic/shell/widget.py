"""``DeviceTable``: the ipywidgets table ``%devices`` shows in a notebook. It draws the view
model (:mod:`.viewmodel`) and decides nothing: rows, sizes, totals, sort orders, the default
target and every button's state and reason come from there.

A table is a record of its moment: it shows the namespace as it was when its cell ran ("as of
[n]") and changes only by its own buttons (Move / Undo / Refresh, after which it says so). With
``live=True`` (``%devices --live``) it follows every cell instead, labelled "live".

Why it is built the way it is:

* Only one page is shown, from a fixed pool of row widgets re-filled per page; how rows,
  totals and the progress bar are drawn is in :mod:`.tableparts`.
* Every button goes through the controller (:class:`torchdevice_magic.app.DeviceController`).
* A click never ends in a traceback: every handler catches what the controller raises and
  writes ``Type: message`` to the status line (escaped, red). Everything shown is HTML-escaped.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable
from html import escape
from typing import Any

import ipywidgets as widgets

from ..app import DeviceController, WeakController
from ..viewmodel import Header, Row
from .tableparts import (
    ERROR_STYLE,
    MUTED_STYLE,
    OK_STYLE,
    DeviceTotals,
    MoveProgress,
    RowPool,
    TableControls,
    TableWindow,
    close_widgets,
    error_text,
    outcome_text,
)


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
            self._set_status(error_text(error), error=True)
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
    memory, per-device totals, and buttons that move things (through ``app.move``).

    ``DeviceTable(app, include_hidden=False, page_size=50, live=False, as_of=None)``, ``app`` a
    :class:`~torchdevice_magic.app.DeviceController` (``get_session(shell).app``).

    Public attributes (tests press the buttons with ``Button.click()``):

    ``app``, ``include_hidden``, ``live``, ``as_of`` (the execution count it shows)
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
        app: DeviceController,
        include_hidden: bool = False,
        page_size: int = 50,
        live: bool = False,
        as_of: int | None = None,
    ) -> None:
        # never wider than the output area: the rows below shrink (and names wrap) instead of
        # the whole table overflowing out of sight in a narrow notebook
        super().__init__(layout=widgets.Layout(width="100%", min_width="0"))
        #: held weakly: a table left in a notebook's output must not keep the extension alive
        #: after %unload_ext (its buttons then say so)
        self._app = WeakController(app)
        self._view = view = TableWindow(page_size, bool(include_hidden))
        self.include_hidden = view.include_hidden
        self.page_size = view.page_size
        self.live = bool(live)
        self.as_of = as_of
        self.row_checkboxes: dict[str, widgets.Checkbox] = {}
        self.row_buttons: dict[str, widgets.Button] = {}
        self._busy = False
        self._syncing = False
        self._closed = False

        self.stamp = widgets.HTML()
        self._totals = DeviceTotals()
        self.totals = self._totals.box
        self.totals_note = self._totals.note
        self.warnings = self._totals.warnings
        self.message = widgets.HTML(layout=widgets.Layout(display="none"))
        self._controls = controls = TableControls()
        self.target_dropdown = controls.target_dropdown
        self.target_note = controls.target_note
        self.sort_dropdown = controls.sort_dropdown
        self.filter_text = controls.filter_text
        self.move_all_button = controls.move_all_button
        self.move_selected_button = controls.move_selected_button
        self.undo_button = controls.undo_button
        self.refresh_button = controls.refresh_button
        self.prev_button = controls.prev_button
        self.next_button = controls.next_button
        self.page_label = controls.page_label
        self._progress = MoveProgress()
        self.progress = self._progress.bar
        self.progress_label = self._progress.label
        self.status = widgets.HTML()
        self._status_text = ""  # the status line's latest news, as said
        self._rows = RowPool(self.page_size, self._on_check, self._on_row_click)
        self.grid = self._rows.grid

        self.target_dropdown.observe(self._on_target, names="value")
        self.sort_dropdown.observe(self._on_sort, names="value")
        self.filter_text.observe(self._on_filter, names="value")
        self.move_all_button.on_click(self._on_move_all)
        self.move_selected_button.on_click(self._on_move_selected)
        self.undo_button.on_click(self._on_undo)
        self.refresh_button.on_click(self._on_refresh)
        self.prev_button.on_click(self._on_prev)
        self.next_button.on_click(self._on_next)

        self.children = [
            self.stamp,
            self.totals,
            self.totals_note,
            self.warnings,
            controls.actions,
            self.target_note,
            self._progress.box,
            self.status,
            self.message,
            controls.pager,
            self.grid,
        ]
        self._stamp_text = "live" if self.live else f"as of [{as_of}]" if as_of else ""
        if self.live:
            app.add_view(self)
        if "torch" in sys.modules:  # show the namespace as it is now (incremental: cheap)
            app.rescan()
        self._recompute()

    # -- what tests and callers read ----------------------------------------------------------
    @property
    def app(self) -> DeviceController:
        """The controller (:class:`~torchdevice_magic.app.ControllerGone` once unloaded)."""
        return self._app()

    @property
    def selected(self) -> list[str]:
        return list(self._view.selected)

    @property
    def page(self) -> int:
        """The page shown (0-based)."""
        return self._view.page

    @page.setter
    def page(self, page: int) -> None:
        self._view.page = max(0, int(page))

    def rows(self) -> list[Row]:
        return list(self._view.rows())

    def rendered_rows(self) -> list[tuple[str, ...]]:
        return [row.cells() for row in self.rows()]

    @property
    def header(self) -> Header | None:
        return self._view.header

    # -- the view model --------------------------------------------------------------------------
    def refresh(self, app: Any = None) -> None:
        """Follow the namespace (live tables only: the controller calls this after every
        cell)."""
        if self._closed or not self.live:
            return
        self._recompute()

    def _recompute(self, reason: str = "") -> None:
        """Take the namespace as it is now into the view model, then draw."""
        self._view.take(
            self.app, self.sort_dropdown.value, self.filter_text.value, self.target_dropdown.value
        )
        if reason and not self.live:
            self._stamp_text = f"as of [{self.as_of}]; {reason}" if self.as_of else reason
        self._draw()

    def _rewindow(self) -> None:
        """Sort, filter, page or target changed: a fresh window of the same namespace."""
        self._rows.fit_widths()
        self._view.rewindow(
            self.app, self.sort_dropdown.value, self.filter_text.value, self.target_dropdown.value
        )
        self._draw()

    # -- drawing ---------------------------------------------------------------------------------
    def _draw(self) -> None:
        header = self._view.header
        if header is None:
            return
        stamp = self._stamp_text
        self.stamp.value = f'<span style="{MUTED_STYLE}">{escape(stamp)}</span>' if stamp else ""
        self._draw_targets(header)
        self._totals.draw(header)
        self.message.value = (
            f'<p style="{MUTED_STYLE}">{escape(header.message)}</p>' if header.message else ""
        )
        self.message.layout.display = None if header.message else "none"
        self._draw_page()
        self._draw_buttons()

    def _draw_targets(self, header: Header) -> None:
        self._syncing = True
        try:
            self._controls.draw_targets(header)
        finally:
            self._syncing = False

    def _draw_page(self) -> None:
        view = self._view
        window, rows = view.live.window, view.rows()
        self._syncing = True
        try:
            self.row_checkboxes, self.row_buttons = self._rows.draw(rows, view.selected, self._busy)
        finally:
            self._syncing = False
        self._controls.draw_pager(
            view.page * view.page_size,
            len(rows),
            view.page_size,
            window.matching if window is not None else 0,
            window.total if window is not None else 0,
        )

    def _draw_buttons(self) -> None:
        header = self._view.header
        if header is None:
            return
        busy = self._busy
        self._controls.draw_buttons(header, list(self._view.selected), busy)
        if busy:
            self._rows.disable_buttons()

    def _set_status(self, text: str, error: bool = False) -> None:
        style = ERROR_STYLE if error else OK_STYLE
        self._status_text = text
        self.status.value = f'<span style="{style}">{escape(text)}</span>'

    def _age_status(self, when: Any) -> None:
        """After a Refresh the table shows the namespace of now, and the status line's news
        (the last move, undo or refusal) came before it: kept, muted and marked as the last
        action, so it does not read as what the refreshed table shows."""
        if self._status_text:
            at = f" at [{when}]" if when is not None else ""
            text = f"last action, before the refresh{at}: {self._status_text}"
            self.status.value = f'<span style="{MUTED_STYLE}">{escape(text)}</span>'

    # -- actions ------------------------------------------------------------------------------
    def _execution_count(self) -> Any:
        return self.app.cell_number()

    def _run_move(self, names: list[str] | None) -> None:
        target = self.target_dropdown.value
        enabled = [t.device for t in self.app.targets() if t.enabled]
        if not target or target not in enabled:  # asked again: meta may have been turned off
            self._set_status(f"MoveError: {target or 'no device'} is not an available target", True)
            return
        self._progress.start(f"to {target}")
        try:
            result = self.app.move(target, names, progress=self._progress.update)
        except Exception:
            self._progress.end(False)
            raise
        self._show_result(result)
        if result.ok:
            moved = {item.name for item in result.moved}
            selected = self._view.selected
            for name in [n for n, root in selected.items() if root in moved]:
                del selected[name]
        self._recompute(reason=f"then moved by its button (kernel at [{self._execution_count()}])")

    def _show_result(self, result: Any) -> None:
        if not result.ok:
            self._progress.end(False)
            self._set_status(result.summary(), error=True)
            return
        self._progress.end(True)
        self._set_status(outcome_text(self.app.last_action, result), error=False)

    @_guarded
    def _on_move_all(self, _button: Any = None) -> None:
        self._run_move(None)

    @_guarded
    def _on_move_selected(self, _button: Any = None) -> None:
        names = list(dict.fromkeys(self._view.selected.values()))
        if not names:
            self._set_status("nothing selected", error=True)
            return
        self._run_move(names)

    def _row(self, key: str) -> Row | None:
        """The page's row of this key (None once it left the page)."""
        return next((row for row in self._view.rows() if row.key == key), None)

    @_guarded
    def _on_row_click(self, key: str, _button: Any = None) -> None:
        row = self._row(key)
        if row is None:
            return
        if not row.action.enabled:
            self._set_status(row.action.reason, error=True)
            return
        self._run_move([row.root])

    @_guarded
    def _on_undo(self, _button: Any = None) -> None:
        self._progress.start("undo")
        try:
            result = self.app.undo(progress=self._progress.update)
        except Exception:
            self._progress.end(False)
            raise
        self._show_result(result)
        self._recompute(reason=f"then undone by its button (kernel at [{self._execution_count()}])")

    @_guarded
    def _on_refresh(self, _button: Any = None) -> None:
        self.app.full_scan()
        when = self._execution_count()
        self._recompute(reason=f"refreshed by its button (kernel at [{when}])")
        self._age_status(when)

    @_guarded
    def _on_prev(self, _button: Any = None) -> None:
        if self._view.turn(-1):
            self._rewindow()

    @_guarded
    def _on_next(self, _button: Any = None) -> None:
        if self._view.turn(1):
            self._rewindow()

    def _on_check(self, key: str, change: dict[str, Any]) -> None:
        row = None if self._syncing else self._row(key)
        if row is None:
            return
        if change["new"] and row.selectable:
            self._view.selected[row.name] = row.root
        else:
            self._view.selected.pop(row.name, None)
        self._draw_buttons()

    def _on_change(self) -> None:
        if self._syncing:
            return
        try:
            self._rewindow()
        except Exception as error:
            self._set_status(error_text(error), error=True)

    def _on_target(self, change: dict[str, Any]) -> None:
        self._on_change()

    def _on_sort(self, change: dict[str, Any]) -> None:
        self._view.page = 0
        self._on_change()

    def _on_filter(self, change: dict[str, Any]) -> None:
        self._view.page = 0
        self._on_change()

    def close(self) -> None:
        """Close every widget this table made, pooled rows and their Layout/Style models
        included (ipywidgets keeps each open widget alive until it is closed)."""
        close_widgets([*self._rows.owned(), *self._totals.owned()], self.children)
        self._closed = True
        self.layout.close()
        super().close()


__all__ = ["DeviceTable"]
