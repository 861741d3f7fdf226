"""Planning plain tensors bound to names: one by one (:func:`add_tensor`), or, for the bulk of a
big namespace, queued (:func:`queue_bulk`) and checked together (:func:`finish_bulk`) with C-level
maps instead of per-tensor Python. A tensor that needs care (sharing a storage with anything else
in the move, an autograd leaf with a grad, a view, no storage, a meta source) leaves the bulk
path and is planned one by one, keeping aliases aliases.
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter
from typing import Any

from .. import objects
from .jobs import BulkTensors, Plan, PlannedItem, PutBack, Refused, storage_of
from .places import NAMESPACE
from .plan_modules import move_param_in_place

_DEVICE = attrgetter("device")
_IS_CPU = attrgetter("is_cpu")
_REQUIRES_GRAD = attrgetter("requires_grad")
_GRAD = attrgetter("grad")
_NBYTES = attrgetter("nbytes")


def add_tensor(plan: Plan, name: str, t: Any, dest: Any) -> None:
    """A tensor bound to ``name``: copied, and the name rebound to the copy at commit."""
    sharded = objects.sharded_reason(name, [t])
    if sharded is not None:
        raise Refused(sharded)
    dev = t.device
    if dev == dest:
        plan.skipped.append((name, f"already on {plan.device_label(dest)}"))
        return
    if dev.type == "meta":
        plan.check_meta_source(name, dev, dest, "this tensor")
    to = plan.device_label(dest)
    if plan.trained_in_place(t):  # the optimizer keeps updating this very tensor
        move_param_in_place(plan, name, t, dest)
        snb = storage_of(t)[1]
        plan.items.append(PlannedItem(name, "tensor", t, (plan.device_label(dev),), snb, to, dev))
        return
    snb = plan.add_plain(t, name, dest)
    plan.put_backs.append(PutBack(plan.ns, NAMESPACE, name, t))
    plan.items.append(PlannedItem(name, "tensor", t, (plan.device_label(dev),), snb, to, dev))


def queue_bulk(plan: Plan, name: str, t: Any, dest: Any) -> None:
    """A plain ``torch.Tensor`` bound to a name: checked and planned in bulk by
    :func:`finish_bulk`."""
    bucket = plan.bulk_queue.get(dest)
    if bucket is None:
        bucket = plan.bulk_queue[dest] = ([], [])
    bucket[0].append(name)
    bucket[1].append(t)


def finish_bulk(plan: Plan) -> None:
    """Check the queued bulk tensors; those that need care go through :func:`add_tensor`, the
    rest form :class:`BulkTensors` copied with one C-level map."""
    if not plan.bulk_queue:
        return
    taken = {key for key, _dest in plan.groups} | _module_storage_keys(plan)
    buckets, plan.bulk_queue = plan.bulk_queue, {}
    for dest, (names, tensors) in buckets.items():
        _finish_one_target(plan, dest, names, tensors, taken)


def _plan_one_by_one(plan: Plan, name: str, t: Any, dest: Any) -> None:
    plan.guarded(name, add_tensor, plan, name, t, dest)


def _finish_one_target(
    plan: Plan, dest: Any, names: list[str], tensors: list[Any], taken: set[Any]
) -> None:
    torch = plan.torch
    if all(map(_IS_CPU, tensors)):  # the common case, without a device object each
        cpu = torch.device("cpu")
        devices = [cpu] * len(tensors)
        distinct = {cpu}
    else:
        devices = list(map(_DEVICE, tensors))
        distinct = set(devices)
    if dest in distinct or (dest.type != "meta" and any(d.type == "meta" for d in distinct)):
        names, tensors, devices = _drop_what_does_not_copy(plan, dest, names, tensors, devices)
        distinct = set(devices)
    if not names:
        return
    try:
        storages = list(map(torch.Tensor.untyped_storage, tensors))
    except Exception:  # sparse and other storage-less tensors: one by one
        for name, t in zip(names, tensors, strict=True):
            _plan_one_by_one(plan, name, t, dest)
        return
    keys = _storage_keys(plan, tensors, devices, storages, distinct)
    special = _needing_care(tensors, keys, taken)
    if special:
        for i in sorted(special):
            _plan_one_by_one(plan, names[i], tensors[i], dest)
        keep = [i for i in range(len(names)) if i not in special]
        names = [names[i] for i in keep]
        tensors = [tensors[i] for i in keep]
        devices = [devices[i] for i in keep]
        storages = [storages[i] for i in keep]
        keys = [keys[i] for i in keep]
    if names:
        nbytes = list(map(_NBYTES, tensors))  # what .to() allocates for each
        bulk = BulkTensors(dest, names, tensors, devices, storages, keys, nbytes)
        bulk.distinct = distinct if not special else set(devices)
        plan.bulk.append(bulk)


def _storage_keys(
    plan: Plan, tensors: list[Any], devices: list[Any], storages: list[Any], distinct: set[Any]
) -> list[Any]:
    """THE storage identity (objects/storage.py) of each tensor, as :func:`storage_of` gives
    it, built with C-level maps where every storage has a data pointer (the common case)."""
    try:
        pointers = list(map(plan.torch.UntypedStorage.data_ptr, storages))
    except RuntimeError:  # a backend whose storages have no readable pointer (lazy)
        pointers = [0]
    if 0 in pointers:  # empty or pointer-less storages: the general rule, one by one
        return [objects.storage_identity(plan.T, t).key for t in tensors]
    if len(distinct) == 1:
        return list(zip(repeat(plan.device_label(next(iter(distinct)))), pointers))
    return list(zip(map(plan.device_label, devices), pointers, strict=True))


def _drop_what_does_not_copy(
    plan: Plan, dest: Any, names: list[str], tensors: list[Any], devices: list[Any]
) -> tuple[list[str], list[Any], list[Any]]:
    """Tensors already on ``dest`` are skipped; meta sources go one by one (refused when
    named, skipped with the reason otherwise); the rest stay in the bulk."""
    label = plan.device_label(dest)
    keep_names, keep_tensors, keep_devices = [], [], []
    for name, t, dev in zip(names, tensors, devices, strict=True):
        if dev == dest:
            plan.skipped.append((name, f"already on {label}"))
        elif dev.type == "meta":
            _plan_one_by_one(plan, name, t, dest)
        else:
            keep_names.append(name)
            keep_tensors.append(t)
            keep_devices.append(dev)
    return keep_names, keep_tensors, keep_devices


def _needing_care(tensors: list[Any], keys: list[Any], taken: set[Any]) -> set[int]:
    """Indices of tensors the bulk copy would get wrong: autograd tensors (leaves with grads,
    graphs; never ``.grad`` of those), tensors with a grad, and tensors sharing a storage with
    another one in the move."""
    special: set[int] = set()
    flags = list(map(_REQUIRES_GRAD, tensors))
    if True in flags:
        special.update(i for i, f in enumerate(flags) if f)
        plain = [t for t, f in zip(tensors, flags, strict=True) if not f]
    else:
        plain = tensors
    if list(map(_GRAD, plain)).count(None) != len(plain):
        special.update(i for i, t in enumerate(tensors) if i not in special and t.grad is not None)
    # (A view whose base is not in the move is fine here: .to() copies just the view.
    # A view whose base, or another view of it, is in the move shares its key.)
    if len(set(keys)) != len(keys) or not taken.isdisjoint(keys):
        seen: dict[Any, int] = {}
        for i, key in enumerate(keys):
            if key in taken:
                special.add(i)
            elif key in seen:
                special.update((i, seen[key]))
            else:
                seen[key] = i
    return special


def _module_storage_keys(plan: Plan) -> set[Any]:
    keys: set[Any] = set()
    for job in plan.modules.values():
        for record in job.params:
            for t in (record.data, record.grad_data):
                if t is not None:
                    keys.add(storage_of(t)[0])
        keys.update(buffer.storage_key for buffer in job.buffers)
    return keys
