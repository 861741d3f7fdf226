"""What one scan found, and the reads over it that need no bookkeeping: :class:`_Contents`,
the base of :class:`.inventory.Inventory` (which adds the incremental bookkeeping of
:mod:`.book`, the totals and the exports). The views' column reads live here: the plain
tensors' columns without the names rebound since, one name's records or storages in O(1),
the names that hold something, what changed since an earlier inventory, and the modules' and
optimizers' own reads.

Pure core: no IPython, no ipywidgets, never imports torch. Holds numbers and strings, ids, the
shapes of walked containers (keys, never values), and weak references to modules and
optimizers (never to Parameters): never a user's tensor.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from itertools import chain, compress, filterfalse
from typing import Any

from ..objects import Kind, StorageKey, Storages, TorchTypes
from ..records import ColumnRows, Record
from .book import _changed_names, _State
from .columns import _NO_COLUMNS, _Columns
from .entries import _Entry, _entry_storages
from .facts import _column_like, _facts_record, _TensorFacts
from .sharing import _count_storages, _lists_something, _sharers


class _Contents:
    """The entries, columns and hidden rows of one scan, and what is read from them alone.
    Never changed once built: what it computes on demand is cached."""

    def __init__(
        self,
        entries: dict[str, Any],
        keys: list[str],
        ids: list[int],
        volatile: set[str] | frozenset[str],
        *,
        torch_imported: bool,
        include_hidden: bool = False,
        hidden: dict[str, _Entry] | None = None,
        torch: TorchTypes | None = None,
        record_cache: dict[str, tuple[Any, list[Record]]] | None = None,
        watched: set[str] | frozenset[str] = frozenset(),
        columns: _Columns | None = None,
        dropped: frozenset[str] = frozenset(),
    ) -> None:
        self._torch = torch
        # what the next incremental scan compares against
        self._state = _State(
            keys, ids, entries, frozenset(volatile), frozenset(watched), columns, dropped
        )
        self._entries = entries
        self._volatile = self._state.volatile
        # name -> (entry, records): records of entries the next scan reuses are reused too
        self._record_cache: dict[str, tuple[Any, list[Record]]] = record_cache or {}
        self._hidden = hidden or {}
        self.torch_imported = torch_imported
        self.include_hidden = include_hidden
        self._records: list[Record] | None = None
        self._built: list[tuple[Any, list[Record]]] | None = None
        self._totals: dict[str, int] | None = None
        self._storages: Storages | None = None
        self._owned_keys: set[StorageKey] | None = None
        self._names: list[str] = []  # top-level name of each pair of _records_by_entry
        self._share_counts: dict[StorageKey, int] | None = None
        # sharing: keys reached by more than one name, and who shares with whom (by record)
        self._shared_keys: frozenset[StorageKey] | None = None
        self._sharing: dict[str, tuple[str, ...]] | None = None
        self._shared_records: dict[str, Record] = {}
        self._live: tuple[_Columns, list[int] | None] | None = None
        self._column_like: dict[str, _TensorFacts] | None = None
        #: False when a rescan found every module and optimizer as it was before
        self.objects_changed = True

    # -- the plain tensors' columns ------------------------------------------------------------
    def _live_columns(self) -> tuple[_Columns, list[int] | None]:
        """The columns and the indexes still meant (None: all of them); kept."""
        if self._live is None:
            columns = self._state.columns
            dropped = self._state.dropped
            if columns is None or not len(columns):
                self._live = (_NO_COLUMNS, None)
            elif not dropped:
                self._live = (columns, None)
            else:
                position = columns.position()
                gone = {position[name] for name in dropped if name in position}
                self._live = (columns, list(filterfalse(gone.__contains__, range(len(columns)))))
        return self._live

    def _live_values(self, column: list[Any]) -> list[Any]:
        """One column (``columns.names``, ``.sizes``...) without the names rebound since the
        full scan (read-only: the column itself when none was)."""
        live = self._live_columns()[1]
        return column if live is None else list(map(column.__getitem__, live))

    def _column_keys(self) -> list[StorageKey]:
        """The live columns' storage keys (read-only)."""
        return self._live_values(self._live_columns()[0].keys())

    def _column_of(self, name: str) -> int | None:
        columns = self._state.columns
        if columns is None or not len(columns) or name in self._state.dropped:
            return None
        return columns.position().get(name)

    # -- what a view reads instead of every record ----------------------------------------------
    def view_columns(self) -> ColumnRows:
        """The plain tensors as columns (:class:`ColumnRows`), no records built: a view sorts,
        filters and counts them column-wise and asks :meth:`records_of` only for the rows it
        shows. Everything else is in :meth:`other_records`. Starts the incremental
        bookkeeping (:class:`.inventory.Inventory`), so that its ``view_changes`` can answer after
        the next cell."""
        columns = self._live_columns()[0]
        names, devices = self._live_values(columns.names), self._live_values(columns.devices)
        sizes, pointers = self._live_values(columns.sizes), self._live_values(columns.pointers)
        plain = self._column_like_entries()
        if plain:  # tensors cells made since the last fold: rows like the columns' own
            names, devices = names + list(plain), devices + [f.device for f in plain.values()]
            sizes = sizes + [facts.nbytes for facts in plain.values()]
            pointers = pointers + [facts.key[1] for facts in plain.values()]
        shared_keys = self._shared_storage_keys()
        shared: frozenset[str] = frozenset()
        if shared_keys and names:
            keys = zip(devices, pointers)  # noqa: B905 - same lengths
            shared = frozenset(compress(names, map(shared_keys.__contains__, keys)))
        return ColumnRows(names, devices, sizes, shared)

    def _column_like_entries(self) -> dict[str, _TensorFacts]:
        """The entries a fold would move into the columns (plain tensors bound by cells since
        the last fold): a view reads them as columns too, without a record each."""
        T = self._torch
        if T is None:
            return {}
        if self._column_like is None:
            entries = self._entries
            self._column_like = {name: e for name, e in entries.items() if _column_like(T, e)}
        return self._column_like

    def other_records(self) -> list[Record]:
        """The records of every name not in :meth:`view_columns` (modules, optimizers,
        containers, tensors with gradients..., and hidden ones), sharing included: with the
        columns, exactly :attr:`records`."""
        if self._torch is None:
            return []
        plain = self._column_like_entries()
        found: list[Record] = []
        for name in self._entries:
            if name not in plain:
                found += self.records_of(name)
        for label in self._hidden:
            found += self.records_of(label)
        return found

    def records_of(self, name: str) -> list[Record]:
        """The records of one top-level name (or hidden ``Out[...]`` label), as in
        :attr:`records` (sharing included), without building the others: O(1) in the size of
        the namespace. ``[]`` for a name that lists nothing."""
        T = self._torch
        if T is None:
            return []
        entry = self._entries.get(name)
        keys: Iterable[StorageKey]
        if entry is not None:
            if type(entry) is _TensorFacts:
                cached = self._record_cache.get(name)
                if cached is None or cached[0] is not entry:
                    cached = self._record_cache[name] = (entry, [_facts_record(T, name, entry)])
                records = cached[1]
            else:
                records = entry.records
            keys = _entry_storages(entry)
        elif (index := self._column_of(name)) is not None:
            columns = self._state.columns or _NO_COLUMNS
            records, keys = [columns.record(T, index)], (columns.key(index),)
        elif (hidden := self._hidden.get(name)) is not None:
            records, keys = hidden.records, hidden.storages
        else:
            return []
        if not records:
            return []
        counts = self._storage_counter()
        if all(counts.get(key, 0) < 2 for key in keys):
            return list(records)
        sharing = self._sharers()
        shared = self._shared_records
        found = []
        for record in records:
            others = sharing.get(record.name)
            if others:
                kept = shared.get(record.name)
                if kept is None or kept.shares_with != others:
                    kept = shared[record.name] = dataclasses.replace(record, shares_with=others)
                record = kept
            found.append(record)
        return found

    def _records_by_entry(self) -> list[tuple[Any, list[Record]]]:
        """(entry, its records) in the namespace's order, then hidden entries; tensor records
        are built here (an entry that is an int is an index into the columns)."""
        if self._built is None:
            T = self._torch
            if T is None:  # torch not imported: nothing to list
                self._built = []
                return self._built
            self._built, self._names, self._record_cache = _records_in_order(
                T, self._state, self._hidden, self._record_cache
            )
        return self._built

    def names(self) -> list[str]:
        """The top-level names that hold something this inventory lists (not hidden ones), in
        the namespace's order (sets and ``compress``: C-level over a big namespace)."""
        entries = self._entries
        listed = {n for n, e in entries.items() if _lists_something(e)}
        columns = self._state.columns
        if columns is not None and len(columns):
            listed.update(set(columns.names) - self._state.dropped - entries.keys())
        keys = self._state.keys
        return list(compress(keys, map(listed.__contains__, keys)))

    def named_storages(self) -> tuple[Storages, dict[StorageKey, int]]:
        """What the listed names hold: ``({storage key: (device, nbytes)}, {storage key: how
        many names reach it})`` -- :meth:`storages_of` over :meth:`names`, each storage once,
        with the plain tensors' columns taken whole (the memory timeline's first count)."""
        columns = self._live_columns()[0]
        keys = self._column_keys()
        sizes = zip(self._live_values(columns.devices), self._live_values(columns.sizes))  # noqa: B905
        named: Storages = dict(zip(keys, sizes))  # noqa: B905 - same lengths
        counts = Counter(keys)
        for entry in self._entries.values():
            if _lists_something(entry):
                storages = _entry_storages(entry)
                named.update(storages)
                counts.update(storages.keys())
        return named, dict(counts)

    def storages_of(self, name: str) -> Storages:
        """The storages one top-level name (or hidden ``Out[...]`` label) reaches, like
        :meth:`storages` for that name alone; ``{}`` when it holds none. O(1) in the size of
        the namespace (per-cell memory accounting asks this for the names a cell touched)."""
        entry = self._entries.get(name)
        if entry is not None:
            return dict(_entry_storages(entry))
        index = self._column_of(name)
        if index is not None:
            columns = self._state.columns or _NO_COLUMNS
            return {columns.key(index): (columns.devices[index], columns.sizes[index])}
        hidden = self._hidden.get(name)
        return dict(_entry_storages(hidden)) if hidden is not None else {}

    def changed_since(self, previous: _Contents) -> list[str]:
        """Top-level names whose facts may differ from ``previous``'s: entries that are not the
        very ones it had (looked at again, rebound, new, gone) and plain tensors dropped from
        the shared columns since. Identity comparisons in C: an incremental consumer (the
        per-cell memory timeline) then updates only these instead of every storage."""
        if self._state.columns is not previous._state.columns:  # a full scan in between
            return list(dict.fromkeys(chain(previous.names(), self.names())))
        return _changed_names(previous._state, self._state)

    # -- sharing and storages -------------------------------------------------------------------
    def _storage_counter(self) -> dict[StorageKey, int]:
        """Storage key -> how many listed names reach it, counted over every storage key at
        once (C-level)."""
        if self._share_counts is None:
            entries = chain(self._entries.values(), self._hidden.values())
            self._share_counts = _count_storages(self._column_keys(), entries)
        return self._share_counts

    def _shared_storage_keys(self) -> frozenset[StorageKey]:
        if self._shared_keys is None:
            counts = self._storage_counter()
            self._shared_keys = frozenset(key for key, count in counts.items() if count > 1)
        return self._shared_keys

    def _sharers(self) -> dict[str, tuple[str, ...]]:
        """{record name: the other records' names it shares a storage with} (sorted), for the
        records that share one; looks only at the storages reached more than once."""
        if self._sharing is None:
            shared_keys = self._shared_storage_keys()
            T = self._torch
            if not shared_keys or T is None:
                self._sharing = {}
            else:
                columns, live = self._live_columns()
                labelled = chain(self._entries.items(), self._hidden.items())
                self._sharing = _sharers(T, shared_keys, columns, live, labelled)
        return self._sharing

    def _own_storages(self) -> Storages:
        """Every storage the listed objects reach, once, merged from the columns and entries."""
        columns, live = self._live_columns()
        return _merge_storages(columns, live, self._entries.values())

    # -- modules and optimizers -----------------------------------------------------------------
    def held_by_modules(self, name: str) -> bool:
        """Whether this name's tensor shares a storage with a module or optimizer here (a
        buffer or parameter under another name: changing it in place changes the module)."""
        entry = self._entries.get(name)
        if entry is not None:
            keys: Iterable[StorageKey] = _entry_storages(entry).keys()
        else:
            index = self._column_of(name)
            if index is None:
                return False
            keys = ((self._state.columns or _NO_COLUMNS).key(index),)
        return not self._module_keys().isdisjoint(keys)

    def _module_keys(self) -> set[StorageKey]:
        if self._owned_keys is None:
            owned: set[StorageKey] = set()
            for name in self._volatile:
                entry = self._entries.get(name)
                if entry is not None and type(entry) is not _TensorFacts:
                    owned.update(entry.storages)
            self._owned_keys = owned
        return self._owned_keys

    def mixed_records(self) -> list[Record]:
        """Modules spanning devices and optimizers whose state sits away from its parameters.
        Cheap: only modules and optimizers (always among the volatile names) are looked at."""
        entries = self._entries
        mixed: list[Record] = []
        for name in self._volatile:
            entry = entries.get(name)
            if entry is not None and type(entry) is not _TensorFacts:
                mixed.extend(record for record in entry.records if record.mixed)
        return mixed

    def meta_module_records(self) -> list[Record]:
        """Modules holding meta tensors. Cheap, like :meth:`mixed_records`: only modules and
        optimizers (always among the volatile names) are looked at."""
        entries = self._entries
        found: list[Record] = []
        for name in self._volatile:
            entry = entries.get(name)
            if entry is not None and type(entry) is not _TensorFacts:
                found.extend(
                    record
                    for record in entry.records
                    if record.kind == "module" and "meta" in record.devices
                )
        return found

    def orphaned_optimizers(self) -> list[tuple[str, int, int]]:
        """(name, unreachable, total) for optimizers that update parameters no name here
        reaches: a model rebuilt (its cell re-run) after the optimizer was made, or moved to
        meta (which makes new Parameters). ``opt.step()`` then trains tensors nobody sees."""
        entries = self._entries
        optimizers = [
            (name, entry)
            for name in self._volatile
            if type(entry := entries.get(name)) is _Entry
            and entry.kind == Kind.OPTIMIZER
            and entry.tensor_ids
        ]
        if not optimizers:
            return []
        reachable: set[int] = set(self._live_values(self._live_columns()[0].ids))
        for entry in entries.values():
            if type(entry) is _TensorFacts:
                reachable.add(entry.id)
            elif entry.kind != Kind.OPTIMIZER:
                reachable.update(entry.tensor_ids)
        orphaned = []
        for name, entry in optimizers:
            unreachable = sum(1 for i in entry.tensor_ids if i not in reachable)
            if unreachable:
                orphaned.append((name, unreachable, len(entry.tensor_ids)))
        return orphaned


def _records_in_order(
    T: TorchTypes,
    state: _State,
    hidden: dict[str, _Entry],
    cache: dict[str, tuple[Any, list[Record]]],
) -> tuple[list[tuple[Any, list[Record]]], list[str], dict[str, tuple[Any, list[Record]]]]:
    """(entry, its records) per listed name in the namespace's order, then the hidden
    entries; the names of these pairs; and the tensor records kept for the next inventory
    (``cache`` reused where an entry is the very one it had)."""
    built: list[tuple[Any, list[Record]]] = []
    names: list[str] = []
    fresh_cache: dict[str, tuple[Any, list[Record]]] = {}
    entries = state.entries
    columns = state.columns or _NO_COLUMNS
    position = columns.position() if len(columns) else {}
    column_records = columns.all_records(T) if len(columns) else []
    dropped = state.dropped
    for name in state.keys:
        entry = entries.get(name)
        if entry is None:
            index = position.get(name)
            if index is not None and name not in dropped:
                built.append((index, [column_records[index]]))  # type: ignore[list-item]
                names.append(name)
            continue
        if type(entry) is _TensorFacts:
            cached = cache.get(name)
            if cached is not None and cached[0] is entry:
                pair = cached
            else:
                pair = (entry, [_facts_record(T, name, entry)])
            fresh_cache[name] = pair
        elif not entry.records:
            continue
        else:
            pair = (entry, entry.records)
        built.append(pair)
        names.append(name)
    built += [(entry, entry.records) for entry in hidden.values()]
    names += list(hidden)
    return built, names, fresh_cache


def _merge_storages(columns: _Columns, live: list[int] | None, entries: Iterable[Any]) -> Storages:
    """{storage key: (device, nbytes)} of the live columns and the entries, each once."""
    sizes = zip(columns.devices, columns.sizes)  # noqa: B905 - same lengths
    if live is None:
        merged = dict(zip(columns.keys(), sizes))  # noqa: B905
    else:
        pairs = list(zip(columns.keys(), sizes))  # noqa: B905
        merged = dict(pairs[i] for i in live)
    entries = list(entries)
    facts = [e for e in entries if type(e) is _TensorFacts]
    merged.update([(f.key, (f.device, f.nbytes)) for f in facts])
    merged.update([(f.grad.key, (f.grad.device, f.grad.nbytes)) for f in facts if f.grad])
    for entry in entries:
        if type(entry) is not _TensorFacts:
            merged.update(entry.storages)
    return merged
