"""Windows: a sort, a filter and a page of the rows (:class:`WindowSpec` -> :class:`Window`),
a fresh window over every record (:func:`window`, the reference the live window is tested
against), and the deltas between two windows that the sidebar applies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .rows import Row, make_row, root_devices_of, sort_key

SORTS = ("size", "name", "device", "type")
DEFAULT_LIMIT = 200
MAX_LIMIT = 5000


# -- windows -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WindowSpec:
    sort: str = "size"
    reverse: bool = False
    filter: str = ""
    offset: int = 0
    limit: int = DEFAULT_LIMIT
    target: str | None = None  # None: the default target

    def to_wire(self) -> dict[str, Any]:
        return {
            "sort": self.sort,
            "reverse": self.reverse,
            "filter": self.filter,
            "offset": self.offset,
            "limit": self.limit,
            "target": self.target,
        }


def matches(record: Any, words: tuple[str, ...]) -> bool:
    """Every word of the filter appears in the name, the type, the kind or the device."""
    if not words:
        return True
    text = f"{record.name}\n{record.type}\n{record.kind}\n{record.device}".lower()
    return all(word in text for word in words)


def filter_words(text: str) -> tuple[str, ...]:
    return tuple(text.lower().split())


@dataclass(frozen=True, slots=True)
class Window:
    spec: WindowSpec
    rows: tuple[Row, ...]
    matching: int  # rows that pass the filter
    total: int  # rows in the view

    def to_wire(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_wire(),
            "rows": [row.to_wire() for row in self.rows],
            "matching": self.matching,
            "total": self.total,
        }


def window(records: Sequence[Any], spec: WindowSpec, target: str | None) -> Window:
    """A fresh window: filter, sort, cut (what :class:`LiveWindow` keeps up to date)."""
    words = filter_words(spec.filter)
    chosen = [r for r in records if matches(r, words)] if words else list(records)
    chosen.sort(key=lambda r: sort_key(r, spec.sort), reverse=spec.reverse)
    page = chosen[spec.offset : spec.offset + spec.limit]
    roots = root_devices_of(records) if any(r.root != r.name for r in page) else {}
    rows = tuple(make_row(r, target, roots.get(r.root)) for r in page)
    return Window(spec, rows, len(chosen), len(records))


# -- deltas --------------------------------------------------------------------------------


#: one edit of a window's key order: at ``at``, take ``remove`` keys out and put ``insert`` in
#: (``Array.prototype.splice`` in the sidebar)
Splice = tuple[int, int, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class Delta:
    """What changed in a window: rows by key (new or changed), keys removed, and the edits
    that turn the old key order into the new one (none: the order did not change). A cell
    moves a row or two in or out of the window: a few splices, not the window's every key."""

    upsert: tuple[Row, ...]
    remove: tuple[str, ...]
    splices: tuple[Splice, ...]
    matching: int
    total: int

    @property
    def empty(self) -> bool:
        return not self.upsert and not self.remove and not self.splices

    def to_wire(self) -> dict[str, Any]:
        return {
            "upsert": [row.to_wire() for row in self.upsert],
            "remove": list(self.remove),
            "splices": [
                {"at": at, "remove": count, "insert": list(keys)}
                for at, count, keys in self.splices
            ],
            "matching": self.matching,
            "total": self.total,
        }


def diff_windows(before: Window, after: Window) -> Delta:
    old = {row.key: row for row in before.rows}
    # rows of unchanged records are the same objects: identity first, equality only if not
    upsert = tuple(
        row for row in after.rows if (same := old.get(row.key)) is not row and same != row
    )
    keys = tuple(row.key for row in after.rows)
    kept = set(keys)
    remove = tuple(key for key in old if key not in kept)
    before_keys = tuple(row.key for row in before.rows)
    splices = ((0, len(before_keys), keys),) if keys != before_keys else ()
    return Delta(upsert, remove, splices, after.matching, after.total)


def apply_splices(keys: list[str], splices: Sequence[Splice]) -> list[str]:
    """The key order after ``splices``, each applied to the result of the one before."""
    keys = list(keys)
    for at, count, inserted in splices:
        keys[at : at + count] = inserted
    return keys


def apply_delta(before: Window, delta: Delta) -> Window:
    """What the sidebar does with a delta (mirrored in labextension/src/window.ts)."""
    rows = {row.key: row for row in before.rows}
    for key in delta.remove:
        rows.pop(key, None)
    for row in delta.upsert:
        rows[row.key] = row
    order = apply_splices([row.key for row in before.rows], delta.splices)
    return Window(before.spec, tuple(rows[key] for key in order), delta.matching, delta.total)


def with_spec(spec: WindowSpec, **changes: Any) -> WindowSpec:
    return replace(spec, **changes)
