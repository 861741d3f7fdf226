"""Facts about tensors, for the scan (:mod:`.scanner`): what a tensor or a batch of tensors is
(device, dtype, shape, storage key and bytes, gradient), read the fast way (``map`` over
unbound methods and ``attrgetter``s, so the per-tensor loop runs in C: :class:`_TensorFacts`
for a plain tensor or Parameter) or the careful way (any layout, subclass or device:
:func:`_tensor_record`), and byte sums over storages counted once.

Pure core: no IPython, no ipywidgets, and torch is never imported here (its classes come from
:class:`.objects.TorchTypes`, which exists only once the user imported torch). Facts are
numbers, strings, dtypes, shapes and storage keys: nothing here keeps a tensor alive.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress, repeat
from math import prod
from operator import attrgetter, itemgetter, methodcaller
from typing import Any, NamedTuple

from .. import objects
from ..objects import StorageKey, Storages, TorchTypes
from ..records import Record
from ..units import device_sort_key
from .shards import dtensor_note

# --------------------------------------------------------------------------------------------
# Facts about tensors


class _Grad(NamedTuple):
    key: StorageKey
    device: str
    nbytes: int


class _TensorFacts(NamedTuple):
    """A plain tensor or Parameter bound to a name: the common case, kept compact. A Record
    costs more to build than reading the tensor, and most scans (the hook's, after every cell)
    never look at records of tensors nobody changed, so records are built only when asked."""

    id: int
    type: type
    device: str
    dtype: Any
    shape: tuple[int, ...]
    requires_grad: bool
    key: StorageKey
    nbytes: int
    grad: _Grad | None


_get_device = attrgetter("device")
_get_dtype = attrgetter("dtype")
_get_shape = attrgetter("shape")
_get_requires_grad = attrgetter("requires_grad")
_get_grad = attrgetter("grad")
_data_ptr = methodcaller("data_ptr")


_is_cpu = attrgetter("is_cpu")
_first = itemgetter(0)
_second = itemgetter(1)


def _device_names_of(T: TorchTypes, tensors: list[Any]) -> list[str]:
    """Each tensor's device name. ``is_cpu`` first (a bool torch keeps, where ``.device``
    makes a new ``torch.device`` per tensor): a CPU-only batch is decided without one."""
    count = len(tensors)
    if count > 4 and False not in map(_is_cpu, tensors):
        return ["cpu"] * count
    devices = list(map(_get_device, tensors))
    if count > 64:
        unique = set(devices)
        if len(unique) == 1:  # the usual namespace: one device, one name
            return [T.device_name(unique.pop())] * count
    try:
        return list(map(T.device_names.__getitem__, devices))
    except KeyError:
        return [T.device_name(device) for device in devices]


def _read_storages(
    T: TorchTypes, tensors: list[Any], devices: list[str], into: Storages
) -> list[int]:
    """Each tensor's storage bytes, with its key added to ``into``.

    Column-wise (``map`` over unbound methods) so the loop runs in C: this is the scan's hot
    path. Any tensor without a plain storage sends the whole batch down the careful path.
    """
    try:
        storages = list(map(T.Tensor.untyped_storage, tensors))
        pointers = list(map(T.UntypedStorage.data_ptr, storages))
        sizes = list(map(T.UntypedStorage.nbytes, storages))
    except Exception:
        return [objects.add_storages(T, t, d, into) for t, d in zip(tensors, devices, strict=True)]
    if 0 in pointers:  # meta, empty and wrapper-device storages have no data pointer
        return [objects.add_storages(T, t, d, into) for t, d in zip(tensors, devices, strict=True)]
    into.update(zip(zip(devices, pointers), zip(devices, sizes)))  # noqa: B905 - same lengths
    return sizes


def _sizes_by_device(
    T: TorchTypes, tensors: list[Any], devices: list[str]
) -> list[tuple[str, dict[int, int]]] | None:
    """(device, {storage pointer: nbytes}) per device (each storage once) of tensors with data
    pointers on a few devices (Adam on a GPU: state there, ``step`` counters on the CPU); None
    otherwise (then :func:`_read_storages` keys them the careful way)."""
    if not devices:
        return None
    first = devices[0]
    if devices.count(first) == len(devices):
        groups = [(first, tensors)]
    else:
        names = set(devices)
        if len(names) > 4:
            return None
        groups = [
            (name, list(compress(tensors, map(str.__eq__, devices, repeat(name)))))
            for name in sorted(names, key=device_sort_key)
        ]
    found = []
    try:
        for device, group in groups:
            storages = list(map(T.Tensor.untyped_storage, group))
            pointers = list(map(T.UntypedStorage.data_ptr, storages))
            if 0 in pointers:
                return None
            sizes = map(T.UntypedStorage.nbytes, storages)
            found.append((device, dict(zip(pointers, sizes))))  # noqa: B905 - same lengths
    except Exception:
        return None
    return found


def _grad_facts(T: TorchTypes, tensor: Any) -> _Grad | None:
    # .grad of a non-leaf tensor makes torch warn: only leaves (or retain_grad) have one
    if not (tensor.is_leaf or tensor.retains_grad):
        return None
    grad = tensor.grad
    if grad is None:
        return None
    into: Storages = {}
    device = T.device_name(grad.device)
    objects.add_storages(T, grad, device, into)
    key, (_, nbytes) = next(iter(into.items()))
    return _Grad(key, device, nbytes)


def _plain_tensor_facts(T: TorchTypes, tensor: Any, tp: type) -> _TensorFacts | None:
    """Facts of a strided tensor or Parameter, or None when it needs the careful path."""
    try:
        device_object = tensor.device
        device = T.device_names.get(device_object) or T.device_name(device_object)
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if not pointer and device != "meta":
            return None  # empty, or a wrapper device: the careful path keys it
        key = (device, pointer) if pointer else (device, "impl", storage._cdata)
        requires_grad = tensor.requires_grad
        return _TensorFacts(
            id(tensor),
            tp,
            device,
            tensor.dtype,
            tuple(tensor.shape),  # a plain tuple of ints: the collector stops tracking it
            requires_grad,
            key,
            storage.nbytes(),
            _grad_facts(T, tensor) if requires_grad else None,
        )
    except Exception:
        return None


def _column_like(T: TorchTypes, entry: Any) -> bool:
    """Whether an entry is what a full scan puts in the columns: an exact tensor without
    gradients, with a data pointer (meta and wrapper storages are keyed otherwise)."""
    return (
        type(entry) is _TensorFacts
        and entry.type is T.Tensor
        and not entry.requires_grad
        and entry.grad is None
        and type(entry.key[1]) is int
    )


def _facts_storages(facts: _TensorFacts) -> Storages:
    storages = {facts.key: (facts.device, facts.nbytes)}
    grad = facts.grad
    if grad is not None:
        storages[grad.key] = (grad.device, grad.nbytes)
    return storages


def _facts_record(T: TorchTypes, name: str, facts: _TensorFacts, root: str | None = None) -> Record:
    device = facts.device
    actual = 0 if device == "meta" else facts.nbytes
    grad = facts.grad
    grad_bytes = 0 if grad is None or grad.device == "meta" else grad.nbytes
    return Record(
        name,
        root or name,
        "parameter" if facts.type is T.Parameter else "tensor",
        facts.type.__name__,
        (device,),
        T.dtype_name(facts.dtype),
        facts.shape,
        prod(facts.shape),
        actual,
        facts.nbytes,
        facts.requires_grad,
        grad_bytes,
        {device: actual},
        movable=device != "meta",
        movable_reason="meta tensors hold no data" if device == "meta" else "",
    )


def _special_note(T: TorchTypes, tensor: Any, tp: type) -> str:
    """A short note for layouts and subclasses that behave differently from plain tensors."""
    try:
        if objects.is_fake(T, tensor):
            return "fake tensor (no data)"
        if tp.__name__ == "DTensor":
            return dtensor_note(tensor)
        layout = tensor.layout
        if str(layout) != "torch.strided":
            return str(layout).removeprefix("torch.")
        if getattr(tensor, "is_nested", False) is True:
            return "nested"
        if tensor.is_quantized:
            return "quantized"
    except Exception:
        return "unusual tensor"
    return ""


def _dtensor_local(tensor: Any) -> Any:
    local = getattr(tensor, "_local_tensor", None)
    return local if local is not None else tensor


def _tensor_record(
    T: TorchTypes, tensor: Any, tp: type, name: str, root: str, storages: Storages
) -> Record:
    """The careful path: any tensor, whatever its layout, subclass or device."""
    if objects.is_uninitialized(T, tensor):
        return Record(
            name,
            root,
            "parameter" if T.Parameter in tp.__mro__ else "tensor",
            tp.__name__,
            (),
            note="uninitialized (lazy module: run a forward pass first)",
            movable=False,
            movable_reason="an uninitialized lazy parameter has no data yet",
        )
    device = T.device_name(tensor.device)
    note = _special_note(T, tensor, tp)
    measured = _dtensor_local(tensor) if tp.__name__ == "DTensor" else tensor
    if note == "fake tensor (no data)":
        needed = objects.unusual_storages(T, measured, device, storages)
    else:
        needed = objects.add_storages(T, measured, device, storages)
    grad_bytes = 0
    requires_grad = tensor.requires_grad
    if requires_grad:
        grad = _grad_facts(T, tensor)
        if grad is not None:
            storages[grad.key] = (grad.device, grad.nbytes)
            grad_bytes = 0 if grad.device == "meta" else grad.nbytes
    try:
        shape = tuple(tensor.shape)
        numel = tensor.numel()
    except Exception:  # nested tensors have no single shape
        shape, numel = None, 0
    actual = 0 if device == "meta" or note == "fake tensor (no data)" else needed
    return Record(
        name,
        root,
        "parameter" if T.Parameter in tp.__mro__ else "tensor",
        tp.__name__,
        (device,),
        T.dtype_name(tensor.dtype),
        shape,
        numel,
        actual,
        needed,
        requires_grad,
        grad_bytes,
        {device: actual},
        note=note,
        movable=device != "meta",
        movable_reason="meta tensors hold no data" if device == "meta" else "",
    )


def bytes_by_device(
    storages: Mapping[StorageKey, tuple[str, int]], *, list_meta: bool = True
) -> dict[str, int]:
    """{device: bytes} of ``storages`` (each counted once): the one rule for bytes per
    device, used by the scan and by the memory accounting. Meta storages occupy nothing: the
    meta device is listed at 0 bytes (the devices an inventory's objects are on), or left out
    with ``list_meta=False`` (an account of memory in use: holders, the per-cell timeline),
    which also leaves out ``"disk"`` (accelerate's memory-mapped offload files, not memory)."""
    by_device = _sum_by_device(storages, list_meta)
    if not list_meta and "disk" in by_device:
        del by_device["disk"]
    return by_device


def _sum_by_device(
    storages: Mapping[StorageKey, tuple[str, int]], list_meta: bool
) -> dict[str, int]:
    values = storages.values()
    if len(values) < 16:  # small: a plain loop beats building columns
        by_device: dict[str, int] = {}
        for device, nbytes in values:
            if device != "meta":
                by_device[device] = by_device.get(device, 0) + nbytes
            elif list_meta:
                by_device[device] = 0
        return by_device
    devices = list(map(_first, values))
    kinds = list(dict.fromkeys(devices))  # in the order first seen
    if len(kinds) == 1:  # one device (the usual case): summed in C
        (device,) = kinds
        if device != "meta":
            return {device: sum(map(_second, values))}
        return {device: 0} if list_meta else {}
    sizes = list(map(_second, values))
    return {
        d: 0 if d == "meta" else sum(compress(sizes, map(d.__eq__, devices)))
        for d in kinds
        if list_meta or d != "meta"
    }


def _needed_bytes(storages: Mapping[StorageKey, tuple[str, int]]) -> int:
    """What the storages hold (what they would need, for meta)."""
    return sum(map(_second, storages.values()))
