"""The live window: one window of a changing namespace, kept up to date by what each cell
changed, reading the scan's columns instead of a record per tensor."""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, is_, is_not, itemgetter, ne, neg
from typing import Any

from ..records import NO_COLUMNS, ColumnRows
from ..units import collector_paused, device_sort_key
from .header import Tally
from .rows import Row, make_row, natural_first, natural_key, root_devices_of, sort_key
from .windows import Delta, Splice, Window, WindowSpec, diff_windows, filter_words, matches

# -- a window kept up to date ---------------------------------------------------------------

#: Rows a live window keeps sorted beyond its page, so that rows leaving the page are replaced
#: without looking at the whole namespace again (it does when these run out)
HEAD_RESERVE = 200

_first, _second, _root = itemgetter(0), itemgetter(1), attrgetter("root")
#: what a name the window did not show was made from: (no record, no row)
_NOT_SHOWN: tuple[Any, Any] = (None, None)


class RecordsSource:
    """A plain list of records read as a view source (fixtures, tests): no columns; any
    change means a fresh look. Inventories are sources themselves (``view_columns``...)."""

    torch_imported = True

    def __init__(self, records: Iterable[Any]) -> None:
        self.records = list(records)
        self._by_root: dict[str, list[Any]] | None = None

    def view_columns(self) -> ColumnRows:
        return NO_COLUMNS

    def other_records(self) -> list[Any]:
        return self.records

    def records_of(self, name: str) -> list[Any]:
        if self._by_root is None:
            self._by_root = {}
            for record in self.records:
                self._by_root.setdefault(record.root, []).append(record)
        return self._by_root.get(name, [])

    def view_changes(self, previous: Any) -> dict[str, Any] | None:
        old = getattr(previous, "records", None)
        if old is not None and len(old) == len(self.records) and all(map(is_, old, self.records)):
            return {}
        return None


def as_source(source: Any) -> Any:
    """An Inventory (or anything with ``view_columns``) as it is; a list of records wrapped."""
    return source if hasattr(source, "view_columns") else RecordsSource(source)


def _column_matches(name: str, device: str, words: tuple[str, ...]) -> bool:
    """:func:`matches` for a plain tensor of the columns (type ``Tensor``, kind ``tensor``)."""
    text = f"{name}\nTensor\ntensor\n{device}".lower()
    return all(word in text for word in words)


def _column_sort_key(sort: str) -> Callable[[str, str, int], tuple[Any, ...]]:
    """:func:`sort_key` of a plain tensor's record, from its name, device and size."""
    if sort == "size":
        return lambda name, device, size: (-size, -size, natural_key(name))
    if sort == "device":
        return lambda name, device, size: ((device_sort_key(device),), -size, natural_key(name))
    if sort == "type":
        return lambda name, device, size: ("tensor", natural_key(name))
    return lambda name, device, size: natural_key(name)


def column_head(
    columns: ColumnRows, sort: str, words: tuple[str, ...], count: int, reverse: bool
) -> tuple[list[tuple[Any, str]], int]:
    """The ``count`` first (last, when ``reverse``) plain tensors in ``sort`` order among
    those matching ``words``, as (sort key, name), and how many match. Sort keys are made
    only for the rows chosen: first by a number per row (size, device rank) with
    ``heapq`` over a list of ints, then by natural name among the rows tied at the edge
    (:func:`natural_first`: by an int per name first as well)."""
    names, devices, sizes = columns.names, columns.devices, columns.sizes
    index: Sequence[int] = range(len(names))
    if words:
        index = [i for i in index if _column_matches(names[i], devices[i], words)]
    matching = len(index)
    if not matching or count <= 0:
        return [], matching
    pick = heapq.nlargest if reverse else heapq.nsmallest

    def by_name(rows: Sequence[int], wanted: int, of: list[str] | None = None) -> list[int]:
        """The ``wanted`` first of ``rows`` (named ``of``) by natural name (keys only for a
        few of them)."""
        row_names = of if of is not None else [names[i] for i in rows]
        return [rows[i] for i in natural_first(row_names, wanted, last=reverse)]

    primary: list[int] | None = None
    if sort == "size":
        primary = list(map(neg, sizes)) if not words else [-sizes[i] for i in index]
    elif sort == "device":
        ranks = {key: rank for rank, key in enumerate(sorted(set(map(device_sort_key, devices))))}
        shift = 1 << 64  # above any size: the device decides, then the size
        rank_of = {device: ranks[device_sort_key(device)] * shift for device in set(devices)}
        primary = [rank_of[devices[i]] - sizes[i] for i in index]
    key = _column_sort_key(sort)
    if count >= matching:
        chosen = list(index)
    elif sort in ("name", "type"):  # by name (type: every plain tensor is a Tensor)
        chosen = by_name(index, count)
    elif primary is None:  # a sort without a shortcut here: its whole key for every row
        chosen = pick(count, index, key=lambda i: key(names[i], devices[i], sizes[i]))
    else:
        edge = pick(count, primary)[-1]
        before = edge.__lt__ if reverse else edge.__gt__
        chosen = list(compress(index, map(before, primary)))
        at_edge = list(map(edge.__eq__, primary))
        tied = list(compress(index, at_edge))
        # unfiltered, the rows are the columns' positions: their names by the same mask
        tied_names = None if words else list(compress(names, at_edge))
        chosen += by_name(tied, count - len(chosen), tied_names)
    return [(key(names[i], devices[i], sizes[i]), names[i]) for i in chosen], matching


@dataclass
class LiveWindow:
    """One window of a changing namespace, kept up to date cheaply.

    It keeps, sorted, only the *head* of the order: the rows up to the window's end plus
    :data:`HEAD_RESERVE` (every other matching row sorts after them), with their records.
    Opening it reads the plain tensors column-wise (:meth:`Inventory.view_columns`) and
    builds records only for the head. ``update(inventory)`` asks the inventory what changed
    since the one it showed (:meth:`Inventory.view_changes`: the records of the changed
    names, then and now), moves only those in or out of the head and the counts, formats
    only rows that changed, and returns the :class:`Delta` (None when the window and its
    counts did not change). When that cannot be answered cheaply, or the head runs short of
    rows, it looks at everything again. A list of records works too (:class:`RecordsSource`).
    """

    spec: WindowSpec
    target: str | None = None
    counts: Tally = field(default_factory=Tally)
    records_changed: bool = False  # whether the last update() saw any record change
    _source: Any = None  # what the window shows now (an Inventory)
    _words: tuple[str, ...] = ()
    _head: list[tuple[Any, str]] = field(default_factory=list)  # (sort key, name), sorted
    _complete: bool = True  # the head holds every matching row
    _rows: dict[str, Any] = field(default_factory=dict)  # the head's records by name
    _matching: int = 0
    _total: int = 0
    _made_from: dict[str, tuple[Any, Row]] = field(default_factory=dict)  # the page's rows
    _page: list[str] = field(default_factory=list)  # the names the window shows, in order
    _shown: bool = False  # whether a window was made (the page and its rows are known)
    _window: Window | None = None  # the window as last made, until the page changes

    @property
    def shown(self) -> bool:
        """Whether the window was made (``window is not None``, without making it)."""
        return self._shown

    @property
    def matching(self) -> int:
        """Rows that pass the filter (the window's ``matching``, without making the window)."""
        return self._matching

    @property
    def total(self) -> int:
        return self._total

    @property
    def window(self) -> Window | None:
        """The window now (made from the page's rows when asked: a cell's update need not)."""
        if not self._shown:
            return None
        if self._window is None:
            made = self._made_from
            rows = tuple(made[name][1] for name in self._page)
            self._window = Window(self.spec, rows, self._matching, self._total)
        return self._window

    def reset(
        self, source: Any, spec: WindowSpec | None = None, target: str | None = None
    ) -> Window:
        """Look at everything: counts, the head, the window."""
        if spec is not None:
            self.spec = spec
        self.target = target
        self._words = filter_words(self.spec.filter)
        self._shown = False  # rows depend on the target: format them again
        self._made_from = {}
        source = as_source(source)
        self._source = source
        columns = source.view_columns()
        others = source.other_records()
        self._total = len(columns.names) + len(others)
        self.counts = Tally(target)
        self.counts.add(others)
        self.counts.add_columns(columns)
        self._fill(source, columns, others)
        window, _ = self._cut()
        return window

    def _reach(self) -> int:
        spec = self.spec
        return spec.offset + spec.limit + HEAD_RESERVE

    def _fill(
        self, source: Any, columns: ColumnRows | None = None, others: list[Any] | None = None
    ) -> None:
        """Choose the head among every row (O(namespace); a heap over the columns)."""
        if columns is None:
            columns = source.view_columns()
        if others is None:
            others = source.other_records()
        sort, reverse, words = self.spec.sort, self.spec.reverse, self._words
        reach = self._reach()
        items, matching = column_head(columns, sort, words, reach, reverse)
        records = {}
        for record in others:
            if not words or matches(record, words):
                items.append((sort_key(record, sort), record.name))
                records[record.name] = record
        matching += len(records)
        items.sort()
        head = items[-reach:] if reverse else items[:reach]
        rows = {}
        for _, name in head:
            record = records.get(name)
            rows[name] = record if record is not None else source.records_of(name)[0]
        self._head, self._rows, self._matching = head, rows, matching
        self._complete = len(head) == matching

    def _cut(self) -> tuple[Window, Delta | None]:
        """The page of the head as a window, and the delta from the window shown before (None
        when there was none): every row of the page looked at (after a look at everything, or
        when the page moved as a whole). Rows of unchanged records are the very objects shown
        before (formatting is the per-row cost)."""
        spec = self.spec
        names = self._view_names(spec.offset, spec.offset + spec.limit)
        records = list(map(self._rows.__getitem__, names))
        record_roots = list(map(_root, records))
        # parts move with the whole: their rows show the whole's devices, so are made anew
        parts = list(compress(range(len(names)), map(ne, record_roots, names)))
        roots = self._root_devices({record_roots[i] for i in parts})
        shown = self._shown
        previous = self._made_from if shown else {}
        olds = list(map(previous.get, names, repeat(_NOT_SHOWN)))
        rows: list[Row] = list(map(_second, olds))
        remade = set(compress(range(len(names)), map(is_not, map(_first, olds), records)))
        remade.update(parts)
        upsert = []
        for i in sorted(remade):
            record = records[i]
            row = rows[i] = make_row(record, self.target, roots.get(record.root))
            if olds[i][1] != row:
                upsert.append(row)
        self._made_from = dict(zip(names, zip(records, rows)))  # noqa: B905
        before, self._page = self._page, names
        self._window = window = Window(spec, tuple(rows), self._matching, self._total)
        self._shown = True
        if not shown:
            return window, None
        if names == before:
            return window, Delta(tuple(upsert), (), (), window.matching, window.total)
        kept = set(names)
        remove = tuple(name for name in before if name not in kept)
        splices = ((0, len(before), tuple(names)),)
        return window, Delta(tuple(upsert), remove, splices, window.matching, window.total)

    def _view_names(self, start: int, stop: int) -> list[str]:
        """The names at ``start:stop`` of the view's order (the head, reversed if asked)."""
        head = self._head
        if not self.spec.reverse:
            return list(map(_second, head[start:stop]))
        size = len(head)
        return list(map(_second, reversed(head[max(0, size - stop) : max(0, size - start)])))

    def _root_devices(self, roots: Iterable[str]) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        for root in roots:
            found.update(root_devices_of(self._source.records_of(root)))
        return found

    def _cut_edits(self, edits: list[tuple[int, str | None]]) -> Delta | None:
        """The delta of the page from the head's edits alone: O(the rows that changed), the
        page's other rows never looked at (at 2,000 objects this runs after every cell, and
        each row looked at is a cache miss). None when an edit before the page moved the page
        as a whole (then :meth:`_cut` looks at every row of it)."""
        spec = self.spec
        start, limit = spec.offset, spec.limit
        before = self._page
        page = before.copy()
        present: dict[str, bool] = {}  # names that entered (True) or left (False) the page
        splices: list[Splice] = []  # the same edits, for the sidebar's copy of the order
        for index, name in edits:
            if index < start:
                return None
            position = index - start
            if position >= len(page):
                continue  # past what the page holds: the refill below reads it from the head
            if name is None:
                present[page.pop(position)] = False
                splices.append((position, 1, ()))
            else:
                page.insert(position, name)
                present[name] = True
                splices.append((position, 0, (name,)))
        if len(page) > limit:
            present.update(dict.fromkeys(page[limit:], False))
            splices.append((limit, len(page) - limit, ()))
            del page[limit:]
        elif len(page) < limit:
            more = self._view_names(start + len(page), start + limit)
            if more:
                splices.append((len(page), 0, tuple(more)))
            page += more
            present.update(dict.fromkeys(more, True))
        made, rows = self._made_from, self._rows
        entered = [name for name, now in present.items() if now]
        records = [rows[name] for name in entered]
        roots = self._root_devices({r.root for r in records if r.root != r.name})
        upsert: list[tuple[int, Row]] = []
        for name, record in zip(entered, records, strict=True):
            old = made.get(name, _NOT_SHOWN)
            if old[0] is record and record.root == name:
                continue  # the same record, shown already: the very row
            row = make_row(record, self.target, roots.get(record.root))
            made[name] = (record, row)
            if old[1] != row:
                upsert.append((page.index(name), row))
        left = [name for name, now in present.items() if not now and name in made]
        for name in left:
            del made[name]
        self._page = page
        self._window = None
        remove = tuple(sorted(left, key=before.index))
        return Delta(
            tuple(row for _, row in sorted(upsert, key=_first)),
            remove,
            tuple(splices) if page != before else (),  # (edits that cancel out: none)
            self._matching,
            self._total,
        )

    def update(self, source: Any) -> Delta | None:
        """Bring the window to ``source``; the delta from the previous window, or None."""
        self.records_changed = False
        if not self._shown:
            self.reset(source)
            return None
        source = as_source(source)
        previous = self._source
        if source is previous:
            return None
        # the counts, not the window: making the window would look at every row of the page
        matching, total = self._matching, self._total
        changes = source.view_changes(previous) if type(previous) is type(source) else None
        if changes is None:
            before = self.window
            assert before is not None  # shown
            with collector_paused():  # a look at everything: many short-lived objects
                after = self.reset(source, self.spec, self.target)
            self.records_changed = True
            delta = diff_windows(before, after)
        else:
            self._source = source
            changed, edits = self._apply(source, changes)
            if not changed:
                return None
            self.records_changed = True
            cut_delta = self._cut_edits(edits) if edits is not None else None
            if cut_delta is None:
                _, cut_delta = self._cut()
            assert cut_delta is not None  # a window was shown before
            delta = cut_delta
        if delta.empty and matching == self._matching and total == self._total:
            return None
        return delta

    def _apply(
        self, source: Any, changes: dict[str, tuple[list[Any], list[Any]]]
    ) -> tuple[bool, list[tuple[int, str | None]] | None]:
        """Move the changed names' records out of and into the head and the counts: whether
        any record changed, and what that did to the head, as (index in the view's order, name
        inserted or None for a row taken out); None when the head was chosen again."""
        sort, reverse, words = self.spec.sort, self.spec.reverse, self._words
        head, rows, counts = self._head, self._rows, self.counts
        edits: list[tuple[int, str | None]] = []
        changed = False
        for old, new in changes.values():
            if len(old) == len(new) and all(map(is_, old, new)):
                continue
            changed = True
            counts.add(old, -1)
            counts.add(new)
            self._total += len(new) - len(old)
            for record in old:
                if words and not matches(record, words):
                    continue
                self._matching -= 1
                shown = rows.pop(record.name, None)
                if shown is not None:
                    item = (sort_key(shown, sort), record.name)
                    index = bisect_left(head, item)
                    if index < len(head) and head[index] == item:
                        edits.append((len(head) - 1 - index if reverse else index, None))
                        del head[index]
            for record in new:
                if words and not matches(record, words):
                    continue
                self._matching += 1
                item = (sort_key(record, sort), record.name)
                if self._complete or (head and (item > head[0] if reverse else item < head[-1])):
                    index = bisect_left(head, item)
                    head.insert(index, item)
                    edits.append((len(head) - 1 - index if reverse else index, record.name))
                    rows[record.name] = record
        if not changed:
            return False, edits
        reach = self._reach()
        if len(head) > 2 * reach:  # keep the head short: the rest sorts after it anyway
            cut = slice(0, len(head) - reach) if reverse else slice(reach, len(head))
            dropped = head[cut]
            del head[cut]
            for _, name in dropped:
                rows.pop(name, None)
        if len(head) == self._matching:
            self._complete = True
        else:
            self._complete = False
            if len(head) < min(self._matching, self.spec.offset + self.spec.limit):
                self._fill(source)  # rows left the head and none is known to follow: look again
                return True, None
        return True, edits

    def retarget(self, target: str | None) -> Window:
        self.target = target
        # (never ``self._source or []``: an Inventory's truth value counts every record)
        return self.reset(self._source if self._source is not None else [], self.spec, target)
