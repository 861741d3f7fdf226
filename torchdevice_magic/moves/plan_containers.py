"""Planning containers and objects holding tensors (lists, dicts, tuples, dataclasses,
``trainer.model``...): their tensors are copied and put back where they were found (mutable
holders changed in place, immutable ones rebuilt); modules and optimizers inside move in place
with them. What the one walker finds is what moves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import objects
from ..objects import LOADER_DATA_STAYS, Kind
from .jobs import Plan, PlannedItem, Refused, device_names, storage_of
from .places import ALIAS, Reached
from .plan_modules import add_module, is_parameter, move_param_in_place
from .plan_optimizers import add_optimizer
from .result import MoveError

#: ``target(path, tensor)``: the device a tensor found at ``path`` goes to, or None (stays).
Target = Callable[[tuple[Any, ...], Any], Any]


def _target_for(dest: Any, layout: Any) -> Target:
    """Everything to ``dest``; or (undo, ``dest`` None) each tensor back to the device in
    ``layout`` = ``{path: (id of the tensor the move put there, device before)}``, if it is
    still the tensor the move put there."""
    if layout is None:

        def whole(path: tuple[Any, ...], t: Any) -> Any:
            return dest

        return whole

    def back(path: tuple[Any, ...], t: Any) -> Any:
        was = layout.get(path)
        return was[1] if was is not None and was[0] == id(t) else None

    return back


def skip_part(plan: Plan, name: str, error: Refused) -> None:
    """A part of ``name`` that cannot move (meta data, an accelerate-dispatched model):
    "Move all" leaves that part where it is and moves the rest, as the table marks only
    that part unmovable; named explicitly, the whole move is refused."""
    if plan.explicit:
        raise MoveError(str(error))
    plan.skipped.append((name, str(error)))


class _Found:
    """What the walk found under one name, sorted by what planning does with it."""

    def __init__(self) -> None:
        self.modules: list[Reached] = []
        self.optimizers: list[Reached] = []
        self.aliases: list[Reached] = []
        self.tensors: list[Reached] = []

    def sort(self, found: list[Reached]) -> _Found:
        for r in found:
            if r.kind == Kind.MODULE:
                self.modules.append(r)
            elif r.kind == ALIAS:
                self.aliases.append(r)
            elif r.kind == Kind.OPTIMIZER:
                self.optimizers.append(r)
            else:
                self.tensors.append(r)
        return self


def _nested(plan: Plan, name: str, found: _Found, dest: Any, devices: set[Any]) -> list[Any]:
    """Modules and optimizers inside: moved in place with the container."""
    nested: list[PlannedItem] = []
    for r in found.modules:
        try:
            item = add_module(plan, r.label, r.value, dest, None, listed=False)
        except Refused as e:
            skip_part(plan, name, e)
            continue
        if item is not None:
            nested.append(item)
            devices.update(plan.torch.device(d) for d in item.from_devices)
    for r in found.optimizers:
        before = len(plan.items)
        try:
            add_optimizer(plan, r.label, r.value, None, listed=False)
        except Refused as e:
            skip_part(plan, name, e)
        nested.extend(plan.items[before:])
    return nested


def _in_place(plan: Plan, r: Reached) -> bool:
    """A Parameter, or a plain trainable leaf an optimizer updates: moved in place."""
    return (
        r.kind == Kind.PARAMETER
        or is_parameter(plan.torch, r.value)
        or plan.trained_in_place(r.value)
    )


def _stored_bytes(found: list[Reached]) -> int:
    """Bytes of the tensors found, each storage once."""
    seen: set[Any] = set()
    nbytes = 0
    for r in found:
        if r.kind == Kind.TENSOR or r.kind == Kind.PARAMETER:
            key, snb, _s = storage_of(r.value)
            if key not in seen:
                seen.add(key)
                nbytes += snb
    return nbytes


def add_container(plan: Plan, name: str, obj: Any, dest: Any, layout: Any) -> None:
    """Plan a container or an object holding tensors, modules or optimizers.

    ``layout`` (undo): ``{path: (id of the tensor the move put there, device before)}``."""
    target = _target_for(dest, layout)
    found, walked = plan.reach(name, obj)
    if walked.truncated:
        plan.skip_or_refuse(name, objects.cut_short_reason(name, walked))
        return
    sorted_ = _Found().sort(found)
    devices: set[Any] = set()
    leaves: list[tuple[tuple[Any, ...], Any, Any]] = []
    planned: list[tuple[Reached, Any]] = []
    copied: list[tuple[Reached, Any]] = []  # the planned ones copied (not moved in place)
    skipped_before = len(plan.skipped)
    loaders: dict[str, None] = {}  # the DataLoaders whose data this move leaves, in order
    for r in sorted_.tensors:
        t = r.value
        dev = t.device
        devices.add(dev)
        want = target(r.path, t)
        if want is None or dev == want:
            continue
        if r.loader is not None and dest is not None:
            loaders[r.loader] = None
            continue
        try:
            plan.check_meta_source(name, dev, want, r.label)
        except Refused as e:
            skip_part(plan, name, e)  # (named explicitly: the whole move is refused)
            continue
        planned.append((r, want))
        leaves.append((r.path, t, dev))
        if _in_place(plan, r):  # recorded now: an optimizer inside follows it (below)
            move_param_in_place(plan, r.label, t, want)
        else:
            copied.append((r, want))
    # undo finds nested modules and optimizers on its own
    nested = _nested(plan, name, sorted_, dest, devices) if dest is not None else []
    wants = {w for _r, w in planned}
    for item in nested:
        wants.update(plan.torch.device(d) for d in item.to_device.split(", "))
    if not planned and not nested and loaders:
        plan.skip_or_refuse(name, LOADER_DATA_STAYS)  # (named: refused, saying why)
        return
    plan.skipped.extend((loader, LOADER_DATA_STAYS) for loader in loaders)
    if not planned and not nested:
        if not found:
            plan.skip_or_refuse(name, f"{name} holds no tensors")
        elif len(plan.skipped) == skipped_before:  # else what stays was said already
            where = plan.device_label(dest) if dest is not None else "its original devices"
            plan.skipped.append((name, f"already on {where}"))
        return
    for r, want in copied:
        plan.add_plain(r.value, name, want)
        plan.put_back_chain(r.chain, r.value)
    for r in sorted_.aliases:  # (put back only if it was rebuilt: see transaction.resolve)
        plan.put_back_chain(r.chain, r.value)
    nbytes = _stored_bytes(found) + sum(item.nbytes for item in nested)
    kind = "container" if objects.kind_of(plan.T, obj) in objects.CONTAINERS else "object"
    item = PlannedItem(
        name, kind, obj, device_names(devices), nbytes, ", ".join(device_names(wants)), None
    )
    item.leaves = leaves
    plan.items.append(item)
