"""When a holder counts as a leak, and the line that says so.

A holder the timeline follows (an autograd graph kept by a name, a hook's closure) *grew* when
it still keeps every storage it kept at its last measurement and more: a list that gained
losses, a hidden state whose graph now reaches back through one more run. Bytes that only
became its own because a name stopped holding them (``inputs`` rebound while the graph saved
it) are no growth; nor is the first sighting of a holder the cell itself made. It *leaks* when
it grew over runs of the same cell (cells are known by the names they mention, so two cells
with the same code are one): only then does the warning say "more after every run".

Pure core: no IPython, no ipywidgets, torch never imported here.
"""

from __future__ import annotations

from ..units import format_bytes
from .base import StorageKey, _Source

#: the kinds of holders that can leak across runs (a traceback or an Out entry is replaced)
LEAKING_KINDS = frozenset({"autograd graph", "hook"})


class TrackedHolder:
    """A holder the timeline follows between cells.

    ``storages``: every storage it kept at its last measurement (named ones included).
    ``last_bytes``: its bytes per device with the named storages subtracted (what the timeline
    adds to the total). ``growers``: the cells that grew it, one per measurement in a row that
    grew it (a measurement that did not clears it)."""

    __slots__ = ("source", "storages", "last_bytes", "growers", "warned")

    def __init__(self, source: _Source) -> None:
        self.source = source
        self.storages: frozenset[StorageKey] = frozenset()
        self.last_bytes: dict[str, int] = {}
        self.growers: list[frozenset[str]] = []
        self.warned = False

    def measured(self, source: _Source, cell: frozenset[str], first_grows: bool) -> bool:
        """Take a new measurement made after ``cell`` ran; True when the holder grew.
        ``first_grows``: a first measurement counts as growth (the holder was there before the
        cell, holding nothing this one follows, and the cell added to it)."""
        storages = frozenset(source.keys)
        # kept all it kept, and more (a first measurement: see first_grows)
        grew = self.storages < storages if self.storages else first_grows and bool(storages)
        self.source, self.storages = source, storages
        if grew:
            self.growers.append(cell)
        else:
            self.growers.clear()
            self.warned = False
        return grew

    def moved(self, source: _Source) -> None:
        """Take a measurement made after a move or undo: the storages it keeps now (a moved
        tensor's are new ones), its growth over earlier cells kept as it was."""
        self.source, self.storages = source, frozenset(source.keys)

    def leaking(self) -> bool:
        """It grew in this measurement and earlier ones in a row, and a cell that grew it now
        had grown it before: the same code, run again, added to it again."""
        return (
            self.source.kind in LEAKING_KINDS
            and len(self.growers) >= 2
            and self.growers[-1] in self.growers[:-1]
        )

    def warnings(self) -> list[str]:
        """The warning lines, once per run of growth."""
        if self.warned or not self.leaking():
            return []
        self.warned = True
        source = self.source
        if source.kind == "autograd graph":
            what = f"{source.count} autograd graph{'s' if source.count != 1 else ''}"
        else:
            what = f"{source.count} tensors"
        holder = source.where.partition(":")[0].replace(" (autograd graph)", "")
        return [
            f"{holder} keeps {what} alive, {format_bytes(nbytes)} on {device}, "
            f"more after every run: {source.fix}"
            for device, nbytes in sorted(self.last_bytes.items())
        ]
