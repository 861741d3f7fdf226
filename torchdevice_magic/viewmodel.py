"""The one view of an :class:`~torchdevice_magic.inventory.Inventory`: what every table shows.

Pure core (no IPython, no ipywidgets, never imports torch). The text/HTML rendering, the
ipywidgets table and the JupyterLab sidebar only draw what this module computes:

* display rows (:class:`Row`): one size figure (the object's own data) with gradients shown
  apart, shape text, device, status, and what its button does or why it cannot;
* per-device totals with bars (:class:`DeviceBar`) and a line saying what the totals include
  beyond the rows (storages counted once, gradients, optimizer state, output history);
* sort orders (size by real bytes, names naturally: ``x2`` before ``x10``), filters (name,
  type, device text), paging windows (:class:`WindowSpec` -> :class:`Window`);
* the default target and the enabled/disabled state of every button, with the reason.

:class:`LiveWindow` keeps one window of a changing namespace up to date and says what changed
(:func:`apply_delta` on the previous window gives exactly a fresh window; a property test
checks it). Only the rows whose record changed are formatted again.
"""

from __future__ import annotations

import heapq
import re
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import is_, neg
from typing import Any

from .records import NO_COLUMNS, ColumnRows
from .units import device_sort_key, format_bytes

SORTS = ("size", "name", "device", "type")
DEFAULT_LIMIT = 200
MAX_LIMIT = 5000

#: Internal codes some parts of the core use, said in words wherever a view shows them.
REASON_WORDS = {
    "not_on_expected_device": "a tensor is not on the device the operation expected",
    "already_there": "already on the target device",
    "meta": "meta tensors hold no data",
}


def in_words(reason: str) -> str:
    """A reason for display: internal codes (``not_on_expected_device``) become words."""
    reason = reason.strip()
    if reason in REASON_WORDS:
        return REASON_WORDS[reason]
    if re.fullmatch(r"[a-z]+(_[a-z]+)+", reason):
        return reason.replace("_", " ")
    return reason


# -- sorting ----------------------------------------------------------------------------------

_DIGITS = re.compile(r"(\d+)")
_natural_cache: dict[str, tuple[Any, ...]] = {}


def natural_key(name: str) -> tuple[Any, ...]:
    """``x2`` before ``x10``; case-insensitive, then the exact spelling to break ties."""
    key = _natural_cache.get(name)
    if key is None:
        lower = name.lower()
        prefix = lower.rstrip("0123456789")
        if prefix.replace("_", "").isalpha():
            # the common shape (x, t123, layer_10): what the split below gives, without it
            digits = lower[len(prefix) :]
            parts: Any = (prefix, int(digits), "") if digits else (lower,)
            key = (parts, name)
        else:
            parts = _DIGITS.split(lower)
            parts[1::2] = map(int, parts[1::2])  # split() puts the digit runs at odd places
            key = (tuple(parts), name)
        if len(_natural_cache) > 500_000:
            _natural_cache.clear()
        _natural_cache[name] = key
    return key


def sort_key(record: Any, sort: str) -> tuple[Any, ...]:
    """Every view sorts with this: size by the real bytes (biggest first), then name."""
    if sort == "size":
        return (-record.data_bytes(), -record.would_need_bytes, natural_key(record.name))
    if sort == "device":
        return (
            tuple(map(device_sort_key, record.devices)),
            -record.data_bytes(),
            natural_key(record.name),
        )
    if sort == "type":
        return (record.type.lower(), natural_key(record.name))
    return natural_key(record.name)


# -- rows ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Action:
    """A button: its label, whether pressing it can do something, and why not (or what)."""

    enabled: bool
    label: str
    reason: str

    def to_wire(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "label": self.label, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Row:
    """One displayed row. ``key`` is unique within a view (the record's name)."""

    key: str
    name: str
    root: str
    kind: str
    type: str
    device: str
    dtype: str
    shape: str
    size: str  # one figure: the object's own data (what meta rows would need, said so)
    size_bytes: int
    grad: str  # gradients, apart ("" when none)
    grad_bytes: int
    status: str  # "", "hidden", "spans cpu, meta", "shares storage with y", notes
    selectable: bool
    action: Action

    def to_wire(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "root": self.root,
            "kind": self.kind,
            "type": self.type,
            "device": self.device,
            "dtype": self.dtype,
            "shape": self.shape,
            "size": self.size,
            "size_bytes": self.size_bytes,
            "grad": self.grad,
            "grad_bytes": self.grad_bytes,
            "status": self.status,
            "selectable": self.selectable,
            "action": self.action.to_wire(),
        }

    def cells(self) -> tuple[str, ...]:
        """The text columns, in :data:`COLUMNS` order (render.py and the widget draw these)."""
        return (self.name, self.type, self.device, self.dtype, self.shape, self.size, self.grad)


COLUMNS = ("name", "type", "device", "dtype", "shape", "size", "grad")


def shape_text(record: Any) -> str:
    if record.shape is not None:
        return "(" + ", ".join(map(str, record.shape)) + ")"
    if record.kind == "module":
        return f"{record.param_count:,} params"
    if record.kind == "container":
        return f"{record.element_count:,} items"
    if record.kind == "optimizer":
        return f"{record.numel:,} states"
    return ""


def size_text(record: Any) -> str:
    own = record.data_bytes()
    if record.devices == ("meta",) or (own == 0 and record.would_need_bytes):
        return f"0 B (meta; needs {format_bytes(record.would_need_bytes - record.grad_bytes)})"
    text = format_bytes(own)
    extra = record.would_need_bytes - record.bytes
    if extra > 0:  # some parts on meta: say what they would need
        text += f" (+{format_bytes(extra)} on meta)"
    return text


def _same_device(device: str, target: str) -> bool:
    """``cuda`` and ``cuda:0`` name the same device."""

    def norm(name: str) -> str:
        name = name.strip()
        return name if ":" in name or name in ("cpu", "meta") else name + ":0"

    return norm(device) == norm(target)


def row_action(
    record: Any, target: str | None, root_devices: Sequence[str] | None = None
) -> Action:
    """What this row's button does for ``target``, or why it cannot do anything."""
    label = f"→ {target}" if target else "→"
    if record.hidden:
        return Action(False, label, f"{record.name} is held only by IPython's output history")
    if record.kind == "optimizer" and not record.bytes and not record.devices:
        return Action(
            False,
            label,
            f"{record.name} has no state yet (it gets some at its first step); "
            "its parameters move with their module",
        )
    if not record.movable:
        why = in_words(record.note) if record.note else "it holds no data to move"
        return Action(False, label, f"{record.name} cannot be moved: {why}")
    if not target:
        return Action(False, label, "no target device is available")
    devices = tuple(root_devices) if root_devices is not None else record.devices
    if not devices:
        return Action(False, label, f"{record.root} holds no tensors")
    if all(_same_device(d, target) for d in devices):
        return Action(False, label, f"{record.root} is already on {target}")
    if record.root != record.name:
        return Action(
            True, label, f"Move {record.root} (all of it, not just {record.name}) to {target}"
        )
    return Action(True, label, f"Move {record.name} to {target}")


def status_text(record: Any) -> str:
    parts = []
    if record.hidden:
        parts.append("held by output history")
    if record.mixed and record.kind != "optimizer":
        parts.append(f"spans {', '.join(record.devices)}")
    if record.note and not record.note.startswith("spans "):
        parts.append(in_words(record.note))
    if record.shares_with:
        others = ", ".join(record.shares_with[:3])
        more = f" +{len(record.shares_with) - 3}" if len(record.shares_with) > 3 else ""
        parts.append(f"shares storage with {others}{more}")
    return "; ".join(dict.fromkeys(parts))


def make_row(record: Any, target: str | None, root_devices: Sequence[str] | None = None) -> Row:
    grad = format_bytes(record.grad_bytes) if record.grad_bytes else ""
    action = row_action(record, target, root_devices)
    return Row(
        key=record.name,
        name=record.name,
        root=record.root,
        kind=record.kind,
        type=record.type,
        device=record.device,
        dtype=record.dtype or "",
        shape=shape_text(record),
        size=size_text(record),
        size_bytes=record.data_bytes(),
        grad=grad,
        grad_bytes=record.grad_bytes,
        status=status_text(record),
        selectable=bool(record.movable and not record.hidden),
        action=action,
    )


# -- totals ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceBar:
    device: str
    bytes: int
    text: str  # "1.2 MiB", "0 B (meta; needs 4.0 MiB)", "1.0 GiB of 16.0 GiB (allocated ...)"
    fraction: float  # 0..1, the bar's fill

    def to_wire(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "bytes": self.bytes,
            "text": self.text,
            "fraction": self.fraction,
        }


@dataclass(frozen=True, slots=True)
class _CpuTotal:
    device: str
    bytes: int
    capacity: None = None
    allocated: None = None
    reserved: None = None

    @property
    def would_need_bytes(self) -> int:
        return self.bytes


def device_bars(inventory: Any) -> list[DeviceBar]:
    if not inventory.torch_imported:
        return []
    totals = inventory.totals()  # cached on the inventory
    if all(device == "cpu" for device in totals):
        # nothing on meta (what it would need) or an accelerator (allocator figures): the
        # totals say it all, without another pass over every storage
        rows = [_CpuTotal(device, nbytes) for device, nbytes in totals.items()]
    else:
        rows = inventory.device_totals()
    relative = [t.bytes for t in rows if t.capacity is None and t.device != "meta"]
    largest = max(relative, default=0) or 1
    bars = []
    for total in rows:
        if total.device == "meta":
            bars.append(
                DeviceBar(
                    "meta", 0, f"0 B (meta; needs {format_bytes(total.would_need_bytes)})", 0.0
                )
            )
            continue
        if total.capacity:
            text = f"{format_bytes(total.bytes)} of {format_bytes(total.capacity)}"
            extra = []
            if total.allocated is not None:
                extra.append(f"allocated {format_bytes(total.allocated)}")
            if total.reserved is not None:
                extra.append(f"reserved {format_bytes(total.reserved)}")
            if extra:
                text += " (" + ", ".join(extra) + ")"
            bars.append(
                DeviceBar(total.device, total.bytes, text, min(1.0, total.bytes / total.capacity))
            )
            continue
        bars.append(
            DeviceBar(total.device, total.bytes, format_bytes(total.bytes), total.bytes / largest)
        )
    return bars


@dataclass(slots=True)
class Tally:
    """Sums over the records that the header needs; kept up to date by :class:`LiveWindow`
    (add the records that came, subtract those that went) so a cell costs what it changed."""

    target: str | None = None
    rows: int = 0
    grads: int = 0
    optim: int = 0
    hidden: int = 0
    shared: int = 0
    actionable: int = 0  # rows whose button can move them to ``target``

    def add(self, records: Iterable[Any], sign: int = 1) -> None:
        target = self.target
        can_move = _mover(target) if target else None
        for record in records:
            self.rows += sign
            if record.hidden:
                self.hidden += sign * record.bytes
            else:
                self.grads += sign * record.grad_bytes
                if record.kind == "optimizer":
                    self.optim += sign * record.bytes
            if record.shares_with:
                self.shared += sign
            if can_move is not None and can_move(record):
                self.actionable += sign

    def add_columns(self, columns: ColumnRows, sign: int = 1) -> None:
        """The plain tensors of :meth:`Inventory.view_columns`, counted column-wise: what
        :meth:`add` gives for their records (never hidden, no gradients, movable)."""
        devices = columns.devices
        self.rows += sign * len(devices)
        self.shared += sign * len(columns.shared)
        if self.target and devices:
            same = _same_as(self.target)
            self.actionable += sign * sum(
                devices.count(device) for device in set(devices) if not same(device)
            )


def _same_as(target: str) -> Callable[[str], bool]:
    """Whether a device names ``target`` (``cuda`` and ``cuda:0`` are one device)."""
    target = target.strip()
    full = target if ":" in target or target in ("cpu", "meta") else target + ":0"

    def same(device: str) -> bool:
        return device in (target, full) or (":" not in device and device + ":0" == full)

    return same


def _mover(target: str) -> Any:
    """A fast ``row_action(record, target).enabled`` (no text): the tally runs it on every
    record it counts. Kept equal to row_action by a test."""
    same = _same_as(target)

    def can_move(record: Any) -> bool:
        if record.hidden or not record.movable:
            return False
        devices = record.devices
        if not devices:  # also an optimizer with no state yet
            return False
        return not all(map(same, devices))

    return can_move


def tally(records: Iterable[Any], target: str | None) -> Tally:
    result = Tally(target)
    result.add(records)
    return result


def totals_note(counts: Tally) -> str:
    """What the totals include beyond the rows' own figures, in words."""
    parts = []
    if counts.grads:
        parts.append(f"{format_bytes(counts.grads)} of gradients")
    if counts.optim:
        parts.append(f"{format_bytes(counts.optim)} of optimizer state")
    text = "Totals count each storage once"
    if parts:
        text += ", including " + " and ".join(parts)
    if counts.shared:
        text += "; shared storages (views, aliases, tied weights) are counted once"
    if counts.hidden:
        text += (
            f"; + {format_bytes(counts.hidden)} held by output history (listed, not in the totals)"
        )
    return text + "."


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


# -- the whole view ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    device: str
    enabled: bool
    reason: str

    def to_wire(self) -> dict[str, Any]:
        return {"device": self.device, "enabled": self.enabled, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Header:
    """Everything above the rows: totals, warnings, targets, the buttons' states."""

    torch_imported: bool
    message: str  # empty-state line ("" when there are rows)
    bars: tuple[DeviceBar, ...]
    totals_note: str
    warnings: tuple[str, ...]
    targets: tuple[Target, ...]
    target: str | None  # the chosen (or default) target
    move_all: Action
    move_selected: Action
    undo: Action
    refresh: Action

    def to_wire(self) -> dict[str, Any]:
        return {
            "torch_imported": self.torch_imported,
            "message": self.message,
            "bars": [b.to_wire() for b in self.bars],
            "totals_note": self.totals_note,
            "warnings": list(self.warnings),
            "targets": [t.to_wire() for t in self.targets],
            "target": self.target,
            "buttons": {
                "move_all": self.move_all.to_wire(),
                "move_selected": self.move_selected.to_wire(),
                "undo": self.undo.to_wire(),
                "refresh": self.refresh.to_wire(),
            },
        }


def unavailable(targets: Sequence[Target]) -> list[tuple[str, str]]:
    """(device, why) for the targets worth saying are unavailable (meta is a target only where
    the config allows it: no need to advertise it)."""
    return [(t.device, t.reason) for t in targets if not t.enabled and t.device != "meta"]


def choose_target(targets: Sequence[Target], wanted: str | None, default: str | None) -> str | None:
    enabled = [t.device for t in targets if t.enabled]
    if not enabled:
        return None
    for choice in (wanted, default):
        if choice:
            for device in enabled:
                if _same_device(device, choice):
                    return device
    # no choice yet: the first enabled device that is not the CPU (moves go somewhere else)
    others = [d for d in enabled if d != "cpu"]
    return others[0] if others else enabled[0]


def undo_action(
    undo_summary: str | None, targets: Sequence[Target], last_undoable: bool = True
) -> Action:
    if undo_summary:
        return Action(True, "Undo", f"Undo: {undo_summary}")
    if not last_undoable:
        return Action(False, "Undo", "the last move went to meta and cannot be undone")
    real = [t.device for t in targets if t.enabled and t.device not in ("cpu", "meta")]
    if not real and any(t.device == "meta" and t.enabled for t in targets):
        return Action(
            False,
            "Undo",
            "nothing to undo: the only other device here is meta, and a move to meta "
            "cannot be undone (meta keeps no data)",
        )
    return Action(False, "Undo", "nothing to undo")


def header(
    inventory: Any,
    targets: Sequence[Target] = (),
    *,
    target: str | None = None,
    default_target: str | None = None,
    undo_summary: str | None = None,
    last_undoable: bool = True,
    busy: bool = False,
    counts: Tally | None = None,
) -> Header:
    targets = tuple(targets)
    chosen = choose_target(targets, target, default_target)
    if not inventory.torch_imported:
        message = "torch is not imported: no tensors to show"
        counts = Tally(chosen)
    else:
        if counts is None or counts.target != chosen:
            counts = tally(inventory.records, chosen)
        message = "" if counts.rows else "No tensors, modules or optimizers in this namespace."
    label_all = f"Move all to {chosen}" if chosen else "Move all"
    if busy:
        move_all = Action(False, label_all, "a move is running")
    elif not chosen:
        move_all = Action(False, label_all, "no target device is available")
    elif not counts.actionable:
        move_all = Action(
            False,
            label_all,
            f"nothing to move: everything movable is already on {chosen}"
            if counts.rows
            else "nothing to move",
        )
    else:
        move_all = Action(
            True,
            label_all,
            f"Move every tensor, module, optimizer and container of tensors to {chosen}",
        )
    if busy:
        move_selected = Action(False, "Move selected", "a move is running")
    elif not chosen:
        move_selected = Action(False, "Move selected", "no target device is available")
    else:
        move_selected = Action(True, "Move selected", f"Move the checked rows to {chosen}")
    undo = (
        Action(False, "Undo", "a move is running")
        if busy
        else undo_action(undo_summary, targets, last_undoable)
    )
    refresh = Action(
        not busy, "Refresh", "a move is running" if busy else "Look at the namespace again"
    )
    return Header(
        torch_imported=bool(inventory.torch_imported),
        message=message,
        bars=tuple(device_bars(inventory)),
        totals_note=totals_note(counts) if counts.rows else "",
        warnings=tuple(inventory.mixed_warnings()) if inventory.torch_imported else (),
        targets=targets,
        target=chosen,
        move_all=move_all,
        move_selected=move_selected,
        undo=undo,
        refresh=refresh,
    )


def move_selected_action(header_: Header, selected: Sequence[str]) -> Action:
    """The Move-selected button once the view knows how many rows are checked."""
    base = header_.move_selected
    label = f"Move selected ({len(selected)})"
    if not base.enabled:
        return Action(False, label, base.reason)
    if not selected:
        return Action(False, label, "check rows to move them")
    return Action(
        True,
        label,
        f"Move {', '.join(selected[:5])}{' …' if len(selected) > 5 else ''} to {header_.target}",
    )


def root_devices_of(records: Iterable[Any]) -> dict[str, tuple[str, ...]]:
    """For parts of a top-level name (``batch['x']``): the devices of the whole name."""
    found: dict[str, set[str]] = {}
    for record in records:
        if record.root != record.name:
            found.setdefault(record.root, set()).update(record.devices)
    return {root: tuple(sorted(d, key=device_sort_key)) for root, d in found.items()}


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


@dataclass(frozen=True, slots=True)
class Delta:
    """What changed in a window: rows by key (new or changed), keys removed, the new order."""

    upsert: tuple[Row, ...]
    remove: tuple[str, ...]
    order: tuple[str, ...] | None  # None: the order of keys did not change
    matching: int
    total: int

    @property
    def empty(self) -> bool:
        return not self.upsert and not self.remove and self.order is None

    def to_wire(self) -> dict[str, Any]:
        return {
            "upsert": [row.to_wire() for row in self.upsert],
            "remove": list(self.remove),
            "order": list(self.order) if self.order is not None else None,
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
    order = keys if keys != tuple(row.key for row in before.rows) else None
    return Delta(upsert, remove, order, after.matching, after.total)


def apply_delta(before: Window, delta: Delta) -> Window:
    """What the sidebar does with a delta (mirrored in labextension/src/connection.ts)."""
    rows = {row.key: row for row in before.rows}
    for key in delta.remove:
        rows.pop(key, None)
    for row in delta.upsert:
        rows[row.key] = row
    order = delta.order if delta.order is not None else tuple(row.key for row in before.rows)
    return Window(before.spec, tuple(rows[key] for key in order), delta.matching, delta.total)


# -- a window kept up to date ---------------------------------------------------------------

#: Rows a live window keeps sorted beyond its page, so that rows leaving the page are replaced
#: without looking at the whole namespace again (it does when these run out)
HEAD_RESERVE = 200


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
    ``heapq`` over a list of ints, then by natural name among the rows tied at the edge."""
    names, devices, sizes = columns.names, columns.devices, columns.sizes
    index: Sequence[int] = range(len(names))
    if words:
        index = [i for i in index if _column_matches(names[i], devices[i], words)]
    matching = len(index)
    if not matching or count <= 0:
        return [], matching
    pick = heapq.nlargest if reverse else heapq.nsmallest

    def by_name(i: int) -> tuple[Any, ...]:
        return natural_key(names[i])

    primary: list[int] | None = None
    if sort == "size":
        primary = list(map(neg, sizes)) if not words else [-sizes[i] for i in index]
    elif sort == "device":
        ranks = {key: rank for rank, key in enumerate(sorted(set(map(device_sort_key, devices))))}
        shift = 1 << 64  # above any size: the device decides, then the size
        rank_of = {device: ranks[device_sort_key(device)] * shift for device in set(devices)}
        primary = [rank_of[devices[i]] - sizes[i] for i in index]
    if count >= matching:
        chosen = list(index)
    elif primary is None:  # by name (or type: every plain tensor is a Tensor)
        chosen = pick(count, index, key=by_name)
    else:
        edge = pick(count, primary)[-1]
        before = edge.__lt__ if reverse else edge.__gt__
        chosen = list(compress(index, map(before, primary)))
        tied = list(compress(index, map(edge.__eq__, primary)))
        chosen += pick(count - len(chosen), tied, key=by_name)
    key = _column_sort_key(sort)
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
    window: Window | None = None
    counts: Tally = field(default_factory=Tally)
    records_changed: bool = False  # whether the last update() saw any record change
    _source: Any = None  # what the window shows now (an Inventory)
    _words: tuple[str, ...] = ()
    _head: list[tuple[Any, str]] = field(default_factory=list)  # (sort key, name), sorted
    _complete: bool = True  # the head holds every matching row
    _rows: dict[str, Any] = field(default_factory=dict)  # the head's records by name
    _matching: int = 0
    _total: int = 0
    _made_from: dict[str, tuple[Any, Row]] = field(default_factory=dict)

    def reset(
        self, source: Any, spec: WindowSpec | None = None, target: str | None = None
    ) -> Window:
        """Look at everything: counts, the head, the window."""
        if spec is not None:
            self.spec = spec
        self.target = target
        self._words = filter_words(self.spec.filter)
        self.window = None  # rows depend on the target: format them again
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
        self.window = self._cut()
        return self.window

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

    def _cut(self) -> Window:
        spec = self.spec
        head = self._head[::-1] if spec.reverse else self._head
        page = [self._rows[name] for _, name in head[spec.offset : spec.offset + spec.limit]]
        roots: dict[str, tuple[str, ...]] = {}
        for root in {r.root for r in page if r.root != r.name}:  # parts move with the whole
            roots.update(root_devices_of(self._source.records_of(root)))
        previous = self._made_from if self.window is not None else {}
        made: dict[str, tuple[Any, Row]] = {}
        rows = []
        for record in page:
            old = previous.get(record.name)
            # an unchanged record keeps its formatted row (formatting is the per-row cost)
            if old is not None and old[0] is record and record.root == record.name:
                row = old[1]
            else:
                row = make_row(record, self.target, roots.get(record.root))
            made[record.name] = (record, row)
            rows.append(row)
        self._made_from = made
        return Window(spec, tuple(rows), self._matching, self._total)

    def update(self, source: Any) -> Delta | None:
        """Bring the window to ``source``; the delta from the previous window, or None."""
        self.records_changed = False
        if self.window is None:
            self.reset(source)
            return None
        source = as_source(source)
        previous = self._source
        if source is previous:
            return None
        before = self.window
        changes = source.view_changes(previous) if type(previous) is type(source) else None
        if changes is None:
            self.reset(source, self.spec, self.target)
            self.records_changed = True
        else:
            self._source = source
            if not self._apply(source, changes):
                return None
            self.records_changed = True
            self.window = self._cut()
        after = self.window
        delta = diff_windows(before, after)
        if delta.empty and before.matching == after.matching and before.total == after.total:
            return None
        return delta

    def _apply(self, source: Any, changes: dict[str, tuple[list[Any], list[Any]]]) -> bool:
        """Move the changed names' records out of and into the head and the counts; whether
        any record changed."""
        sort, reverse, words = self.spec.sort, self.spec.reverse, self._words
        head, rows, counts = self._head, self._rows, self.counts
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
                        del head[index]
            for record in new:
                if words and not matches(record, words):
                    continue
                self._matching += 1
                item = (sort_key(record, sort), record.name)
                if self._complete or (head and (item > head[0] if reverse else item < head[-1])):
                    insort(head, item)
                    rows[record.name] = record
        if not changed:
            return False
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
        return True

    def retarget(self, target: str | None) -> Window:
        self.target = target
        self.window = None
        # (never ``self._source or []``: an Inventory's truth value counts every record)
        return self.reset(self._source if self._source is not None else [], self.spec, target)


def with_spec(spec: WindowSpec, **changes: Any) -> WindowSpec:
    return replace(spec, **changes)


__all__ = [
    "Action",
    "COLUMNS",
    "Delta",
    "DeviceBar",
    "Header",
    "LiveWindow",
    "Row",
    "SORTS",
    "Target",
    "Window",
    "WindowSpec",
    "apply_delta",
    "diff_windows",
    "header",
    "make_row",
    "move_selected_action",
    "natural_key",
    "sort_key",
    "window",
]
