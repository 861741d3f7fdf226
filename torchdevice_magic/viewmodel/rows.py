"""Rows: what one record looks like in every table -- its one size figure (gradients apart),
shape text, status, what its button does or why it cannot -- and the sort keys every view
sorts by (size by real bytes, names naturally: ``x2`` before ``x10``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from heapq import nlargest, nsmallest
from itertools import compress, repeat
from operator import add, and_, getitem, lshift
from typing import Any

from ..devices import full_device_name, same_device
from ..records import KEEPS_NO_STATE, NO_STATE_YET
from ..units import device_sort_key, format_bytes

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


def natural_keys(names: Sequence[str]) -> list[tuple[Any, ...]]:
    """``[natural_key(n) for n in names]`` for many names at once (the plain tensors of a big
    namespace, when a window opens): the common shape -- letters and underscores, then
    digits (``t123``, ``layer_10``) -- made column-wise by ``map`` in C, the rest one by one.
    Not cached: it costs about what looking 100,000 names up in the cache would."""
    lowers = list(map(str.lower, names))
    prefixes = list(map(str.rstrip, lowers, repeat("0123456789")))
    runs: list[str] = list(map(getitem, lowers, map(slice, map(len, prefixes), repeat(None))))
    letters = map(str.isalpha, map(str.replace, prefixes, repeat("_"), repeat("")))
    fast = list(map(and_, map(bool, runs), letters))
    parts = zip(compress(prefixes, fast), map(int, compress(runs, fast)), repeat(""))  # noqa: B905
    made = zip(parts, compress(names, fast), strict=True)
    if False not in fast:
        return list(made)
    return [next(made) if quick else natural_key(name) for quick, name in zip(fast, names)]  # noqa: B905


def natural_first(names: Sequence[str], wanted: int, last: bool = False) -> list[int]:
    """The positions of the ``wanted`` first ``names`` in :func:`natural_key` order (the last,
    when ``last``), in no particular order: the edge of a window among many rows tied on
    size. Keys are made only for a few names: those of the common shape -- letters and
    underscores, then digits or none (``t123``, ``layer_10``, ``x``) -- are first placed by
    one int each, column-wise (their prefix's rank above their number; ``x`` and ``x0`` tie):
    an order that natural keys refine and never contradict. Keys are made for the names
    tied on that int at the edge and for the names of other shapes."""
    count = len(names)
    if wanted <= 0:
        return []
    if wanted >= count:
        return list(range(count))
    # lowercasing leaves the trailing digits alone: the prefixes are lowered once each
    prefixes = list(map(str.rstrip, names, repeat("0123456789")))
    runs = list(map(str.removeprefix, names, prefixes))
    distinct = {prefix: prefix.lower() for prefix in set(prefixes)}
    ranks = {lower: rank for rank, lower in enumerate(sorted(set(distinct.values())))}
    rank_of = {p: ranks[low] for p, low in distinct.items() if p.replace("_", "").isalpha()}
    placed: list[int] = list(range(count))
    others: list[int] = []
    if len(rank_of) < len(distinct):
        common = list(map(rank_of.__contains__, prefixes))
        placed = list(compress(placed, common))
        others = [i for i, quick in enumerate(common) if not quick]
        prefixes, runs = list(compress(prefixes, common)), list(compress(runs, common))
    try:
        numbers = list(map(int, runs))
    except ValueError:  # a name without digits: 0, as its prefix followed by 0
        numbers = list(map(int, map(add, repeat("0"), runs)))
    order = numbers
    if len(rank_of) > 1:
        shift = max(map(int.bit_length, numbers), default=0)
        ranked = map(lshift, map(rank_of.__getitem__, prefixes), repeat(shift))
        order = list(map(add, ranked, numbers))
    pick = nlargest if last else nsmallest
    sure = placed
    tied: list[int] = []
    if len(placed) > wanted:
        edge = pick(wanted, order)[-1]
        sure = list(compress(placed, map(edge.__lt__ if last else edge.__gt__, order)))
        tied = list(compress(placed, map(edge.__eq__, order)))
    if not others:  # every name placed by its int: only the tie at the edge needs keys
        rest = tied
        wanted -= len(sure)
    else:  # names of other shapes may sort anywhere: keys for every name that may be in
        rest, sure = sure + tied + others, []
    keys = natural_keys([names[i] for i in rest])
    return sure + [i for _, i in pick(wanted, zip(keys, rest))]  # noqa: B905


def sort_key(record: Any, sort: str) -> tuple[Any, ...]:
    """Every view sorts with this: size by the real bytes (biggest first), then name."""
    if sort == "size":
        return (-record.data_bytes(), -record.would_need_bytes, natural_key(record.name))
    if sort == "device":
        return (
            tuple(map(device_sort_key, record.row_devices)),
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
    mixed: bool  # its data spans several devices (the sidebar marks its device)
    #: held only by IPython's output history (``Out[2]``, ``_``): listed, outside the totals,
    #: never moved (the sidebar dims the row)
    hidden: bool

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
            "mixed": self.mixed,
            "hidden": self.hidden,
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
        # a fake tensor on a real device holds no data there either
        where = "meta" if "meta" in record.devices else "no data"
        return f"0 B ({where}; needs {format_bytes(record.would_need_bytes - record.grad_bytes)})"
    text = format_bytes(own)
    extra = record.would_need_bytes - record.bytes
    if extra > 0:  # some parts on meta: say what they would need
        text += f" (+{format_bytes(extra)} on meta)"
    return text


def _device_name(name: str) -> str:
    """A device's full name (:func:`~torchdevice_magic.devices.full_device_name`)."""
    return full_device_name(name)


def _same_device(device: str, target: str) -> bool:
    """The one "same device" rule (:func:`~torchdevice_magic.devices.same_device`)."""
    return same_device(device, target)


def row_action(
    record: Any, target: str | None, root_devices: Sequence[str] | None = None
) -> Action:
    """What this row's button does for ``target``, or why it cannot do anything."""
    label = f"→ {target}" if target else "→"
    if record.hidden:
        return Action(False, label, f"{record.name} is held only by IPython's output history")
    if record.kind == "optimizer" and not record.bytes and not record.devices:
        why = KEEPS_NO_STATE if record.note == KEEPS_NO_STATE else f"has {NO_STATE_YET}"
        return Action(False, label, f"{record.name} {why}; its parameters move with their module")
    if not record.movable:
        why = in_words(record.note) if record.note else "it holds no data to move"
        return Action(False, label, f"{record.name} cannot be moved: {why}")
    if not target:
        return Action(False, label, "no target device is available")
    devices = tuple(root_devices) if root_devices is not None else record.devices
    if not devices:
        return Action(False, label, f"{record.root} holds no tensors")
    stays = loader_data_words(record.loader_data_stays)
    whole = f"all of it but {stays}" if stays else "all of it"
    if all(_same_device(d, target) for d in devices):
        already = f"{record.root} is already on {target}"
        return Action(False, label, f"{already} ({whole})" if stays else already)
    if record.root != record.name:
        sep = "; " if stays else ", "
        return Action(
            True, label, f"Move {record.root} ({whole}{sep}not just {record.name}) to {target}"
        )
    if stays:
        return Action(True, label, f"Move {record.name} ({whole}) to {target}")
    return Action(True, label, f"Move {record.name} to {target}")


def loader_data_words(stays: Sequence[tuple[str, Sequence[str]]]) -> str:
    """``trainer.loader's data, which stays on cpu``: what a move leaves where it is (a
    DataLoader's data: its batches move in the loop), or ""."""
    if not stays:
        return ""
    devices = sorted({d for _loader, found in stays for d in found}, key=device_sort_key)
    where = f"on {', '.join(devices)}" if devices else "where it is"
    if len(stays) == 1:
        return f"{stays[0][0]}'s data, which stays {where}"
    loaders = ", ".join(loader for loader, _found in stays[:-1])
    return f"the data of {loaders} and {stays[-1][0]}, which stays {where}"


def spans_devices(record: Any) -> bool:
    """The object's own data sits on several devices. An optimizer's state follows its
    parameters, which their module's row already shows."""
    return bool(record.mixed) and record.kind != "optimizer"


def status_text(record: Any) -> str:
    parts = []
    if record.hidden:
        parts.append("held by output history")
    if spans_devices(record):
        parts.append(f"spans {', '.join(record.devices)}")
    if record.note:
        # the "spans ..." part is said above, only for what really spans
        said = [part for part in record.note.split("; ") if not part.startswith("spans ")]
        if said:
            parts.append(in_words("; ".join(said)))
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
        mixed=spans_devices(record),
        hidden=bool(record.hidden),
    )


def root_devices_of(records: Iterable[Any]) -> dict[str, tuple[str, ...]]:
    """For parts of a top-level name (``batch['x']``): the devices of what moves when the
    whole name moves (a part that cannot move, a DataLoader's data say, stays where it is)."""
    found: dict[str, set[str]] = {}
    for record in records:
        if record.root != record.name and record.movable:
            found.setdefault(record.root, set()).update(record.devices)
    return {root: tuple(sorted(d, key=device_sort_key)) for root, d in found.items()}
