"""Which tensors, modules and optimizers live in a namespace, on which devices, taking how much.

Data flows one way: namespace -> :mod:`.objects` (the one walker) -> :class:`Scanner` (per
session, incremental) -> :class:`Inventory` (immutable result of typed :class:`Record` rows).

Pure core: no IPython, no ipywidgets, and torch is never imported here: if the user has not
imported torch there is nothing to find. Everything a user object could do to us (properties
that raise, lying ``__len__``, self-referencing containers, generators) is guarded: a hostile
object becomes a skipped name or an "unreadable" record, never an exception.

Memory is counted once per storage (:func:`.objects.add_storages` keys): views, aliases, tied
weights, a name bound to a module's own Parameter: each storage counts once in the totals and
once in a module's parameter/buffer bytes.

The scan never keeps a user's tensor alive: an :class:`Inventory` holds numbers and strings,
ids, the shapes of walked containers (keys, never values), and weak references to modules and
optimizers (never to Parameters: torch's swap-based ``Module._apply`` refuses to swap tensors
that have weak references).

This module keeps the entry points (:class:`Scanner`, :func:`scan`), the full scan and the
rescan, IPython's own names and the hidden output history; the parts, lowest first, are:
:mod:`.facts` (what is read from tensors), :mod:`.entries` (:class:`_Entry`, modules,
optimizers), :mod:`.composites` (containers and objects; the container limits),
:mod:`.inspection` (``_inspect``: one name to its entry; ``_still_same``), :mod:`.columns`
(the plain tensors as columns), :mod:`.book` (``_State``, ``_Book``: incremental
bookkeeping), :mod:`.sharing` and :mod:`.contents` (what one scan found, the views' reads) and
:mod:`.inventory` (:class:`Inventory`, :func:`orphan_warning`). None of them imports this
module. Everything outside the package imports from :mod:`torchdevice_magic.scan`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from itertools import chain, compress, repeat
from operator import is_, ne, not_
from typing import Any

from ..names import IPYTHON_NAMES, REBOUND_EVERY_CELL, is_ipython_bookkeeping
from ..objects import Kind, StorageKey, TorchTypes
from ..records import Record
from .book import _names_left, _new_serial, _State
from .columns import _NO_COLUMNS, _read_columns
from .composites import AGGREGATE_ABOVE, CONTAINER_ELEMENT_CAP, MAX_CONTAINER_DEPTH
from .entries import _Entry, _entry_spans_devices, _entry_storages, _entry_volatile
from .facts import _facts_record, _facts_storages, _TensorFacts
from .folding import _fold, _fold_due
from .inspection import _inspect, _still_same
from .inventory import Inventory, orphan_warning

# --------------------------------------------------------------------------------------------
# The scanner


class Scanner:
    """Per-session incremental scan state: what it saw (names, ids, entries, the plain tensors'
    columns), which names to look at again (modules, optimizers, grad-carrying tensors, watched
    containers and objects) and the records already built. ``scan()`` returns an immutable
    :class:`Inventory`, which carries the state the next scan starts from.

    The session owns one; the public :func:`scan` makes a throwaway one from ``previous``."""

    def __init__(self, previous: Inventory | None = None) -> None:
        self.last: Inventory | None = previous

    def forget(self) -> None:
        self.last = None

    def scan(
        self,
        namespace: Mapping[str, Any],
        *,
        include_hidden: bool = False,
        changed: Iterable[str] = (),
        recheck: bool = True,
        full: bool = False,
        reinspect: Iterable[str] = (),
    ) -> Inventory:
        """Scan ``namespace``; incremental from the last scan unless ``full``.

        ``recheck=False``: the caller knows nothing could have reached a module, an optimizer or
        a container since the last scan (the hook decides this from the names a cell
        mentions), so their signatures are not computed again; rebound and ``changed`` names
        still are.

        Only names bound to a different object since then, names in ``changed`` (the hook
        passes the names a cell assigned, which catches a freed object's id reused by a new
        one), and modules / optimizers / grad-carrying tensors / containers and objects whose
        cheap signature moved are inspected again; the rest is reused as it was.
        ``reinspect``: names inspected again whatever their signatures say (the hook passes
        those whose attributes a cell set: ``model.mask = torch.ones(3)`` moves no signature).
        """
        previous = None if full else self.last
        T = TorchTypes.current()
        if T is None:
            inventory = Inventory.empty(include_hidden=include_hidden)
            self.last = inventory
            return inventory
        try:
            inventory = self._scan(
                T, namespace, previous, include_hidden, changed, recheck, reinspect
            )
        finally:
            T.forget_types()  # hold no user class (nor what its attributes hold) between scans
        self.last = inventory
        return inventory

    def _scan(
        self,
        T: TorchTypes,
        namespace: Mapping[str, Any],
        previous: Inventory | None,
        include_hidden: bool,
        changed: Iterable[str],
        recheck: bool,
        reinspect: Iterable[str],
    ) -> Inventory:
        state = previous._state if previous is not None else None
        incremental = state is not None and state.keys and len(state.ids) == len(state.keys)
        try:
            if type(namespace) is dict:  # values() follows keys() order in a plain dict
                keys = list(namespace)
                # a rescan needs only the ids (the values of the few stale names it looks up)
                values = [] if incremental else list(namespace.values())
                ids = list(map(id, namespace.values() if incremental else values))
            else:
                keys = list(namespace)
                values = list(map(namespace.__getitem__, keys))
                ids = list(map(id, values))
        except Exception:  # a Mapping that changed while we read it: take a snapshot
            snapshot = dict(namespace.items())
            keys, values, namespace = list(snapshot), list(snapshot.values()), snapshot
            ids = list(map(id, values))
        if state is not None and incremental:
            new_state = _rescan(T, namespace, keys, ids, state, changed, recheck, reinspect)
            if _fold_due(new_state):  # many plain tensors made by cells: into the columns
                new_state = _fold(T, new_state)
        else:
            new_state = _full_scan(
                T, keys, ids, values, namespace if type(namespace) is dict else None
            )
        hidden = _hidden_entries(T, namespace, new_state) if include_hidden else {}
        inventory = Inventory._from_state(
            new_state,
            include_hidden=include_hidden,
            hidden=hidden,
            torch=T,
            record_cache=_cache_kept(previous, new_state),
        )
        if previous is not None and not hidden:
            inventory._book = previous._give_book()
        if previous is not None and state is not None and not _objects_changed(state, new_state):
            inventory.objects_changed = False
            inventory._owned_keys = previous._owned_keys
        return inventory


def _objects_changed(before: _State, after: _State) -> bool:
    """Whether a module, an optimizer or a tensor an optimizer updates changed between two
    scans: what can orphan an optimizer, or change what the modules own. A training cell's
    ``loss`` and ``out`` (grad-carrying tensors, looked at again every scan) are rebound every
    run and change neither."""
    old, new = before.entries, after.entries
    changed = [n for n in before.volatile | after.volatile if old.get(n) is not new.get(n)]
    if not changed:
        return False
    tensors: list[_TensorFacts] = []
    for name in changed:
        pair = (old.get(name), new.get(name))
        if pair[0] == pair[1]:  # a grad-carrying tensor looked at again, its facts the same
            continue
        for entry in pair:
            if entry is None:
                continue
            if type(entry) is not _TensorFacts:
                return True
            tensors.append(entry)
    updated: set[int] = set()
    for name in after.volatile:
        entry = new.get(name)
        if type(entry) is _Entry and entry.kind == Kind.OPTIMIZER:
            updated.update(entry.tensor_ids)
    return any(tensor.id in updated for tensor in tensors)


def _cache_kept(
    previous: Inventory | None, state: _State
) -> dict[str, tuple[Any, list[Record]]] | None:
    """The records built for entries, for the next inventory: all of them, but after a fold
    or a full scan only those of entries still there (the folded tensors' records would
    otherwise live on, a tracked object each for the collector to walk)."""
    if previous is None:
        return None
    cache = previous._record_cache
    if state.columns is previous._state.columns or not cache:
        return cache
    entries = state.entries
    return {name: kept for name, kept in cache.items() if entries.get(name) is kept[0]}


def scan(
    namespace: Mapping[str, Any],
    *,
    include_hidden: bool = False,
    previous: Inventory | None = None,
    changed: Iterable[str] = (),
    recheck: bool = True,
) -> Inventory:
    """Inventory of the tensors, modules, optimizers, and containers and objects holding them,
    in ``namespace``. ``previous``: the last Inventory of the same namespace (incremental; see
    :meth:`Scanner.scan`)."""
    return Scanner(previous).scan(
        namespace, include_hidden=include_hidden, changed=changed, recheck=recheck
    )


def _full_scan(
    T: TorchTypes,
    keys: list[str],
    ids: list[int],
    values: list[Any],
    lookup: dict[str, Any] | None = None,
) -> _State:
    """Everything in the namespace (``lookup``: the namespace itself when it is a dict)."""
    # Plain tensors and Parameters, most of a namespace, are picked out column-wise.
    plain: list[bool] | None = None
    plain_types: list[type] | None = None  # None: every one an exact torch.Tensor
    if all(map(is_, map(type, values), repeat(T.Tensor))):  # tensors only (identity, in C)
        plain_names, plain_tensors, plain_ids = keys, values, ids
    else:
        types = list(map(type, values))
        plain = list(map({T.Tensor, T.Parameter}.__contains__, types))
        plain_names, plain_tensors, plain_types, plain_ids = (
            list(compress(column, plain)) for column in (keys, values, types, ids)
        )
    if _any_bookkeeping(T, plain_names, lookup):  # `_`, `_12`... can hold a tensor
        keep = _not_bookkeeping(plain_names)
        plain_names, plain_tensors, plain_ids = (
            list(compress(column, keep)) for column in (plain_names, plain_tensors, plain_ids)
        )
        if plain_types is not None:
            plain_types = list(compress(plain_types, keep))
    entries: dict[str, Any] = {}
    volatile: set[str] = set()
    watched: set[str] = set()
    mixed: set[str] = set()
    if plain is not None:
        # the rest, less what cannot hold a tensor (numbers, strings, functions: known kinds)
        rest = list(map(not_, plain))
        rest_kinds = list(map(T.kinds.get, compress(types, rest)))
        wanted = list(map(ne, rest_kinds, repeat(Kind.NONE)))
        candidates = zip(compress(keys, rest), compress(values, rest), strict=True)
        for name, value in compress(candidates, wanted):
            if not is_ipython_bookkeeping(name):
                _store(T, name, _inspect(T, name, value), entries, volatile, watched, mixed)
    columns, careful_volatile = _read_columns(
        T, plain_names, plain_tensors, plain_types, plain_ids, entries
    )
    volatile.update(careful_volatile)
    return _State(
        keys,
        ids,
        entries,
        frozenset(volatile),
        frozenset(watched),
        columns,
        serial=_new_serial(),
        mixed=frozenset(mixed),
        settled=len(entries),
    )


def _not_bookkeeping(names: list[str]) -> list[bool]:
    """False for IPython's own names; only names starting with ``_`` are looked at one by one."""
    try:
        underscored = compress(names, map(str.startswith, names, repeat("_")))
        drop = {name for name in underscored if is_ipython_bookkeeping(name)}
    except TypeError:  # a key that is not a str
        return [not is_ipython_bookkeeping(name) for name in names]
    drop.update(IPYTHON_NAMES.intersection(names))
    return list(map(not_, map(drop.__contains__, names)))


_PLAIN_IPYTHON_NAMES = tuple(name for name in IPYTHON_NAMES if not name.startswith("_"))


def _any_bookkeeping(T: TorchTypes, names: list[str], lookup: dict[str, Any] | None) -> bool:
    """Whether any of these names of tensors may be IPython's (``_``, ``_12``, ``Out``...):
    one search through the names joined for a leading ``_`` instead of a check per name; the
    few others looked up in the namespace (``lookup``) when there is one."""
    try:
        joined = "\0".join(names)
    except TypeError:  # a key that is not a str: check each
        return True
    if joined.startswith("_") or "\0_" in joined:
        return True
    if lookup is None:
        return not IPYTHON_NAMES.isdisjoint(names)
    for name in _PLAIN_IPYTHON_NAMES:
        tp = type(lookup.get(name))
        if tp is T.Tensor or tp is T.Parameter:
            return True
    return False


def _store(
    T: TorchTypes,
    name: str,
    entry: Any,
    entries: dict[str, Any],
    volatile: set[str],
    watched: set[str],
    mixed: set[str],
) -> None:
    if entry is None:
        entries.pop(name, None)
        volatile.discard(name)
        watched.discard(name)
        mixed.discard(name)
        return
    entries[name] = entry
    if _entry_volatile(entry):
        volatile.add(name)
    else:
        volatile.discard(name)
    if type(entry) is _Entry and entry.structure is not None and not entry.volatile:
        watched.add(name)
    else:
        watched.discard(name)
    if _entry_spans_devices(entry):
        mixed.add(name)
    else:
        mixed.discard(name)


def _rescan(
    T: TorchTypes,
    namespace: Mapping[str, Any],
    keys: list[str],
    ids: list[int],
    state: _State,
    changed: Iterable[str],
    recheck: bool = True,
    reinspect: Iterable[str] = (),
) -> _State:
    entries = dict(state.entries)
    volatile = set(state.volatile)
    watched = set(state.watched)
    mixed = set(state.mixed)
    columns = state.columns or _NO_COLUMNS
    dropped = state.dropped
    known = len(state.keys)
    gone: list[str] = []
    kept = 0
    positions = None
    if _starts_with(keys, state.keys):
        # the usual cell: same names, some rebound, perhaps a few new ones at the end
        kept = known
        positions = state.positions
        if positions is None:
            positions = dict(zip(keys, range(len(keys))))  # noqa: B905
        elif len(keys) > known:
            positions.update(zip(keys[known:], range(known, len(keys))))  # noqa: B905
        changed = list(changed)
        # IPython's history names change after every stored cell: expected, so they keep
        # the one-comparison path of _rebound (and are skipped below as bookkeeping)
        stale = _rebound(keys, ids, state.ids, positions, chain(changed, REBOUND_EVERY_CELL))
        stale += keys[known:]
    else:
        left = _names_left(state.keys, keys)
        if left is not None:
            # `del x`: the names left keep their order, new ones come at the end (in C)
            staying, kept_keys = left
            stale = list(compress(kept_keys, map(ne, ids, compress(state.ids, staying))))
            stale += keys[len(kept_keys) :]
            gone = list(compress(state.keys, map(not_, staying)))
        else:
            current = dict(zip(keys, ids, strict=True))
            before = dict(zip(state.keys, state.ids, strict=True))
            stale = [name for name in keys if before.get(name) != current[name]]
            gone = list(before.keys() - current.keys())
        for name in gone:
            entries.pop(name, None)
            volatile.discard(name)
            watched.discard(name)
            mixed.discard(name)
    # Names the cell mentions: look again at plain tensors and containers among them (a freed
    # object's id may now belong to a new one). Modules and optimizers need not: their
    # signatures and weak references catch a replacement.
    position = columns.position() if len(columns) else {}
    forced = [
        n for n in changed if (n in entries and not _entry_volatile(entries[n])) or (n in position)
    ]
    forced += [n for n in reinspect if n in entries]
    stale = list(dict.fromkeys(chain(stale, forced)))
    stale_set = set(stale)
    if recheck:
        for name in chain(list(volatile), list(watched)):
            if name not in stale_set and not _still_same(T, entries[name], namespace.get(name)):
                stale.append(name)
                stale_set.add(name)
    # a rebound or deleted name no longer means its column
    leaving = [name for name in chain(stale, gone) if name in position and name not in dropped]
    if leaving:
        dropped = dropped | frozenset(leaving)
    for name in stale:
        if is_ipython_bookkeeping(name):
            continue
        entry = _inspect(T, name, namespace.get(name))
        _store(T, name, entry, entries, volatile, watched, mixed)
    # what changed since ``state``, from what this rescan did (O(what changed)): names whose
    # entry is not the very one it was, and the names that left the columns
    earlier = state.entries
    touched = [name for name in stale if entries.get(name) is not earlier.get(name)]
    touched += [name for name in gone if name in earlier]
    touched += leaving
    return _State(
        keys,
        ids,
        entries,
        frozenset(volatile),
        frozenset(watched),
        state.columns,
        dropped,
        serial=_new_serial(),
        parent=state.serial or -1,
        touched=tuple(dict.fromkeys(touched)),
        mixed=frozenset(mixed),
        settled=state.settled,
        kept=kept,
        positions=positions,
    )


def _starts_with(keys: list[Any], prefix: list[Any]) -> bool:
    """Whether ``keys`` (a list this scan made and owns) begins with ``prefix``. Compared
    as whole lists (in C, by identity first) after cutting off the new tail for a moment:
    slicing a namespace's worth of names would touch every name's string (reference counts)
    and costs more than the comparison itself."""
    known = len(prefix)
    if len(keys) < known:
        return False
    if len(keys) == known:
        return keys == prefix
    tail = keys[known:]
    del keys[known:]
    try:
        return keys == prefix
    finally:
        keys += tail


#: names compared at once by :func:`_rebound` (as lists, in C) before one by one
_REBOUND_CHUNK = 1024


def _rebound(
    names: list[str],
    ids: list[int],
    old_ids: list[int],
    positions: dict[str, int] | None = None,
    mentioned: Iterable[str] = (),
) -> list[str]:
    """The first ``len(old_ids)`` names whose id is not the old one (the names a cell bound to
    another object). A cell rebinds a few names of many, usually names it mentions: those
    (found by ``positions``) are set back to their old ids for a moment and the whole lists
    compared at once (in C, no copy); if they are then equal, the rebound names are among
    them. Otherwise (a name rebound some other way: ``exec``, a function's ``global``, another
    thread) chunks are compared as lists and only those that differ looked at name by name.
    ``ids`` is the list this scan made: it is left as it was."""
    known = len(old_ids)
    if positions is not None:
        saved: dict[int, int] = {}
        for name in mentioned:
            index = positions.get(name, known)
            if index < known and names[index] == name and index not in saved:
                saved[index] = ids[index]
                ids[index] = old_ids[index]
        try:
            same = _starts_with(ids, old_ids)
        finally:
            for index, value in saved.items():
                ids[index] = value
        if same:
            return [names[i] for i, value in sorted(saved.items()) if value != old_ids[i]]
    return _rebound_anywhere(names, ids, old_ids)


def _rebound_anywhere(names: list[str], ids: list[int], old_ids: list[int]) -> list[str]:
    """:func:`_rebound` without knowing where to look: chunks compared as lists, only those
    that differ looked at name by name."""
    known = len(old_ids)
    found: list[str] = []
    for start in range(0, known, _REBOUND_CHUNK):
        stop = min(start + _REBOUND_CHUNK, known)
        now, before = ids[start:stop], old_ids[start:stop]
        if now != before:
            found += compress(names[start:stop], map(ne, now, before))
    return found


def _hidden_entries(
    T: TorchTypes, namespace: Mapping[str, Any], state: _State
) -> dict[str, _Entry]:
    """Objects kept alive only by IPython's output history (``Out[12]``, ``_``)."""
    visible_keys: set[StorageKey] = set()
    for entry in state.entries.values():
        visible_keys.update(_entry_storages(entry))
    columns = state.columns
    if columns is not None:
        dropped = state.dropped
        visible_keys.update(
            key
            for name, key in zip(columns.names, columns.keys(), strict=True)
            if name not in dropped
        )
    found: dict[str, _Entry] = {}
    seen_ids: set[int] = set()
    candidates: list[tuple[str, Any]] = []
    out = namespace.get("Out")
    if isinstance(out, dict):
        candidates.extend((f"Out[{key!r}]", value) for key, value in list(dict.items(out)))
    for alias in ("_", "__", "___"):
        if alias in namespace:
            candidates.append((alias, namespace[alias]))
    for label, value in candidates:
        if id(value) in seen_ids:
            continue  # `_` is usually the same object as the last Out entry
        seen_ids.add(id(value))
        entry = _inspect(T, label, value)
        if type(entry) is _TensorFacts:
            entry = _Entry(entry.id, [_facts_record(T, label, entry)], _facts_storages(entry))
        if entry is None or not entry.storages:
            continue
        if set(entry.storages) <= visible_keys:
            continue  # also reachable from a visible name: not hidden
        hidden = _Entry(entry.object_id, [], entry.storages)
        hidden.records = [
            dataclasses.replace(
                record,
                hidden=True,
                movable=False,
                movable_reason="held only by the output history",
                note=(record.note + "; " if record.note else "") + "held by output history",
            )
            for record in entry.records
        ]
        hidden.record_keys = entry.record_keys
        found[label] = hidden
    return found


__all__ = [
    "Inventory",
    "Scanner",
    "scan",
    "orphan_warning",
    "MAX_CONTAINER_DEPTH",
    "CONTAINER_ELEMENT_CAP",
    "AGGREGATE_ABOVE",
]
