"""The scan's incremental bookkeeping (:mod:`.scanner`): :class:`_State`, what the next
incremental scan compares against (names, ids, entries, columns), and :class:`_Book`, what an
inventory computed over the whole namespace (storages counted once, how many names reach each,
per-device sums, records with sharing), handed from one inventory to the next and updated by
the names a cell changed: O(what changed), not O(namespace).

Pure core: no IPython, no ipywidgets, never imports torch. Holds no user object: records,
storage keys, sizes and the scan's state.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress, count
from operator import is_not, not_
from typing import TYPE_CHECKING, Any, NamedTuple

from ..objects import StorageKey, TorchTypes
from ..records import Record
from .columns import _Columns
from .entries import _Entry
from .facts import _facts_record, _facts_storages, _first, _second, _TensorFacts

if TYPE_CHECKING:
    from .inventory import Inventory


# --------------------------------------------------------------------------------------------
# Incremental bookkeeping of the result


class _State(NamedTuple):
    """What the next incremental scan compares against (never changed once built)."""

    keys: list[str]
    ids: list[int]
    #: name -> _Entry or _TensorFacts, for every name not (or no longer) in ``columns``
    entries: dict[str, Any]
    volatile: frozenset[str]
    #: composites whose structure is compared on each rescan (recheck=True)
    watched: frozenset[str]
    #: the plain tensors of the last full scan, and those of their names rebound since
    columns: _Columns | None = None
    dropped: frozenset[str] = frozenset()
    #: this state's number (0: none), its parent's (the state the rescan that made it
    #: started from; -1 after a full scan), and the names whose entries or columns differ
    #: from the parent's (None: not known). With them, what changed from one cell to the next
    #: costs what changed: a namespace grown cell by cell keeps most of its tensors as
    #: entries, and comparing every entry after every cell would cost the whole namespace.
    serial: int = 0
    parent: int = -1
    touched: tuple[str, ...] | None = None
    #: names whose entry lists a record that spans devices (a module, an optimizer, a
    #: container): the mixed-device warnings read these, not every entry
    mixed: frozenset[str] = frozenset()
    #: entries kept after the last full scan or fold (:mod:`.folding` folds again past it)
    settled: int = 0
    #: how many leading keys are the parent's, in the same order (the rescan compared them):
    #: the book then need not compare the whole namespace's names again
    kept: int = 0
    #: name -> its place in ``keys`` (None: not made yet). Shared with the states after
    #: this one while names are only added at the end (each adds its new names), so only a
    #: hint: a rescan checks what it finds with it (:func:`.scanner._rebound`)
    positions: dict[str, int] | None = None


#: numbers for states (:attr:`_State.serial`), never reused in a process
_serials = count(1)


def _new_serial() -> int:
    return next(_serials)


def _changed_names(old: _State, new: _State) -> list[str]:
    """The top-level names whose entries may differ between two states of one namespace
    (sharing the same columns), and the plain tensors dropped from the columns in between:
    the rescan's own account when ``new`` was made from ``old``, else every entry compared
    (identity, in C)."""
    if new.touched is not None and old.serial and new.parent == old.serial:
        return list(new.touched)
    before, after = old.entries, new.entries
    names = list(after)
    changed = list(compress(names, map(is_not, map(before.get, names), after.values())))
    changed.extend(before.keys() - after.keys())
    changed.extend(new.dropped - old.dropped)
    return list(dict.fromkeys(changed))


def _names_left(old: list[str], new: list[str]) -> tuple[list[bool], list[str]] | None:
    """After `del x`: which of the ``old`` names are still bound (a mask) and those names,
    when they keep their order at the start of ``new`` (new names come at the end); None when
    the names were reordered. Found in C (a set, ``map``, ``compress``)."""
    staying = list(map(set(new).__contains__, old))
    kept = list(compress(old, staying))
    return (staying, kept) if new[: len(kept)] == kept else None


def _name_parts(
    T: TorchTypes,
    state: _State,
    name: str,
    cache: dict[str, tuple[Any, list[Record]]],
    keep: bool = True,
) -> tuple[list[Record], Mapping[StorageKey, tuple[str, int]]]:
    """One top-level name's records (unshared) and storages in ``state``; a record built for
    a plain tensor's facts is found in ``cache`` (built by the cell before, usually) or put
    there (``keep=False``: an earlier state's, only counted, never kept)."""
    entry = state.entries.get(name)
    if entry is None:
        columns = state.columns
        if columns is None or name in state.dropped:
            return [], {}
        index = columns.position().get(name)
        if index is None:
            return [], {}
        return [columns.record(T, index)], {
            columns.key(index): (columns.devices[index], columns.sizes[index])
        }
    if type(entry) is _TensorFacts:
        cached = cache.get(name)
        if cached is None or cached[0] is not entry:
            cached = (entry, [_facts_record(T, name, entry)])
            if keep:
                cache[name] = cached
        return cached[1], _facts_storages(entry)
    return entry.records, entry.storages


class _Book:
    """What an inventory computed over the whole namespace (storages counted once, how many
    names reach each, per-device sums, and the records with sharing once a view asked for
    them), kept so that the next inventory of the same namespace (a rescan after a cell)
    updates it by the names that changed instead of rebuilding it: O(what changed), not
    O(namespace). One inventory owns it at a time; :meth:`Inventory._give_book` hands it on.
    Holds no user object (records, storage keys, sizes and the scan's state).

    ``history`` says, for each of the last :data:`BOOK_HISTORY` updates, which top-level
    names changed and their records before and after: a view that saw an earlier inventory
    of this namespace asks :meth:`Inventory.view_changes` for exactly what changed since."""

    __slots__ = ("state", "records", "start", "counts", "storages", "devices", "history")

    def __init__(
        self,
        state: _State,
        records: list[Record] | None,
        start: dict[str, int],
        counts: dict[StorageKey, int],
        storages: dict[StorageKey, tuple[str, int]],
        devices: dict[str, list[int]],
    ) -> None:
        self.state = state  # the scan state these figures are of
        # Inventory.records (never changed in place: copied to update); None until a view
        # needs every record (the sidebar's windows do not)
        self.records = records
        self.start = start  # top-level name -> index of its first record
        self.counts = counts  # storage key -> how many names reach it (>1: shared)
        self.storages = storages  # Inventory.storages()
        self.devices = devices  # device -> [storages, bytes they hold (would need)]
        # states by their serial numbers, not the states: a state holds a list of every name
        # and one of every id, and a namespace's worth of those per remembered update would
        # stay alive with the book
        self.history: list[tuple[int, dict[str, tuple[list[Record], list[Record]]]]] = [
            (state.serial, {})
        ]

    @classmethod
    def build(cls, inventory: Inventory) -> _Book | None:
        """From an inventory's whole namespace (None where an update could not keep the
        figures exact: hidden rows, storages of names without records). The records go in
        too when the inventory has built them."""
        if inventory._hidden or inventory._torch is None:
            return None
        for entry in inventory._entries.values():
            if type(entry) is _Entry and not entry.records and entry.storages:
                return None
        counts = inventory._storage_counter()
        storages = inventory._unique_storages()
        values = storages.values()
        device_names = set(map(_first, values))
        devices: dict[str, list[int]] = {}
        if len(device_names) == 1:
            devices[device_names.pop()] = [len(values), sum(map(_second, values))]
        else:
            for device, nbytes in values:
                figures = devices.setdefault(device, [0, 0])
                figures[0] += 1
                figures[1] += nbytes
        book = cls(inventory._state, None, {}, counts, storages, devices)
        if inventory._records is not None:
            book.keep_records(inventory)
        return book

    def keep_records(self, inventory: Inventory) -> None:
        """Take the records ``inventory`` (of this book's state) just built in full."""
        records = inventory._records
        names = inventory._names
        if records is None:
            return
        if len(records) == len(names):  # one record per name (the usual namespace): in C
            start = dict(zip(names, range(len(names))))  # noqa: B905
        else:
            start = {}
            offset = 0
            for name, (_, entry_records) in zip(names, inventory._built or (), strict=True):
                start[name] = offset
                offset += len(entry_records)
        self.records, self.start = records, start

    def update(self, inventory: Inventory) -> bool:
        """Bring the figures to ``inventory``'s state; False (nothing changed) where only a
        full build gives the exact answer: names reordered, or a storage shared (before or
        after) by a name that changed. Where names were deleted or a name's number of records
        changed, the records (if kept) are built again when next asked."""
        old, new = self.state, inventory._state
        T = inventory._torch
        if T is None or inventory._hidden or new.columns is not old.columns:
            return False
        old_keys, new_keys = old.keys, new.keys
        known = len(old_keys)
        removed: list[str] = []
        if new_keys is old_keys or (old.serial and new.parent == old.serial and new.kept == known):
            appended: list[str] = new_keys[known:]
        elif new_keys == old_keys:
            appended = []
        elif len(new_keys) > known and new_keys[:known] == old_keys:
            appended = new_keys[known:]
        else:
            left = _names_left(old_keys, new_keys)
            if left is None:
                return False
            staying, kept_keys = left
            removed = list(compress(old_keys, map(not_, staying)))
            appended = new_keys[len(kept_keys) :]
        if not old.dropped <= new.dropped:
            return False
        skip = set(appended).union(removed)
        fresh = set(appended)
        changed = [name for name in _changed_names(old, new) if name not in skip]
        cache = inventory._record_cache
        parts = []
        delta: dict[StorageKey, int] = {}
        reshaped = bool(removed)  # records no longer at their places: build them again
        for name in changed:
            old_records, old_storages = _name_parts(T, old, name, cache, keep=False)
            new_records, new_storages = _name_parts(T, new, name, cache)
            if new_storages and not new_records:
                return False
            reshaped = reshaped or len(old_records) != len(new_records)
            parts.append((name, old_records, new_records, old_storages, new_storages))
        for name in appended:
            new_records, new_storages = _name_parts(T, new, name, cache)
            if new_storages and not new_records:
                return False
            parts.append((name, [], new_records, {}, new_storages))
        for name in removed:
            old_records, old_storages = _name_parts(T, old, name, cache, keep=False)
            parts.append((name, old_records, [], old_storages, {}))
        for _, _, _, old_storages, new_storages in parts:
            for key in old_storages:
                delta[key] = delta.get(key, 0) - 1
            for key in new_storages:
                delta[key] = delta.get(key, 0) + 1
        counts = self.counts
        for key, change in delta.items():
            count = counts.get(key, 0)
            if count > 1 or count + change > 1:
                return False  # sharing with a name that did not change: a full build
        # apply: records first (same counts: replaced in place of a copy), then storages
        if reshaped:  # records at shifted places: built again when next asked
            self.records, self.start = None, {}
        if self.records is not None:
            records = list(self.records)
            start = self.start
            for name, _, new_records, _, _ in parts:
                if name in fresh:
                    if new_records:
                        start[name] = len(records)
                        records.extend(new_records)
                elif new_records:
                    first = start[name]
                    records[first : first + len(new_records)] = new_records
            self.records = records
        storages, devices = self.storages, self.devices
        for _, _, _, old_storages, _ in parts:
            for key in old_storages:
                count = counts[key] - 1
                if count:
                    counts[key] = count
                    continue
                del counts[key]
                device, nbytes = storages.pop(key)
                figures = devices[device]
                figures[0] -= 1
                figures[1] -= nbytes
                if not figures[0]:
                    del devices[device]
        for _, _, _, _, new_storages in parts:
            for key, (device, nbytes) in new_storages.items():
                count = counts.get(key, 0)
                counts[key] = count + 1
                if not count:
                    storages[key] = (device, nbytes)
                    figures = devices.setdefault(device, [0, 0])
                    figures[0] += 1
                    figures[1] += nbytes
        self.state = new
        self.history.append((new.serial, {name: (was, now) for name, was, now, _, _ in parts}))
        if len(self.history) > BOOK_HISTORY:
            del self.history[0]
        return True

    def changes_since(self, state: _State) -> dict[str, tuple[list[Record], list[Record]]] | None:
        """{top-level name: (records in ``state``, records now)} for every name that changed
        since ``state`` (unshared records: a change that touched sharing broke the chain), or
        None when ``state`` is not one this book went through lately."""
        history = self.history
        serial = state.serial
        if not serial:  # not made by a scan: in no lineage
            return None
        for index in range(len(history) - 1, -1, -1):
            if history[index][0] == serial:
                break
        else:
            return None
        merged: dict[str, tuple[list[Record], list[Record]]] = {}
        for _, changes in history[index + 1 :]:
            for name, (was, now) in changes.items():
                first = merged.get(name)
                merged[name] = (first[0] if first is not None else was, now)
        return merged


#: Updates a book remembers the changes of (a view that missed more starts again from the whole)
BOOK_HISTORY = 32
