"""Closure cells that only finished calls still reach.

``frame.clear()`` drops a finished frame's locals, but not the function object the frame ran:
a closure that function closes over keeps its cells. ``Module._call_impl`` (whenever a module or
a global hook is registered) runs ``inner()``, a closure over the call's ``args``: after a
device error, the traceback IPython keeps for ``%debug`` holds the batch through that cell even
once every frame's locals are cleared. A cell is emptied only when nothing but the traceback's
own frames reaches it, directly or through the closures of functions only those frames run, so
a closure that lives on (a decorator's, a callback's) is never touched.
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterable


def frame_cells(frames: Iterable[types.FrameType]) -> list[types.CellType]:
    """The closure cells the frames hold (read before the frames are cleared)."""
    cells: dict[int, types.CellType] = {}
    for frame in frames:
        for referent in gc.get_referents(frame):
            if isinstance(referent, types.CellType):
                cells[id(referent)] = referent
    return list(cells.values())


def empty_dead_cells(cells: list[types.CellType], frame_ids: set[int]) -> int:
    """Empty each cell that only ``frame_ids``' frames (already cleared) still reach; returns
    how many were emptied."""
    emptied = 0
    for cell in cells:
        if _reached_only_by(cell, frame_ids, {id(cells)}):
            try:
                del cell.cell_contents
            except ValueError:  # already empty
                continue
            emptied += 1
    return emptied


def _reached_only_by(cell: types.CellType, frame_ids: set[int], own: set[int]) -> bool:
    # the collector sees only references from objects it tracks: a function a C++ registry
    # keeps (a torch.library kernel, a dispatcher hook) looks held by its frame alone. So every
    # object on the way must have no reference beyond those the collector found (and this
    # function's own: its argument, its variable, getrefcount's argument).
    holders = gc.get_referrers(cell)
    if sys.getrefcount(cell) > len(holders) + _OWN_CELL_REFERENCES:
        return False
    own = own | {id(holders)}
    for holder in holders:
        if id(holder) in own or id(holder) in frame_ids:
            continue
        if type(holder) is not tuple:
            return False
        functions = gc.get_referrers(holder)
        if sys.getrefcount(holder) > len(functions) + _OWN_REFERENCES:
            return False
        for function in functions:
            if function is holders:
                continue
            if not isinstance(function, types.FunctionType) or function.__closure__ is not holder:
                return False
            users = gc.get_referrers(function)
            if sys.getrefcount(function) > len(users) + _OWN_REFERENCES:
                return False
            if any(id(user) not in frame_ids and user is not functions for user in users):
                return False
    return True


#: getrefcount's argument and the loop variable
_OWN_REFERENCES = 2
#: the caller's loop variable, this function's argument, getrefcount's argument
_OWN_CELL_REFERENCES = 3
