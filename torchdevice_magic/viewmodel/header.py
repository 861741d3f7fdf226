"""The header: per-device totals and bars, what the totals include beyond the rows, the move
targets and the default one, and every button's state with its reason."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..records import ColumnRows
from ..units import format_bytes
from .rows import Action, _device_name, _same_device

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
    relative = [t.bytes for t in rows if t.capacity is None and t.device not in ("meta", "disk")]
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
        if total.device == "disk":  # accelerate's offload files: apart from RAM, no bar
            text = f"{format_bytes(total.bytes)} (memory-mapped offload files, not in RAM)"
            bars.append(DeviceBar("disk", total.bytes, text, 0.0))
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


class _Largest:
    """Per group of names sharing storages (a model as ``model`` and as ``trainer.model``, its
    weight also as ``w``): the figures of its records, of which the group counts the largest.
    The same object under two names holds its gradients or its state once, and a parameter's
    gradient is part of its module's."""

    __slots__ = ("total", "_groups")

    def __init__(self) -> None:
        self.total = 0
        self._groups: dict[frozenset[str], dict[int, int]] = {}

    def add(self, record: Any, value: int, sign: int) -> None:
        if not record.shares_with:
            self.total += sign * value
            return
        group = frozenset((record.name, *record.shares_with))
        values = self._groups.setdefault(group, {})
        before = max(values, default=0)
        count = values.get(value, 0) + sign
        if count > 0:
            values[value] = count
        else:
            values.pop(value, None)
        if not values:
            del self._groups[group]
        self.total += max(values, default=0) - before

    def __eq__(self, other: object) -> bool:  # a live tally is checked against a fresh one
        if not isinstance(other, _Largest):
            return NotImplemented
        return self.total == other.total and self._groups == other._groups

    __hash__ = None  # type: ignore[assignment]


@dataclass(slots=True)
class Tally:
    """Sums over the records that the header needs; kept up to date by :class:`LiveWindow`
    (add the records that came, subtract those that went) so a cell costs what it changed."""

    target: str | None = None
    rows: int = 0
    hidden: int = 0
    shared: int = 0
    actionable: int = 0  # rows whose button can move them to ``target``
    #: optimizer state on the cpu that no optimizer row names: the 0-dim ``step`` counters
    #: torch keeps on the CPU for state on an accelerator (the cpu total shows them)
    counters: int = 0
    _grads: _Largest = field(default_factory=_Largest)
    _optim: _Largest = field(default_factory=_Largest)

    @property
    def grads(self) -> int:
        """Bytes of gradients, each object's once however many names reach it."""
        return self._grads.total

    @property
    def optim(self) -> int:
        """Bytes of optimizer state, each optimizer's once however many names reach it."""
        return self._optim.total

    def add(self, records: Iterable[Any], sign: int = 1) -> None:
        target = self.target
        can_move = _mover(target) if target else None
        for record in records:
            self.rows += sign
            if record.hidden:
                self.hidden += sign * record.bytes
            else:
                if record.grad_bytes:
                    self._grads.add(record, record.grad_bytes, sign)
                if record.kind == "optimizer":
                    self._optim.add(record, record.bytes, sign)
                    if record.devices and "cpu" not in record.devices:
                        self.counters += sign * record.bytes_by_device.get("cpu", 0)
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
    """:func:`~.rows._same_device` with ``target`` fixed: its full name made once, so the
    common case (the device spelled as the target is) costs one comparison."""
    full = _device_name(target)

    def same(device: str) -> bool:
        return device == full or _device_name(device) == full

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
    if counts.counters:
        text += (
            f"; {format_bytes(counts.counters)} on the cpu are optimizer step counters, which"
            " torch keeps on the CPU"
        )
    if counts.hidden:
        text += (
            f"; + {format_bytes(counts.hidden)} held by output history (listed, not in the totals)"
        )
    return text + "."


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
    #: facts about the devices themselves, one line each: where the accelerator was first
    #: initialised, what its used memory is made of
    device_notes: tuple[str, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {
            "torch_imported": self.torch_imported,
            "message": self.message,
            "bars": [b.to_wire() for b in self.bars],
            "totals_note": self.totals_note,
            "device_notes": list(self.device_notes),
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
    device_notes: Sequence[str] = (),
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
        device_notes=tuple(device_notes) if inventory.torch_imported else (),
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
