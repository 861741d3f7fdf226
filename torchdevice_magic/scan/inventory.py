"""The result of a scan: :class:`Inventory`, immutable (records, per-device totals, storages,
the plain tensors' columns for views, what changed since an earlier inventory, renderings), and
:func:`orphan_warning`. :class:`.scanner.Scanner` builds inventories; import both from
:mod:`.scanner` (this module is where the class lives, not an entry point).

Pure core: no IPython, no ipywidgets, never imports torch; lazily :mod:`.devices` (CUDA
figures), ``pandas`` (:meth:`Inventory.to_frame`) and, for ``repr``/``_repr_html_``/
``to_json``, :mod:`.render` and :mod:`.protocol`. An inventory never keeps a user's tensor
alive: numbers and strings, ids, the shapes of walked containers (keys, never values), and weak
references to modules and optimizers (never to Parameters).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain, compress, filterfalse
from operator import is_not
from types import MappingProxyType
from typing import Any

from ..objects import Kind, StorageKey, Storages, TorchTypes
from ..records import ColumnRows, DeviceTotal, Record
from ..units import collector_paused, device_sort_key
from .book import _Book, _State
from .columns import _BULK_RECORDS, _NO_COLUMNS, _Columns
from .entries import _Entry, _entry_storages
from .facts import _bytes_by_device, _facts_record, _TensorFacts

# --------------------------------------------------------------------------------------------
# The result


def _lists_something(entry: Any) -> bool:
    """Whether a name's entry gives rows: a tensor's facts always do; an entry without records
    (an object watched for the tensors it may get) does not."""
    return type(entry) is _TensorFacts or bool(entry.records)


class Inventory:
    """The result of a scan: records, per-device totals, renderings. Immutable: what it
    computes on demand (records, totals) is cached, never changed."""

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
        # what a later inventory of the same namespace updates instead of rebuilding
        self._book: _Book | None = None
        self._names: list[str] = []  # top-level name of each pair of _records_by_entry
        self._share_counts: Counter[StorageKey] | None = None
        # sharing: keys reached by more than one name, and who shares with whom (by record)
        self._shared_keys: frozenset[StorageKey] | None = None
        self._sharing: dict[str, tuple[str, ...]] | None = None
        self._shared_records: dict[str, Record] = {}
        self._live: tuple[_Columns, list[int] | None] | None = None
        #: False when a rescan found every module and optimizer as it was before
        self.objects_changed = True

    @classmethod
    def _from_state(cls, state: _State, **options: Any) -> Inventory:
        return cls(
            state.entries,
            state.keys,
            state.ids,
            state.volatile,
            torch_imported=True,
            watched=state.watched,
            columns=state.columns,
            dropped=state.dropped,
            **options,
        )

    @classmethod
    def empty(cls, include_hidden: bool = False) -> Inventory:
        """What a namespace without torch gives."""
        return cls({}, [], [], set(), torch_imported=False, include_hidden=include_hidden)

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

    # -- records -----------------------------------------------------------------------------
    @property
    def records(self) -> list[Record]:
        if self._records is None:
            book = self._current_book()
            if book is not None and book.records is not None:
                self._records = book.records
            else:
                with collector_paused(len(self._state.keys) >= _BULK_RECORDS):
                    self._records = self._with_sharing()
                    if book is not None:
                        book.keep_records(self)
                    else:
                        self._book = _Book.build(self)
        return self._records

    # -- what a view reads instead of every record ----------------------------------------------
    def view_columns(self) -> ColumnRows:
        """The plain tensors as columns (:class:`ColumnRows`), no records built: a view sorts,
        filters and counts them column-wise and asks :meth:`records_of` only for the rows it
        shows. Everything else is in :meth:`other_records`. Starts the incremental
        bookkeeping, so that :meth:`view_changes` can answer after the next cell."""
        self._ensure_book()
        columns = self._live_columns()[0]
        names, devices = self._live_values(columns.names), self._live_values(columns.devices)
        sizes, pointers = self._live_values(columns.sizes), self._live_values(columns.pointers)
        shared_keys = self._shared_storage_keys()
        shared: frozenset[str] = frozenset()
        if shared_keys and names:
            keys = zip(devices, pointers)  # noqa: B905 - same lengths
            shared = frozenset(compress(names, map(shared_keys.__contains__, keys)))
        return ColumnRows(names, devices, sizes, shared)

    def other_records(self) -> list[Record]:
        """The records of every name not in :meth:`view_columns` (modules, optimizers,
        containers, tensors with gradients..., and hidden ones), sharing included: with the
        columns, exactly :attr:`records`."""
        if self._torch is None:
            return []
        found: list[Record] = []
        for name in self._entries:
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

    def view_changes(
        self, previous: Inventory
    ) -> dict[str, tuple[list[Record], list[Record]]] | None:
        """What a view that last showed ``previous`` must change to show this inventory:
        {top-level name: (its records then, its records now)} for the names whose records may
        differ, O(what changed); None when only a look at everything gives the exact answer (a
        full scan in between, output history listed, a rebinding that made or broke sharing)."""
        if previous is self or previous._state is self._state:
            return {}
        book = self._current_book()
        changes = book.changes_since(previous._state) if book is not None else None
        if changes is not None or self._state.columns is not previous._state.columns:
            return changes  # (a full scan in between: everything may have changed)
        if not self.changed_since(previous) and [e.records for e in self._hidden.values()] == [
            e.records for e in previous._hidden.values()
        ]:
            # no bookkeeping to ask (output history listed...): that nothing changed is still
            # cheap to know, and a view then sends nothing
            return {}
        return None

    # -- incremental bookkeeping ---------------------------------------------------------------
    def _give_book(self) -> _Book | None:
        """Hand the bookkeeping to the next inventory of this namespace (it updates it in
        place): this one keeps its own records and totals, and rebuilds storages if asked."""
        book, self._book = self._book, None
        self._share_counts = None  # the book's counts, from now on changed by the next one
        if book is not None and self._storages is book.storages:
            self._storages = None
        return book

    def _ensure_book(self) -> None:
        """Start the incremental bookkeeping here if no earlier inventory handed it on."""
        if self._current_book() is None:
            self._book = _Book.build(self)

    def _current_book(self) -> _Book | None:
        """The bookkeeping brought up to this inventory's state, or None (then a full build)."""
        book = self._book
        if book is None:
            return None
        if book.state is not self._state and not book.update(self):
            self._book = None
            return None
        return book

    def _records_by_entry(self) -> list[tuple[Any, list[Record]]]:
        """(entry, its records) in the namespace's order, then hidden entries; tensor records
        are built here (an entry that is an int is an index into the columns)."""
        if self._built is None:
            T = self._torch
            if T is None:  # torch not imported: nothing to list
                self._built = []
                return self._built
            built: list[tuple[Any, list[Record]]] = []
            names: list[str] = []
            cache = self._record_cache
            fresh_cache: dict[str, tuple[Any, list[Record]]] = {}
            entries = self._entries
            columns = self._state.columns or _NO_COLUMNS
            position = columns.position() if len(columns) else {}
            column_records = columns.all_records(T) if len(columns) else []
            dropped = self._state.dropped
            for name in self._state.keys:
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
            built += [(entry, entry.records) for entry in self._hidden.values()]
            names += list(self._hidden)
            self._built = built
            self._names = names
            self._record_cache = fresh_cache
        return self._built

    def _storages_of(self, entry: Any) -> Mapping[StorageKey, tuple[str, int]] | tuple[Any, ...]:
        if type(entry) is int:
            return ((self._state.columns or _NO_COLUMNS).key(entry),)
        return _entry_storages(entry)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __getitem__(self, name: str) -> Record:
        for record in self.records:
            if record.name == name:
                return record
        raise KeyError(name)

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

    def roots(self) -> MappingProxyType[str, list[Record]]:
        by_root: dict[str, list[Record]] = {}
        for record in self.records:
            if not record.hidden:
                by_root.setdefault(record.root, []).append(record)
        return MappingProxyType(by_root)

    def _with_sharing(self) -> list[Record]:
        """Records with ``shares_with``: names whose storages overlap (aliases, views, tied
        weights); only the few records that really share a storage are replaced."""
        built = self._records_by_entry()
        records = [r for _, records in built for r in records]
        sharing = self._sharers()
        if not sharing:
            return records
        return [
            dataclasses.replace(r, shares_with=sharing[r.name]) if sharing.get(r.name) else r
            for r in records
        ]

    def _storage_counter(self) -> dict[StorageKey, int]:
        """Storage key -> how many listed names reach it (the book's, kept up to date, or
        counted over every storage key at once, C-level)."""
        book = self._current_book() if self._book is not None else None
        if book is not None:
            return book.counts
        if self._share_counts is None:
            counts = Counter(self._column_keys())
            entries = chain(self._entries.values(), self._hidden.values())
            counts.update(
                chain.from_iterable(_entry_storages(e) for e in entries if _lists_something(e))
            )
            self._share_counts = counts
        return self._share_counts

    def _shared_storage_keys(self) -> frozenset[StorageKey]:
        if self._shared_keys is None:
            counts = self._storage_counter()
            self._shared_keys = frozenset(key for key, count in counts.items() if count > 1)
        return self._shared_keys

    def _sharers(self) -> dict[str, tuple[str, ...]]:
        """{record name: the other records' names it shares a storage with} (sorted), for the
        records that share one; looks only at the storages reached more than once."""
        if self._sharing is not None:
            return self._sharing
        shared_keys = self._shared_storage_keys()
        self._sharing = {}
        T = self._torch
        if not shared_keys or T is None:
            return self._sharing
        owners: dict[StorageKey, list[str]] = {}
        columns, live = self._live_columns()
        if len(columns):
            keys = columns.keys()
            hits = compress(range(len(keys)), map(shared_keys.__contains__, keys))
            alive = None if live is None else set(live)
            for index in hits:
                if alive is None or index in alive:
                    owners.setdefault(keys[index], []).append(columns.names[index])
        labelled = chain(self._entries.items(), self._hidden.items())
        for name, entry in labelled:
            storage_keys = _entry_storages(entry)
            if shared_keys.isdisjoint(storage_keys):
                continue
            if type(entry) is _TensorFacts:
                pairs: Iterable[Any] = [(_facts_record(T, name, entry), storage_keys)]
            elif not entry.records:
                continue
            else:
                pairs = entry.keys_per_record()
            for record, record_keys in pairs:
                for key in shared_keys.intersection(record_keys):
                    names = owners.setdefault(key, [])
                    if record.name not in names:
                        names.append(record.name)
        shared: dict[str, set[str]] = {}
        for names in owners.values():
            for name in names:
                shared.setdefault(name, set()).update(n for n in names if n != name)
        self._sharing = {name: tuple(sorted(others)) for name, others in shared.items() if others}
        return self._sharing

    # -- totals ------------------------------------------------------------------------------
    def _unique_storages(self) -> Storages:
        if self._storages is None and self._book is not None:
            book = self._current_book()
            if book is not None:
                self._storages = book.storages
        if self._storages is None:
            columns, live = self._live_columns()
            sizes = zip(columns.devices, columns.sizes)  # noqa: B905 - same lengths
            if live is None:
                merged = dict(zip(columns.keys(), sizes))  # noqa: B905
            else:
                pairs = list(zip(columns.keys(), sizes))  # noqa: B905
                merged = dict(pairs[i] for i in live)
            entries = self._entries.values()
            facts = [e for e in entries if type(e) is _TensorFacts]
            merged.update([(f.key, (f.device, f.nbytes)) for f in facts])
            merged.update([(f.grad.key, (f.grad.device, f.grad.nbytes)) for f in facts if f.grad])
            for entry in entries:
                if type(entry) is not _TensorFacts:
                    merged.update(entry.storages)
            self._storages = merged
        return self._storages

    def storages(self) -> Storages:
        """Every storage the listed objects reach, once: ``{storage key: (device, nbytes)}``.

        The key is ``(device, data_ptr)`` (or the storage's own address, or the wrapped
        tensor's storage, where there is no data pointer); ``nbytes`` is what the storage holds
        (what it would need, for meta). Memory accounting outside the inventory (holders,
        per-cell timelines) uses these keys so that nothing is counted twice."""
        return dict(self._unique_storages())

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

    def changed_since(self, previous: Inventory) -> list[str]:
        """Top-level names whose facts may differ from ``previous``'s: entries that are not the
        very ones it had (looked at again, rebound, new, gone) and plain tensors dropped from
        the shared columns since. Identity comparisons in C: an incremental consumer (the
        per-cell memory timeline) then updates only these instead of every storage."""
        now, before = self._entries, previous._entries
        if self._state.columns is not previous._state.columns:  # a full scan in between
            return list(dict.fromkeys(chain(previous.names(), self.names())))
        names = list(now)
        changed = list(compress(names, map(is_not, map(before.get, names), now.values())))
        changed.extend(before.keys() - now.keys())
        changed.extend(self._state.dropped - previous._state.dropped)
        return list(dict.fromkeys(changed))

    def totals(self) -> dict[str, int]:
        """{device: bytes}, every storage counted once across the namespace (gradients and
        optimizer state included; meta counts 0)."""
        if self._totals is None and self._book is not None:
            book = self._current_book()
            if book is not None:
                by_device = {d: 0 if d == "meta" else n for d, (_, n) in book.devices.items()}
                self._totals = {d: by_device[d] for d in sorted(by_device, key=device_sort_key)}
        if self._totals is None:
            by_device = _bytes_by_device(self._unique_storages())
            self._totals = {d: by_device[d] for d in sorted(by_device, key=device_sort_key)}
        return dict(self._totals)

    def would_need(self) -> dict[str, int]:
        """{device: bytes} as if every storage held data (what meta tensors would need)."""
        book = self._current_book()
        if book is not None:
            return {device: nbytes for device, (_, nbytes) in book.devices.items()}
        needed: dict[str, int] = {}
        for device, nbytes in self._unique_storages().values():
            needed[device] = needed.get(device, 0) + nbytes
        return needed

    @property
    def devices(self) -> list[str]:
        """Devices holding any storage of a visible name (meta included, at 0 bytes)."""
        return list(self.totals())

    def device_totals(self) -> list[DeviceTotal]:
        """Totals with the allocator's figures for accelerators that are *already* initialised
        (:func:`.devices.memory_figures`; reading them otherwise would initialise the device)."""
        from ..devices import memory_figures

        totals = self.totals()
        needed = self.would_need()
        rows = []
        for device in self.devices:
            figures = memory_figures(device)
            rows.append(
                DeviceTotal(
                    device,
                    totals.get(device, 0),
                    needed.get(device, 0),
                    figures.allocated,
                    figures.reserved,
                    figures.capacity,
                )
            )
        return rows

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

    def subset(self, names: Iterable[str]) -> Inventory:
        """The inventory of just these top-level names (what a cell read or created)."""
        wanted = set(names)
        state = self._state
        entries = {name: e for name, e in self._entries.items() if name in wanted}
        keys = [name for name in state.keys if name in wanted]
        columns = state.columns
        dropped = state.dropped
        if columns is not None and len(columns):
            dropped = dropped | frozenset(n for n in columns.names if n not in wanted)
        return Inventory(
            entries,
            keys,
            [],
            set(),
            torch_imported=self.torch_imported,
            torch=self._torch,
            record_cache=self._record_cache,
            columns=columns,
            dropped=dropped,
        )

    def mixed_warnings(self) -> list[str]:
        """One line per object whose parts sit on different devices, and per optimizer that
        trains parameters no name here reaches."""
        warnings = [orphan_warning(*orphan) for orphan in self.orphaned_optimizers()]
        # Only modules, optimizers and containers can span devices (a plain tensor's record
        # never does): when none of those entries does, no record needs looking at.
        if not any(
            record.mixed and not record.hidden
            for entries in (self._entries.values(), self._hidden.values())
            for entry in entries
            if type(entry) is _Entry
            for record in entry.records
        ):
            return warnings
        for record in self.records:
            if record.mixed and not record.hidden:
                if record.kind == "optimizer":
                    warnings.append(f"{record.name}: {record.note}")
                else:
                    warnings.append(f"{record.name} spans {', '.join(record.devices)}")
        return warnings

    # -- exports -----------------------------------------------------------------------------
    def to_frame(self) -> Any:
        import pandas as pd

        columns = [
            "name", "kind", "type", "device", "dtype", "shape", "numel", "bytes",
            "would_need_bytes", "requires_grad", "grad_bytes", "shares_with", "hidden", "mixed",
            "note",
        ]  # fmt: skip
        rows = [
            {
                "name": r.name,
                "kind": r.kind,
                "type": r.type,
                "device": r.device,
                "dtype": r.dtype,
                "shape": r.shape,
                "numel": r.numel,
                "bytes": r.bytes,
                "would_need_bytes": r.would_need_bytes,
                "requires_grad": r.requires_grad,
                "grad_bytes": r.grad_bytes,
                "shares_with": r.shares_with,
                "hidden": r.hidden,
                "mixed": r.mixed,
                "note": r.note,
            }
            for r in self.records
        ]
        return pd.DataFrame(rows, columns=columns)

    def to_json(self, **context: Any) -> dict[str, Any]:
        """The protocol snapshot (see :mod:`torchdevice_magic.protocol`)."""
        from ..protocol import snapshot

        return snapshot(self, **context)

    def __repr__(self) -> str:
        from ..render import inventory_text

        return inventory_text(self)

    def _repr_html_(self) -> str:
        from ..render import inventory_html

        return inventory_html(self)


def orphan_warning(name: str, unreachable: int, total: int) -> str:
    held = "all" if unreachable == total else f"{unreachable} of"
    return (
        f"{name} updates {held} {total} parameters that no variable here holds "
        "(model deleted, re-created or moved to meta after the optimizer was made?): "
        "make the optimizer again, or free them with %devices --holders"
    )
