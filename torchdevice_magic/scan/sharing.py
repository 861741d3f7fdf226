"""Which names share a storage (aliases, views, tied weights), for :mod:`.contents`: how many
listed names reach each storage key, and for the records that share one, the names of the
others. Only the storages reached more than once are looked at.

Pure core: no IPython, no ipywidgets, never imports torch. Works on storage keys, names and
records: never a tensor.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from itertools import chain, compress
from typing import Any

from ..objects import StorageKey, TorchTypes
from .columns import _Columns
from .entries import _entry_storages
from .facts import _facts_record, _TensorFacts


def _lists_something(entry: Any) -> bool:
    """Whether a name's entry gives rows: a tensor's facts always do; an entry without records
    (an object watched for the tensors it may get) does not."""
    return type(entry) is _TensorFacts or bool(entry.records)


def _count_storages(column_keys: list[StorageKey], entries: Iterable[Any]) -> Counter[StorageKey]:
    """Storage key -> how many listed names reach it, over every storage key at once
    (C-level): the plain tensors' columns, then the entries that list something."""
    counts = Counter(column_keys)
    counts.update(chain.from_iterable(_entry_storages(e) for e in entries if _lists_something(e)))
    return counts


def _sharers(
    T: TorchTypes,
    shared_keys: frozenset[StorageKey],
    columns: _Columns,
    live: list[int] | None,
    labelled: Iterable[tuple[str, Any]],
) -> dict[str, tuple[str, ...]]:
    """{record name: the other records' names it shares a storage with} (sorted), for the
    records that share one of ``shared_keys``: the columns' (``live``: the indexes still meant,
    None for all), then the ``labelled`` entries' (name, entry)."""
    owners: dict[StorageKey, list[str]] = {}
    if len(columns):
        keys = columns.keys()
        hits = compress(range(len(keys)), map(shared_keys.__contains__, keys))
        alive = None if live is None else set(live)
        for index in hits:
            if alive is None or index in alive:
                owners.setdefault(keys[index], []).append(columns.names[index])
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
    return {name: tuple(sorted(others)) for name, others in shared.items() if others}
