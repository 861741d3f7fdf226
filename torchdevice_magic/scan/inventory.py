"""The result of a scan: :class:`Inventory`, immutable (records, per-device totals, storages,
the plain tensors' columns for views, what changed since an earlier inventory), and
:func:`orphan_warning`. :class:`.scanner.Scanner` builds inventories; import both from the
package :mod:`torchdevice_magic.scan`.

What one scan found and the reads over it alone are :class:`.contents._Contents`; this module
adds the incremental bookkeeping (:mod:`.book`) handed from one inventory of a namespace to
the next, the records with sharing, the totals and the exports. How an inventory is drawn
(``repr``, ``_repr_html_``, ``to_json``) is registered by the layers that draw it
(:mod:`torchdevice_magic.render`, :mod:`torchdevice_magic.protocol`, both imported by the
package root) through :func:`register_drawing`: the scan never imports what sits above it.

Pure core: no IPython, no ipywidgets, never imports torch; lazily :mod:`.devices` (CUDA
figures) and ``pandas`` (:meth:`Inventory.to_frame`). An inventory never keeps a user's tensor
alive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from types import MappingProxyType
from typing import Any, Literal

from ..objects import StorageKey, Storages
from ..records import FRAME_COLUMNS, ColumnRows, DeviceTotal, Record
from ..units import collector_paused, device_sort_key
from .book import _Book, _State
from .columns import _BULK_RECORDS
from .contents import _Contents
from .entries import LEFT_BEHIND_FIX, _entry_spans_devices
from .facts import bytes_by_device

#: How an inventory is drawn, by kind: "text" (``repr``), "html" (``_repr_html_``), "json"
#: (``to_json``). Set by the layer that draws it, when that layer is imported.
_DRAWINGS: dict[str, Callable[..., Any]] = {}


def register_drawing(kind: Literal["text", "html", "json"], draw: Callable[..., Any]) -> None:
    """Say how an inventory is drawn: ``draw(inventory, **context)`` gives its ``repr``
    ("text"), its ``_repr_html_`` ("html") or its ``to_json`` ("json")."""
    _DRAWINGS[kind] = draw


def _drawing(kind: str) -> Callable[..., Any]:
    draw = _DRAWINGS.get(kind)
    if draw is None:  # only when the package root was bypassed (it imports both drawers)
        raise RuntimeError(f"no {kind} drawing registered: import torchdevice_magic first")
    return draw


class Inventory(_Contents):
    """The result of a scan: records, per-device totals, renderings. Immutable: what it
    computes on demand (records, totals) is cached, never changed."""

    #: what a later inventory of the same namespace updates instead of rebuilding (given on by
    #: the scanner, or started here when a view first reads the columns)
    _book: _Book | None = None

    @classmethod
    def _from_state(cls, state: _State, **options: Any) -> Inventory:
        inventory = cls(
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
        inventory._state = state  # the very state: its place in the rescans' lineage too
        return inventory

    @classmethod
    def empty(cls, include_hidden: bool = False) -> Inventory:
        """What a namespace without torch gives."""
        return cls({}, [], [], set(), torch_imported=False, include_hidden=include_hidden)

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

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __getitem__(self, name: str) -> Record:
        for record in self.records:
            if record.name == name:
                return record
        raise KeyError(name)

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

    # -- what a view reads instead of every record ----------------------------------------------
    def view_columns(self) -> ColumnRows:
        """The plain tensors as columns (see :meth:`_Contents.view_columns`). Starts the
        incremental bookkeeping, so that :meth:`view_changes` can answer after the next cell."""
        self._ensure_book()
        return super().view_columns()

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

    def _storage_counter(self) -> dict[StorageKey, int]:
        """Storage key -> how many listed names reach it: the book's, kept up to date, where
        this inventory has one."""
        book = self._current_book() if self._book is not None else None
        if book is not None:
            return book.counts
        return super()._storage_counter()

    # -- totals ------------------------------------------------------------------------------
    def _unique_storages(self) -> Storages:
        if self._storages is None and self._book is not None:
            book = self._current_book()
            if book is not None:
                self._storages = book.storages
        if self._storages is None:
            self._storages = self._own_storages()
        return self._storages

    def storages(self) -> Storages:
        """Every storage the listed objects reach, once: ``{storage key: (device, nbytes)}``.

        The key is ``(device, data_ptr)`` (or the storage's own address, or the wrapped
        tensor's storage, where there is no data pointer); ``nbytes`` is what the storage holds
        (what it would need, for meta). Memory accounting outside the inventory (holders,
        per-cell timelines) uses these keys so that nothing is counted twice."""
        return dict(self._unique_storages())

    def totals(self) -> dict[str, int]:
        """{device: bytes}, every storage counted once across the namespace (gradients and
        optimizer state included; meta counts 0)."""
        if self._totals is None and self._book is not None:
            book = self._current_book()
            if book is not None:
                by_device = {d: 0 if d == "meta" else n for d, (_, n) in book.devices.items()}
                self._totals = {d: by_device[d] for d in sorted(by_device, key=device_sort_key)}
        if self._totals is None:
            by_device = bytes_by_device(self._unique_storages())
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
        # never does): when none of those entries does, no record needs looking at. A scanner's
        # state names them (kept up to date by each rescan); any other state is looked through.
        if self._state.serial:
            spans = bool(self._state.mixed)
        else:
            entries = chain(self._entries.values(), self._hidden.values())
            spans = any(map(_entry_spans_devices, entries))
        if not spans:
            return warnings
        for record in self.records:
            if record.mixed and not record.hidden:
                if record.kind == "optimizer":
                    warnings.append(f"{record.name}: {record.note}")
                else:
                    warnings.append(spans_warning(record))
        return warnings

    # -- exports -----------------------------------------------------------------------------
    def to_frame(self) -> Any:
        """A pandas DataFrame, one row per record, for filtering: ``device`` holds device names
        only (``frame[frame.device == "cpu"]``), the words the tables add go to ``note``."""
        import pandas as pd

        return pd.DataFrame(list(map(Record.frame_row, self.records)), columns=FRAME_COLUMNS)

    def to_json(self, **context: Any) -> dict[str, Any]:
        """The protocol snapshot (see :mod:`torchdevice_magic.protocol`)."""
        result: dict[str, Any] = _drawing("json")(self, **context)
        return result

    def __repr__(self) -> str:
        return str(_drawing("text")(self))

    def _repr_html_(self) -> str:
        return str(_drawing("html")(self))


def spans_warning(record: Record, *, with_type: bool = False) -> str:
    """ "model spans cpu, cuda:0", with the reason where the scan knows it (a plain tensor
    attribute ``.to()`` left behind)."""
    why = [part for part in record.note.split("; ") if LEFT_BEHIND_FIX in part]
    reason = f" — {why[0]}" if why else ""
    kind = f" ({record.type})" if with_type else ""
    return f"{record.name}{kind} spans {', '.join(record.devices)}{reason}"


def orphan_warning(name: str, unreachable: int, total: int) -> str:
    held = "all" if unreachable == total else f"{unreachable} of"
    return (
        f"{name} updates {held} {total} parameters that no variable here holds "
        "(model deleted, re-created or moved to meta after the optimizer was made?): "
        "make the optimizer again, or free them with %devices --holders"
    )
