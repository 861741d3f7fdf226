"""The one-click fix under a diagnosis: "Move x to cuda:0 and re-run".

A thin ipywidgets layer over the controller: the move goes through
:meth:`torchdevice_magic.app.DeviceController.move` (all or nothing, undoable, the same planner
as every other move), then ``rerun(cell_id)`` asks the notebook to run the failing cell again
over the sidebar's comm. Without the labextension (VS Code,
classic Notebook, nbconvert) the button moves and says "moved: re-run the cell".

A move is a trial until the cell runs again (:class:`FixTrial`, widget-free, kept on the
controller): if that run fails with a device error again, the move is undone and the new
diagnosis says what was tried (:func:`settle_trial`); a run without error keeps it
(:func:`keep_trial`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
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
        if result.can_undo:
            self.app.pending_fix = FixTrial(self.action, result, self.cell_id)
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


@dataclass
class FixTrial:
    """A one-click move waiting for the cell's next run to say whether it fixed the error."""

    action: Any
    moved: Any
    cell_id: str | None


def keep_trial(app: DeviceController) -> None:
    """The cell ran without error after the move: the move stays, the trial is over."""
    app.pending_fix = None


def settle_trial(app: DeviceController, diagnosis: Any, cell_id: str | None) -> Any:
    """A device error again after a one-click move: undo that move (if nothing came after it)
    and return the diagnosis saying what was tried, with no button for the same move again.
    Without a pending trial (or for another cell) the diagnosis is returned as it is."""
    trial: FixTrial | None = app.pending_fix
    if trial is None or (trial.cell_id and cell_id and trial.cell_id != cell_id):
        return diagnosis
    app.pending_fix = None
    action = trial.action
    tried = f"Tried: moved {', '.join(action.names)} to {action.device} and ran the cell again"
    stack = app.undo_stack
    if stack and stack[-1] is trial.moved:
        undone = app.undo()
        outcome = (
            "it failed with a device error again, so the move was undone"
            if getattr(undone, "ok", False)
            else f"it failed again and undoing the move failed: {undone.summary()}"
        )
    else:
        outcome = "it failed with a device error again (later moves kept it: not undone)"
    again = diagnosis.action is not None and (
        tuple(diagnosis.action.names),
        diagnosis.action.device,
    ) == (tuple(action.names), action.device)
    return dataclasses.replace(
        diagnosis,
        note=f"{tried}: {outcome}. {diagnosis.note}".strip(),
        action=None if again else diagnosis.action,
    )


def _escape(text: str) -> str:
    import html

    return html.escape(text)
