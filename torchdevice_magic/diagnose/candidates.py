"""Candidates: what a device error could involve, and what the scan says about each.

A candidate is a name (in the cell, a frame, a module attribute, or an expression no variable
holds) with its :class:`CandidateFacts`: its category, its bytes per device, its dtype, where its model
parameters are. The :class:`Collector` asks :func:`~torchdevice_magic.scan.scan` (the one walker)
about all of them at once and keeps no reference to them afterwards. Also here: the small
device-string helpers every later step uses (on target, a target normalised, a device quoted as
Python); whether two strings name the same device is :func:`torchdevice_magic.devices.same_device`.
"""

from __future__ import annotations

import builtins
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import objects
from ..devices import same_device
from ..scan import scan
from ..units import device_sort_key
from .cells import Cell, Creation
from .vocabulary import normalize_device


def loaded_torch() -> Any:
    return sys.modules.get("torch")


@dataclass
class CandidateFacts:
    """What the scan said about one candidate (no reference to it is kept afterwards)."""

    kind: str
    category: str  # "tensor" | "module" | "optimizer" | "container" | "object" | "expression"
    by_device: dict[str, int]  # needed bytes per device (meta: what it would need)
    actual: int
    dtype: str | None = None
    trainable_leaf: bool = False
    #: a trainable leaf an optimizer bound to a name updates: it must keep its identity
    optimized: bool = False
    is_parameter: bool = False
    container: str | None = None  # "list" | "tuple" | "dict"
    all_tensors: bool = True
    meta_params: bool = False
    #: bytes of model parameters per device (module: its own; optimizer: its params'), which
    #: decide where things should go: data follows the model, optimizer state its parameters
    anchor: dict[str, int] = field(default_factory=dict)
    #: for an object holding modules (``trainer.model``): (attribute path, devices) of each
    modules: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: an object that moves as a whole with its own ``.to(device)`` (a tokenizer's
    #: BatchEncoding, a library's input class): ``x = x.to(device)`` moves it
    moves_itself: bool = False

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(sorted(self.by_device, key=device_sort_key))

    @property
    def needed(self) -> int:
        return sum(self.by_device.values())

    @property
    def has_meta_data(self) -> bool:
        return "meta" in self.by_device and self.category != "expression"


@dataclass
class Candidate:
    name: str
    where: str  # "cell" | "frame <func>" | "line <n>" | "attribute <Class>"
    obj_id: int
    info: CandidateFacts
    order: int
    label: str = ""
    alias: str | None = None
    loop_var: bool = False
    covered: bool = False  # a container whose failing item is itself a candidate
    shares: frozenset[str] = frozenset()  # labels of other candidates sharing storage
    creation: Creation | None = None  # for "expression" candidates
    src_cell: Cell | None = None  # for an expression in a function: that function's source
    lineno: int | None = None
    owner: str | None = None  # for "attribute": the module's namespace name (or None)
    owner_id: int | None = None  # for "attribute": id() of that module, until it is named
    attr: str | None = None
    cls: Any = None  # for "attribute": the module's class (dropped after the fix is made)
    #: a local a Module method made itself (``h0 = torch.zeros(...)`` in forward()), read by
    #: the failing line: its code (dropped after the fix is made) and the method's tensor
    #: arguments as (name, id), to make it on an argument's device
    code: Any = None
    tensor_args: tuple[tuple[str, int], ...] = ()
    made_here: bool = False
    root_name: str | None = None  # for "attribute": the namespace module holding its owner
    siblings: int = 0  # for "attribute": modules of the owner's class with the same attribute
    module_method: bool = False  # a local of a Module method (forward)
    #: a local of a third-party library's frame: where (``pkg/mod.py:42``) -- the user cannot
    #: edit that line, only work around it
    library: str = ""
    #: a method's argument: its position among the parameters (``self`` is 0)
    arg_position: int | None = None
    #: a module's non-persistent buffer left on meta (no state dict holds it)
    unsaved_buffer: bool = False
    #: for "attribute": a plain list/tuple/dict of modules (``self.heads = []``)
    holds_modules: bool = False


def is_type(obj: Any, cls: Any) -> bool:
    try:
        return issubclass(type(obj), cls)
    except Exception:
        return False


_ATTR_PATH = re.compile(r"(\.[A-Za-z_]\w*)+")


def needed_by_device(record: Any) -> dict[str, int]:
    by_device = {d: int(n) for d, n in dict(record.bytes_by_device).items()}
    if record.kind == "module":
        # a module's figure is its own data, gradients apart, as in the table (data_bytes())
        for d, grad in dict(record.grad_bytes_by_device).items():
            by_device[d] = max(by_device.get(d, 0) - int(grad), 0)
    if "meta" in record.devices:
        extra = max(0, int(record.would_need_bytes) - int(record.bytes))
        by_device["meta"] = by_device.get("meta", 0) + extra
    return by_device


def facts_from_records(
    records: list[Any], label: str, obj: Any, torch: Any
) -> CandidateFacts | None:
    """What the scan's records of one candidate (its label's records) say about it."""
    if not records:
        return None
    if len(records) == 1 and records[0].name == label:
        r = records[0]
        reader = _ONE_RECORD.get(r.kind)
        if reader is not None:
            return reader(r, obj)
        if not r.devices:
            return None
    return _holder_facts(records, label, obj, torch)


def _tensor_facts(r: Any, obj: Any) -> CandidateFacts | None:
    leaf = False
    try:
        leaf = bool(obj.requires_grad) and bool(obj.is_leaf)
    except Exception:
        leaf = False
    return CandidateFacts(
        kind=r.type,
        category="tensor",
        by_device=needed_by_device(r),
        actual=int(r.bytes),
        dtype=r.dtype,
        trainable_leaf=leaf,
        is_parameter=r.kind == "parameter",
    )


def _module_facts(r: Any, obj: Any) -> CandidateFacts | None:
    by_device = needed_by_device(r)
    # its plain tensor attributes are candidates of their own (the frames name them, with
    # the register_buffer fix): the module is where its parameters and buffers are
    held = {*r.param_bytes, *r.buffer_bytes}
    for device, nbytes in dict(r.plain_bytes).items():
        if device in held:
            by_device[device] = max(by_device.get(device, 0) - int(nbytes), 0)
        else:
            by_device.pop(device, None)
    return CandidateFacts(
        kind=r.type,
        category="module",
        by_device=by_device,
        # the figure the table shows (gradients apart), less its plain tensor attributes
        actual=max(r.data_bytes() - sum(r.plain_bytes.values()), 0),
        meta_params="meta" in by_device,
        anchor=dict(by_device),
    )


def _optimizer_facts(r: Any, obj: Any) -> CandidateFacts | None:
    by_device = {d: 0 for d in r.param_devices}
    held = False
    for d, n in dict(r.state_bytes or r.bytes_by_device).items():
        # the 0-dim ``step`` counters torch keeps on the CPU for state on an accelerator are
        # not state in the wrong place: only the devices the row names count
        if d in r.devices:
            by_device[d] = by_device.get(d, 0) + int(n)
            held = True
    if not held:
        return None  # no state (yet): nothing of its own on any device, never a culprit
    return CandidateFacts(
        kind=r.type,
        category="optimizer",
        by_device=by_device,
        actual=int(r.bytes),
        anchor={d: 0 for d in r.param_devices},
    )


#: A candidate that is one record: how to read each kind of record.
_ONE_RECORD: dict[str, Callable[[Any, Any], CandidateFacts | None]] = {
    "tensor": _tensor_facts,
    "parameter": _tensor_facts,
    "module": _module_facts,
    "optimizer": _optimizer_facts,
}


def _holder_facts(records: list[Any], label: str, obj: Any, torch: Any) -> CandidateFacts | None:
    """A container (its tensor elements, or one aggregated record) or another object holding
    tensors."""
    by_device: dict[str, int] = {}
    actual = 0
    count = 0
    for r in records:
        if not r.devices:
            continue
        for d, n in needed_by_device(r).items():
            by_device[d] = by_device.get(d, 0) + n
        actual += int(r.bytes)
        count += max(1, int(r.element_count or 0)) if r.name == label else 1
    if not by_device:
        return None
    lengths: dict[str, Callable[[Any], int]] = {
        "dict": dict.__len__,
        "list": list.__len__,
        "tuple": tuple.__len__,
    }
    container = next((name for name in lengths if is_type(obj, getattr(builtins, name))), None)
    if container is None:
        return _object_facts(records, label, obj, torch, by_device, actual)
    try:
        size = lengths[container](obj)
    except Exception:
        size = count
    noun = "tensor" if count == 1 else "tensors"
    return CandidateFacts(
        kind=f"{container} of {count} {noun}",
        category="container",
        by_device=by_device,
        actual=actual,
        container=container,
        all_tensors=size == count,
    )


def _object_facts(
    records: list[Any], label: str, obj: Any, torch: Any, by_device: dict[str, int], actual: int
) -> CandidateFacts:
    # PackedSequence and other tensor-holding objects: shown, moved by hand
    packed = getattr(getattr(getattr(torch, "nn", None), "utils", None), "rnn", None)
    packed = getattr(packed, "PackedSequence", None)
    if packed is not None and is_type(obj, packed):
        return CandidateFacts(
            kind="PackedSequence", category="tensor", by_device=by_device, actual=actual
        )
    # any other object holding tensors (a DataLoader's dataset, a trainer): listed only
    # where nothing more direct is on its devices (see core). A trainer's model
    # (``trainer.model``) and optimizer are anchors like a model in the namespace: the
    # batch follows them, not the other way round.
    anchor: dict[str, int] = {}
    modules: list[tuple[str, tuple[str, ...]]] = []
    for r in records:
        suffix = r.name[len(label) :] if r.name.startswith(label) else ""
        if r.kind == "module":
            for d, n in needed_by_device(r).items():
                anchor[d] = anchor.get(d, 0) + n
            if _ATTR_PATH.fullmatch(suffix):
                modules.append((suffix, tuple(r.devices)))
        elif r.kind == "optimizer":
            for d in r.param_devices:
                anchor.setdefault(d, 0)
    return CandidateFacts(
        kind=type(obj).__name__,
        category="object",
        by_device=by_device,
        actual=actual,
        anchor=anchor,
        modules=tuple(modules),
        moves_itself=_has_own_to(obj),
    )


def _has_own_to(obj: Any) -> bool:
    """Whether the object's class defines a ``to`` method (looked up on the class: no
    attribute of the instance is read, so no ``__getattr__`` runs)."""
    try:
        return any(callable(vars(k).get("to")) for k in type(obj).__mro__ if k is not object)
    except Exception:
        return False


class Collector:
    """Gathers candidate objects by id, then asks scan() about all of them at once."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.entries: list[dict[str, Any]] = []
        self.by_id: dict[int, dict[str, Any]] = {}
        # Objects a getattr chain produced may be temporaries; keep them alive until we are
        # done so that no id is reused by another object and mistaken for it.
        self.keepalive: list[Any] = []

    def add(self, name: str, where: str, obj: Any, **extra: Any) -> None:
        if id(obj) in self.by_id or len(self.entries) >= 80:
            return  # the same object seen first in the cell or an outer frame wins
        try:
            tp = type(obj)  # type(), not obj.__class__: nothing of the user's class runs
            if obj is None or issubclass(tp, (int, float, str, bytes, complex, type)):
                return
            if issubclass(tp, types.ModuleType) or (
                callable(obj) and not issubclass(tp, self.torch.nn.Module)
            ):
                return  # functions, classes, modules: no tensors of their own
        except Exception:
            return
        self.keepalive.append(obj)
        entry = {"name": name, "where": where, "obj": obj, **extra}
        self.entries.append(entry)
        self.by_id[id(obj)] = entry

    def candidates(self) -> list[Candidate]:
        labels = {f"c{i}": e["obj"] for i, e in enumerate(self.entries)}
        try:
            inventory = scan(labels)
            records = list(inventory.records)
        except Exception:
            records = []
        by_root: dict[str, list[Any]] = {}
        root_of: dict[str, str] = {}
        for r in records:
            by_root.setdefault(r.root, []).append(r)
            root_of[r.name] = r.root
        out: list[Candidate] = []
        for i, e in enumerate(self.entries):
            label = f"c{i}"
            info = facts_from_records(by_root.get(label, []), label, e["obj"], self.torch)
            if info is None:
                continue
            shares = set()
            for r in by_root.get(label, []):
                for other in r.shares_with:
                    root = root_of.get(other, other)
                    if root != label:
                        shares.add(root)
            out.append(
                Candidate(
                    e["name"],
                    e["where"],
                    id(e["obj"]),
                    info,
                    order=i,
                    label=label,
                    loop_var=e.get("loop_var", False),
                    shares=frozenset(shares),
                    owner_id=e.get("owner"),
                    attr=e.get("attr"),
                    cls=e.get("cls"),
                    code=e.get("code"),
                    made_here=e.get("code") is not None,
                    module_method=e.get("module_method", False),
                    tensor_args=e.get("tensor_args", ()),
                    library=e.get("library", ""),
                    holds_modules=e.get("holds_modules", False),
                    arg_position=e.get("arg_position"),
                )
            )
        return out


def mark_optimized(candidates: list[Candidate], namespace: Any, torch: Any) -> None:
    """Mark the trainable leaves an optimizer bound to a name updates (their fix must keep
    the object: ``w = w.to(dev)`` would leave the optimizer training the old ``w``)."""
    leaves = [c for c in candidates if c.info.trainable_leaf]
    if not leaves:
        return
    try:
        optimizers = [v for v in list(namespace.values()) if isinstance(v, torch.optim.Optimizer)]
        optimized = {id(p) for opt in optimizers for p in objects.optimizer_params(opt)}
    except Exception:
        return  # a namespace that cannot be read: the plain fix and its note
    for c in leaves:
        if c.obj_id in optimized:
            c.info.optimized = True


def on_target(devices: tuple[str, ...], target: str) -> bool:
    return bool(devices) and all(same_device(d, target) for d in devices)


def normalize_target(target: str) -> str:
    raw = str(target).strip()
    torch = loaded_torch()
    if torch is not None:
        try:
            return str(torch.device(raw.lower()))
        except Exception:
            pass
    return normalize_device(raw)


def quote_device(device: str) -> str:
    return '"' + device.replace('"', "") + '"'


def expression_candidates(
    creations: Any,
    missing: Any,
    where: str,
    offset: int,
    lineno: int,
    src_cell: Cell | None = None,
) -> list[Candidate]:
    """Candidates for the unnamed tensors a line makes on one of the ``missing`` devices (an
    expression in the cell, ``offset`` 0, or in a function's line, ``offset`` 100: its
    candidates come after the cell's)."""
    found = []
    for n, creation in enumerate(creations):
        dev = creation.device
        if dev is None or not any(same_device(normalize_target(dev), m) for m in missing):
            continue
        info = CandidateFacts(
            kind="expression",
            category="expression",
            by_device={normalize_target(dev): 0},
            actual=0,
        )
        found.append(
            Candidate(
                creation.text,
                where,
                -1 - offset - n,
                info,
                order=10_000 + offset + n,
                creation=creation,
                lineno=lineno,
                src_cell=src_cell,
            )
        )
    return found
