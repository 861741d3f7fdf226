"""The one-click fix under a diagnosis: "Move x to cuda:0 and re-run".

A thin ipywidgets layer over the controller: the move goes through
:meth:`torchdevice_magic.app.DeviceController.move` (all or nothing, undoable, the same planner
as every other move), then ``rerun(cell_id)`` asks the notebook to run the failing cell again
over the sidebar's comm. Without the labextension (VS Code,
classic Notebook, nbconvert) the button moves and says "moved: re-run the cell".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..app import DeviceController, WeakController

log = logging.getLogger("torchdevice_magic")


Rerun = Callable[[str | None], bool]


def fix_button(app: DeviceController, action: Any, cell_id: str | None, rerun: Rerun) -> Any:
    """The button (in a box with a status line), or None when the move engine would refuse the
    move or ipywidgets is missing: only a fix the planner accepts is offered."""
    if app.can_move(action.device, action.names) is not None:
        return None
    try:
        import ipywidgets as widgets
    except Exception:
        return None
    return FixButton(app, action, cell_id, rerun, widgets).box


class FixButton:
    def __init__(
        self, app: DeviceController, action: Any, cell_id: str | None, rerun: Rerun, widgets: Any
    ) -> None:
        #: held weakly: the button outlives %unload_ext in the notebook's output
        self._app = WeakController(app)
        self.rerun = rerun
        self.action = action
        self.cell_id = cell_id
        self.moved: Any = None
        self.button = widgets.Button(
            description=action.label,
            icon="magic",
            tooltip=f"Move {', '.join(action.names)} to {action.device} (undoable), then run "
            "this cell again",
            layout=widgets.Layout(width="auto"),
        )
        self.button.add_class("torchdevice-magic-fix")
        self.status = widgets.HTML("")
        self.status.add_class("torchdevice-magic-fix-status")
        self.button.on_click(self._clicked)
        self.box = widgets.HBox([self.button, self.status])

    @property
    def app(self) -> DeviceController:
        return self._app()

    def _clicked(self, _button: Any = None) -> None:
        try:
            if self.moved is None:
                self._move()
            else:
                self._undo()
        except Exception as error:  # never a traceback out of a button
            log.exception("torchdevice_magic: the fix button failed")
            self.status.value = _escape(f"failed: {type(error).__name__}: {error}")

    def _move(self) -> None:
        try:
            result = self.app.move(self.action.device, list(self.action.names))
        except ValueError as error:  # MoveError (a ValueError): refused before anything moved
            self.status.value = _escape(f"not moved: {error}")
            return
        if not result.ok:
            self.status.value = _escape(result.summary())
            return
        self.moved = result
        if self.rerun(self.cell_id):
            self.status.value = _escape(f"{result.summary()}; re-running the cell")
        else:
            self.status.value = _escape(f"moved: re-run the cell ({result.summary()})")
        if result.can_undo:
            self.button.description = "Undo the move"
            self.button.icon = "undo"
        else:
            self.button.disabled = True

    def _undo(self) -> None:
        stack = self.app.undo_stack
        if not stack or stack[-1] is not self.moved:
            self.status.value = "another move came after this one: undo that first"
            return
        result = self.app.undo()
        self.status.value = _escape(result.summary())
        if result.ok:
            self.button.disabled = True


def _escape(text: str) -> str:
    import html

    return html.escape(text)
