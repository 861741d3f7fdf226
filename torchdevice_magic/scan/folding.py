"""Plain tensors made by later cells, folded into the columns (:mod:`.columns`).

A full scan reads the plain tensors of a namespace column-wise, and every view reads them so
(no record per tensor). A rescan (after each cell) looks only at the names the cell bound, one
by one, and keeps what it found as entries: a namespace grown cell by cell, as a notebook
grows, would keep nearly all of its tensors as entries, and everything that reads entries
(opening the sidebar, a window looked at again) would cost a record per tensor. So once the
entries grow by :data:`FOLD_ABOVE` plus a quarter of the namespace since the last fold, a rescan
folds them into new columns: O(namespace) a logarithmic number of times as a namespace grows.

Pure core: no IPython, no ipywidgets, never imports torch. Holds ids, device names, dtypes,
shapes, pointers and sizes: never a tensor.
"""

from __future__ import annotations

from itertools import compress
from operator import attrgetter, itemgetter
from typing import Any

from ..objects import TorchTypes
from .book import _new_serial, _State
from .columns import _NO_COLUMNS, _Columns
from .facts import _column_like

#: Entries a rescan keeps before folding the plain tensors among them into the columns (plus
#: a quarter of the namespace, so that a growing namespace is folded ever more rarely)
FOLD_ABOVE = 1024

_pointer = itemgetter(1)


def _fold_due(state: _State) -> bool:
    """Whether the entries grew past the last fold by ``FOLD_ABOVE`` plus a quarter of what
    the namespace then held (entries that cannot be folded, Parameters, tensors with
    gradients, count too: a namespace of those is looked through ever more rarely)."""
    columns = len(state.columns) if state.columns is not None else 0
    return len(state.entries) > state.settled + FOLD_ABOVE + (columns + state.settled) // 4


def _fold(T: TorchTypes, state: _State) -> _State:
    """``state`` with its plain tensors kept as entries moved into new columns (with the live
    ones of the old columns). The same facts: only where they are kept changes, so the next
    views and the memory timeline take it as a full scan (new columns)."""
    entries = state.entries
    names = [name for name, entry in entries.items() if _column_like(T, entry)]
    columns = state.columns or _NO_COLUMNS
    dropped = state.dropped
    live = [name not in dropped for name in columns.names] if dropped else None

    def kept(column: list[Any]) -> list[Any]:
        return list(compress(column, live)) if live is not None else list(column)

    facts = list(map(entries.__getitem__, names))
    folded = _Columns(
        kept(columns.names) + names,
        kept(columns.ids) + list(map(attrgetter("id"), facts)),
        kept(columns.devices) + list(map(attrgetter("device"), facts)),
        kept(columns.dtypes) + list(map(attrgetter("dtype"), facts)),
        kept(columns.shapes) + list(map(attrgetter("shape"), facts)),
        kept(columns.pointers) + list(map(_pointer, map(attrgetter("key"), facts))),
        kept(columns.sizes) + list(map(attrgetter("nbytes"), facts)),
    )
    moved = set(names)
    left = {name: entry for name, entry in entries.items() if name not in moved}
    return state._replace(
        entries=left,
        columns=folded,
        dropped=frozenset(),
        serial=_new_serial(),
        parent=-1,
        touched=None,
        settled=len(left),
    )
