"""Which tensors, modules and optimizers live in a namespace, on which devices, taking how much.

Pure core: no IPython, no ipywidgets, and torch is never imported here — if the user has not
imported torch there is nothing to find. Everything a user object could do to us (properties
that raise, lying ``__len__``, self-referencing containers, generators) is guarded: a hostile
object becomes a skipped name, never an exception.

Memory is counted once per storage, keyed by ``(device, data_ptr)`` (``data_ptr`` is 0 for
meta and empty storages, so those fall back to the StorageImpl address). Views, aliases, tied
weights, a name bound to a module's own Parameter: each storage counts once in the totals.

The scan never keeps a user's tensor alive: an :class:`Inventory` holds numbers and strings,
ids, and weak references to modules and optimizers (never to Parameters: torch's swap-based
``Module._apply`` refuses to swap tensors that have weak references).
"""

from __future__ import annotations

import html
import re
import sys
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from types import MappingProxyType
from typing import Any

from .units import format_bytes

#: IPython's own bookkeeping: never user objects (``Out`` is looked at only with include_hidden).
IPYTHON_NAMES = frozenset(
    {"In", "Out", "_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh", "exit", "quit"}
    | {"get_ipython", "_exit_code"}
)
_IPYTHON_NUMBERED = re.compile(r"_i?\d+\Z")

#: Containers nested deeper than this are not walked (a nested batch is rarely deeper).
MAX_CONTAINER_DEPTH = 3
#: The hard safety cap on elements visited in one container; hitting it is reported.
CONTAINER_ELEMENT_CAP = 100_000
#: A container holding more tensors than this becomes one aggregated record.
AGGREGATE_ABOVE = 16

STEP_NOTE = "0-dim step counters kept on cpu by torch"


def is_ipython_bookkeeping(name: str) -> bool:
    if not name.startswith("_"):
        return name in IPYTHON_NAMES
    return (
        name in IPYTHON_NAMES or name.startswith("__") or _IPYTHON_NUMBERED.match(name) is not None
    )


@dataclass(slots=True)
class Record:
    """One row of the inventory: a top-level name, an element of a small container, or one
    aggregated big container."""

    name: str
    root: str
    kind: str  # "tensor" | "parameter" | "module" | "optimizer" | "container"
    type: str
    devices: tuple[str, ...]
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    numel: int = 0
    bytes: int = 0
    would_need_bytes: int = 0
    requires_grad: bool = False
    grad_bytes: int = 0
    bytes_by_device: dict[str, int] = field(default_factory=dict)
    shares_with: tuple[str, ...] = ()
    hidden: bool = False
    mixed: bool = False
    note: str = ""
    movable: bool = True
    # modules
    param_count: int = 0
    param_bytes: dict[str, int] = field(default_factory=dict)
    buffer_bytes: dict[str, int] = field(default_factory=dict)
    grad_bytes_by_device: dict[str, int] = field(default_factory=dict)
    # optimizers
    state_bytes: dict[str, int] = field(default_factory=dict)
    param_devices: tuple[str, ...] = ()
    # containers
    element_count: int = 0
    truncated: bool = False

    @property
    def device(self) -> str:
        return ", ".join(self.devices) if self.devices else "-"

    def to_dict(self) -> dict[str, Any]:
        """The protocol row (see :mod:`torchdevice_magic.protocol`)."""
        return {
            "name": self.name,
            "root": self.root,
            "kind": self.kind,
            "type": self.type,
            "device": self.device,
            "devices": list(self.devices),
            "dtype": self.dtype,
            "shape": list(self.shape) if self.shape is not None else None,
            "numel": self.numel,
            "bytes": self.bytes,
            "would_need_bytes": self.would_need_bytes,
            "grad_bytes": self.grad_bytes,
            "requires_grad": self.requires_grad,
            "shares_with": list(self.shares_with),
            "hidden": self.hidden,
            "mixed": self.mixed,
            "note": self.note,
            "movable": self.movable,
        }


@dataclass(frozen=True, slots=True)
class DeviceTotal:
    device: str
    bytes: int
    would_need_bytes: int
    allocated: int | None = None
    reserved: int | None = None
    capacity: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "bytes": self.bytes,
            "would_need_bytes": self.would_need_bytes,
            "allocated": self.allocated,
            "reserved": self.reserved,
            "capacity": self.capacity,
        }


class _Entry:
    """What one top-level name produced, plus what it takes to know, next time, whether the
    name still holds the same thing (``signature``)."""

    __slots__ = ("object_id", "records", "storages", "signature", "ref", "volatile", "record_keys")

    def __init__(
        self,
        object_id: int,
        records: list[Record],
        storages: dict[tuple, tuple[str, int]],
        signature: Any = None,
        ref: Any = None,
        volatile: bool = False,
    ) -> None:
        self.object_id = object_id
        self.records = records
        # storage key -> (device, nbytes); nbytes is what the storage *would* need on meta.
        self.storages = storages
        self.signature = signature
        self.ref = ref
        self.volatile = volatile
        # For entries with several records (a small container): each record's storage keys.
        self.record_keys: list[Iterable[tuple]] | None = None

    def keys_per_record(self) -> Iterable[tuple[Record, Iterable[tuple]]]:
        if self.record_keys is None:
            return ((record, self.storages.keys()) for record in self.records)
        return zip(self.records, self.record_keys, strict=True)


# --------------------------------------------------------------------------------------------
# Facts about one tensor


class _Torch:
    """The few torch objects the scan needs, looked up once per scan (torch already imported)."""

    __slots__ = ("torch", "Tensor", "Parameter", "Module", "Optimizer", "dtype_names", "grad")

    _device_names: dict[Any, str] = {}

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.Tensor = torch.Tensor
        self.Parameter = torch.nn.Parameter
        self.Module = torch.nn.Module
        self.Optimizer = torch.optim.Optimizer
        self.dtype_names: dict[Any, str] = {}
        self.grad = attrgetter("grad")

    def device_name(self, device: Any) -> str:
        names = self._device_names
        name = names.get(device)
        if name is None:
            name = names[device] = str(device)
        return name

    def dtype_name(self, dtype: Any) -> str:
        names = self.dtype_names
        name = names.get(dtype)
        if name is None:
            name = names[dtype] = str(dtype).removeprefix("torch.")
        return name


def _storage_facts(tensor: Any, device: str, into: dict[tuple, tuple[str, int]]) -> int:
    """Add the tensor's storage(s) to ``into``; return the bytes they would need."""
    try:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        nbytes = storage.nbytes()
        # data_ptr is 0 on meta (and for empty storages): fall back to the StorageImpl address,
        # which is what identifies a storage when there is no data pointer.
        key = (device, pointer) if pointer else (device, "impl", storage._cdata)
        into[key] = (device, nbytes)
        return nbytes
    except Exception:
        return _storage_facts_unusual(tensor, device, into)


def _storage_facts_unusual(tensor: Any, device: str, into: dict[tuple, tuple[str, int]]) -> int:
    """Sparse, nested, wrapper-subclass and fake tensors have no plain storage."""
    inner: list[Any] = []
    try:
        layout = str(tensor.layout)
    except Exception:
        layout = ""
    try:
        if layout == "torch.sparse_coo":
            inner = [tensor._indices(), tensor._values()]
        elif layout in ("torch.sparse_csr", "torch.sparse_bsr"):
            inner = [tensor.crow_indices(), tensor.col_indices(), tensor.values()]
        elif layout in ("torch.sparse_csc", "torch.sparse_bsc"):
            inner = [tensor.ccol_indices(), tensor.row_indices(), tensor.values()]
        elif getattr(tensor, "is_nested", False) is True:
            inner = [tensor.values()]
        elif hasattr(type(tensor), "__tensor_flatten__"):
            names, _ = tensor.__tensor_flatten__()
            inner = [getattr(tensor, n) for n in names]
    except Exception:
        inner = []
    total = 0
    for part in inner:
        if part is not tensor:
            total += _storage_facts(part, device, into)
    if inner:
        return total
    # Fake and other storage-less tensors: count what they would need, under a private key.
    try:
        nbytes = int(tensor.numel()) * int(tensor.element_size())
    except Exception:
        nbytes = 0
    into[(device, "object", id(tensor))] = (device, nbytes)
    return nbytes


def _special_note(tensor: Any, tp: type) -> str:
    """A short note for layouts and subclasses that behave differently from plain tensors."""
    try:
        if tp.__name__ == "DTensor":
            placements = getattr(tensor, "placements", ())
            return "DTensor local shard; placements " + ", ".join(
                type(p).__name__ + _placement_dim(p) for p in placements
            )
        if tp.__name__ == "FakeTensor":
            return "fake tensor (no data)"
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


def _placement_dim(placement: Any) -> str:
    dim = getattr(placement, "dim", None)
    return f"({dim})" if isinstance(dim, int) else ""


def _dtensor_local(tensor: Any) -> Any:
    local = getattr(tensor, "_local_tensor", None)
    return local if local is not None else tensor


# --------------------------------------------------------------------------------------------
# Records for each kind of object


def _tensor_record(
    T: _Torch, tensor: Any, tp: type, name: str, root: str, storages: dict
) -> Record:
    device = T.device_name(tensor.device)
    note = ""
    measured = tensor
    if tp is not T.Tensor and tp is not T.Parameter:
        note = _special_note(tensor, tp)
        if tp.__name__ == "DTensor":
            measured = _dtensor_local(tensor)
    needed = _storage_facts(measured, device, storages)
    grad_bytes = 0
    requires_grad = tensor.requires_grad
    if requires_grad:
        grad = tensor.grad
        if grad is not None:
            grad_bytes = _storage_facts(grad, T.device_name(grad.device), storages)
    try:
        shape = tuple(tensor.shape)
        numel = tensor.numel()
    except Exception:  # nested tensors have no single shape
        shape, numel = None, 0
    actual = 0 if device == "meta" or note == "fake tensor (no data)" else needed
    return Record(
        name,
        root,
        "parameter" if tp is T.Parameter else "tensor",
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
    )


def _submodules(module: Any) -> list[Any]:
    """The module and its submodules, depth first, each once (cheaper than ``modules()``)."""
    found = [module]
    seen = {id(module)}
    stack = [module]
    while stack:
        children = stack.pop()._modules
        for child in children.values():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                found.append(child)
                stack.append(child)
    return found


def _module_tensors(submodules: list[Any]) -> tuple[list[Any], list[Any]]:
    params: list[Any] = []
    buffers: list[Any] = []
    for sub in submodules:
        params.extend(sub._parameters.values())
        buffers.extend(sub._buffers.values())
    return params, buffers


def _module_signature(T: _Torch, refs: list[Any]) -> tuple | None:
    """What changes when a module moves, gains or drops gradients, or swaps a child/parameter."""
    submodules = []
    for ref in refs:
        sub = ref()
        if sub is None:
            return None
        submodules.append(sub)
    children = list(chain.from_iterable(sub._modules.values() for sub in submodules))
    params, buffers = _module_tensors(submodules)
    tensors = [t for t in chain(params, buffers) if t is not None]
    data_ptr = T.Tensor.data_ptr
    return (
        tuple(map(id, children)),
        tuple(map(id, tensors)),
        tuple(map(data_ptr, tensors)),
        tuple(map(id, map(T.grad, tensors))),
    )


def _module_entry(T: _Torch, module: Any, name: str) -> _Entry:
    storages: dict[tuple, tuple[str, int]] = {}
    submodules = _submodules(module)
    params, buffers = _module_tensors(submodules)
    param_bytes: dict[str, int] = {}
    buffer_bytes: dict[str, int] = {}
    grad_bytes: dict[str, int] = {}
    seen_params: set[int] = set()
    param_count = 0
    meta_params = False
    for group, sizes in ((params, param_bytes), (buffers, buffer_bytes)):
        for tensor in group:
            if tensor is None or id(tensor) in seen_params:
                continue  # tied weights appear twice; count them once
            seen_params.add(id(tensor))
            device = T.device_name(tensor.device)
            needed = _storage_facts(tensor, device, storages)
            sizes[device] = sizes.get(device, 0) + (0 if device == "meta" else needed)
            if group is params:
                param_count += tensor.numel()
                meta_params = meta_params or device == "meta"
                grad = tensor.grad
                if grad is not None:
                    grad_device = T.device_name(grad.device)
                    grad_needed = _storage_facts(grad, grad_device, storages)
                    grad_bytes[grad_device] = grad_bytes.get(grad_device, 0) + grad_needed
    by_device = _bytes_by_device(storages)
    devices = tuple(sorted(set(param_bytes) | set(buffer_bytes), key=device_sort_key))
    mixed = len(devices) > 1
    note = f"spans {', '.join(devices)}" if mixed else ""
    if meta_params:
        note = (note + "; " if note else "") + "meta parameters (no data)"
    record = Record(
        name,
        name,
        "module",
        type(module).__name__,
        devices,
        _common_dtype(T, chain(params, buffers)),
        None,
        param_count,
        sum(by_device.values()),
        sum(nbytes for _, nbytes in storages.values()),
        False,
        sum(grad_bytes.values()),
        by_device,
        mixed=mixed,
        note=note,
        movable=not meta_params,
        param_count=param_count,
        param_bytes=param_bytes,
        buffer_bytes=buffer_bytes,
        grad_bytes_by_device=grad_bytes,
    )
    refs = [weakref.ref(sub) for sub in submodules]
    return _Entry(id(module), [record], storages, _module_signature(T, refs), refs, True)


def _common_dtype(T: _Torch, tensors: Iterable[Any]) -> str | None:
    dtypes = {t.dtype for t in tensors if t is not None}
    if len(dtypes) == 1:
        return T.dtype_name(dtypes.pop())
    return "mixed" if dtypes else None


def _optimizer_params(optimizer: Any) -> list[Any]:
    return list(chain.from_iterable(group["params"] for group in optimizer.param_groups))


def _optimizer_signature(T: _Torch, optimizer: Any) -> tuple:
    state = optimizer.state
    params = _optimizer_params(optimizer)
    return (
        id(state),
        len(state),
        tuple(map(id, state.values())),
        tuple(map(T.Tensor.data_ptr, params)),
    )


def _optimizer_entry(T: _Torch, optimizer: Any, name: str) -> _Entry:
    storages: dict[tuple, tuple[str, int]] = {}
    state_bytes: dict[str, int] = {}
    param_devices: set[str] = set()
    misplaced = 0
    tensor_type = T.Tensor
    for param in _optimizer_params(optimizer):
        if isinstance(param, tensor_type):
            param_devices.add(T.device_name(param.device))
    for param, state in optimizer.state.items():
        param_device = T.device_name(param.device) if isinstance(param, tensor_type) else None
        if not isinstance(state, dict):
            continue
        for value in state.values():
            if not isinstance(value, tensor_type):
                continue
            device = T.device_name(value.device)
            needed = _storage_facts(value, device, storages)
            state_bytes[device] = state_bytes.get(device, 0) + (0 if device == "meta" else needed)
            # torch keeps 0-dim ``step`` counters on the CPU on purpose; only real state counts.
            if param_device is not None and device != param_device and value.dim() > 0:
                misplaced += 1
    devices = tuple(sorted(state_bytes, key=device_sort_key))
    by_device = _bytes_by_device(storages)
    note = ""
    if misplaced:
        note = f"state on {', '.join(devices)} but parameters on {', '.join(sorted(param_devices))}"
    record = Record(
        name,
        name,
        "optimizer",
        type(optimizer).__name__,
        devices,
        None,
        None,
        len(optimizer.state),
        sum(by_device.values()),
        sum(nbytes for _, nbytes in storages.values()),
        bytes_by_device=by_device,
        mixed=bool(misplaced),
        note=note,
        state_bytes=state_bytes,
        param_devices=tuple(sorted(param_devices, key=device_sort_key)),
    )
    return _Entry(
        id(optimizer),
        [record],
        storages,
        _optimizer_signature(T, optimizer),
        weakref.ref(optimizer),
        True,
    )


class _ContainerWalk:
    """Walks list / tuple / dict / namedtuple values up to MAX_CONTAINER_DEPTH, never calling
    a subclass's overridden ``__iter__``/``items`` (the base-class methods are used), never
    iterating anything else, and stopping at CONTAINER_ELEMENT_CAP elements."""

    __slots__ = ("T", "leaves", "visited", "elements", "truncated", "seen_ids")

    def __init__(self, T: _Torch) -> None:
        self.T = T
        self.leaves: list[tuple[str, Any]] = []
        self.visited = 0
        self.truncated = False
        self.seen_ids: set[int] = set()

    def walk(self, value: Any, path: str, depth: int) -> None:
        if depth > MAX_CONTAINER_DEPTH or self.truncated:
            return
        if id(value) in self.seen_ids:
            return  # self-referencing containers
        self.seen_ids.add(id(value))
        tp = type(value)
        if issubclass(tp, dict):
            items: Iterable[tuple[Any, Any]] = dict.items(value)
            label = _dict_label
        elif issubclass(tp, tuple):
            fields = getattr(tp, "_fields", None)
            if isinstance(fields, tuple) and len(fields) == tuple.__len__(value):
                items = zip(fields, tuple.__iter__(value), strict=False)
                label = _attribute_label
            else:
                items = enumerate(tuple.__iter__(value))
                label = _index_label
        else:
            items = enumerate(list.__iter__(value))
            label = _index_label
        T = self.T
        for key, item in items:
            self.visited += 1
            if self.visited > CONTAINER_ELEMENT_CAP:
                self.truncated = True
                return
            item_type = type(item)
            if issubclass(item_type, T.Tensor) or issubclass(item_type, T.Module):
                self.leaves.append((path + label(key), item))
            elif item_type in _CONTAINER_TYPES or issubclass(item_type, (list, tuple, dict)):
                self.walk(item, path + label(key), depth + 1)


_CONTAINER_TYPES = (list, tuple, dict)


def _dict_label(key: Any) -> str:
    if isinstance(key, (str, int, float, bool)) or key is None:
        return f"[{key!r}]"
    return f"[<{type(key).__name__}>]"


def _index_label(index: Any) -> str:
    return f"[{index}]"


def _attribute_label(name: Any) -> str:
    return f".{name}"


def _container_entry(T: _Torch, value: Any, name: str) -> _Entry | None:
    walk = _ContainerWalk(T)
    walk.walk(value, name, 1)
    if not walk.leaves and not walk.truncated:
        return None
    storages: dict[tuple, tuple[str, int]] = {}
    records: list[Record] = []
    record_keys: list[Iterable[tuple]] = []
    aggregate = len(walk.leaves) > AGGREGATE_ABOVE or walk.truncated
    for path, item in walk.leaves:
        item_type = type(item)
        if issubclass(item_type, T.Module):
            entry = _module_entry(T, item, path)
            record = entry.records[0]
            record.root = name
            own = entry.storages
        else:
            own = {}
            record = _tensor_record(T, item, item_type, path, name, own)
        storages.update(own)
        records.append(record)
        record_keys.append(tuple(own))
    if aggregate:
        entry = _Entry(
            id(value), [_aggregate_record(T, value, name, records, storages, walk)], storages
        )
    else:
        entry = _Entry(id(value), records, storages)
        entry.record_keys = record_keys
    return entry


def _aggregate_record(
    T: _Torch, value: Any, name: str, parts: list[Record], storages: dict, walk: _ContainerWalk
) -> Record:
    by_device = _bytes_by_device(storages)
    devices = tuple(sorted({d for r in parts for d in r.devices}, key=device_sort_key))
    dtypes = {r.dtype for r in parts}
    kinds = {r.type for r in parts}
    element_type = kinds.pop() if len(kinds) == 1 else "mixed"
    note = f"{len(parts):,} {element_type} objects"
    if walk.truncated:
        note += f"; stopped after {CONTAINER_ELEMENT_CAP:,} elements, the rest is not counted"
    return Record(
        name,
        name,
        "container",
        f"{type(value).__name__}[{element_type}]",
        devices,
        dtypes.pop() if len(dtypes) == 1 else "mixed",
        None,
        sum(r.numel for r in parts),
        sum(by_device.values()),
        sum(nbytes for _, nbytes in storages.values()),
        any(r.requires_grad for r in parts),
        sum(r.grad_bytes for r in parts),
        by_device,
        mixed=len(devices) > 1,
        note=note,
        movable=not any(not r.movable for r in parts),
        element_count=len(parts),
        truncated=walk.truncated,
    )


def _bytes_by_device(storages: Mapping[tuple, tuple[str, int]]) -> dict[str, int]:
    by_device: dict[str, int] = {}
    for device, nbytes in storages.values():
        by_device[device] = by_device.get(device, 0) + (0 if device == "meta" else nbytes)
    return by_device


def device_sort_key(device: str) -> tuple[int, str, int]:
    """cpu first, then accelerators by type and index, meta last."""
    kind, _, index = device.partition(":")
    rank = 0 if kind == "cpu" else 2 if kind == "meta" else 1
    return (rank, kind, int(index) if index.isdigit() else -1)


# --------------------------------------------------------------------------------------------
# Plain tensors: the common case, kept as one compact tuple per name. A Record costs more to
# build than reading the tensor, and most scans (the hook's, after every cell) never look at
# records of tensors nobody changed, so records are built from these tuples only when asked.

_TENSOR_FACTS_LEN = 9  # (id, type, device, dtype, shape, requires_grad, key, nbytes, grad)


def _plain_tensor_facts(T: _Torch, tensor: Any, tp: type) -> tuple | None:
    """Facts of a strided tensor or Parameter, or None when it needs the careful path."""
    try:
        device_object = tensor.device
        device = T._device_names.get(device_object) or T.device_name(device_object)
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        key = (device, pointer) if pointer else (device, "impl", storage._cdata)
        requires_grad = tensor.requires_grad
        grad = None
        if requires_grad:
            grad_tensor = tensor.grad
            if grad_tensor is not None:
                grad_storages: dict[tuple, tuple[str, int]] = {}
                grad_device = T.device_name(grad_tensor.device)
                _storage_facts(grad_tensor, grad_device, grad_storages)
                grad = next(iter(grad_storages.items()))
        return (
            id(tensor),
            tp,
            device,
            tensor.dtype,
            tensor.shape,
            requires_grad,
            key,
            storage.nbytes(),
            grad,
        )
    except Exception:
        return None


def _facts_storages(facts: tuple) -> dict[tuple, tuple[str, int]]:
    storages = {facts[6]: (facts[2], facts[7])}
    if facts[8] is not None:
        storages[facts[8][0]] = facts[8][1]
    return storages


def _facts_record(T: _Torch, name: str, facts: tuple) -> Record:
    _, tp, device, dtype, shape, requires_grad, _, nbytes, grad = facts
    numel = 1
    for size in shape:
        numel *= size
    actual = 0 if device == "meta" else nbytes
    grad_bytes = 0 if grad is None or grad[1][0] == "meta" else grad[1][1]
    return Record(
        name,
        name,
        "parameter" if tp is T.Parameter else "tensor",
        tp.__name__,
        (device,),
        T.dtype_name(dtype),
        tuple(shape),
        numel,
        actual,
        nbytes,
        requires_grad,
        grad_bytes,
        {device: actual},
        movable=device != "meta",
    )


def _entry_storages(entry: Any) -> Mapping[tuple, tuple[str, int]]:
    return _facts_storages(entry) if type(entry) is tuple else entry.storages


def _entry_volatile(entry: Any) -> bool:
    if type(entry) is tuple:
        # A tensor's grad can appear in any cell, and a Parameter can't be weakly referenced
        # (swap-based Module._apply refuses such tensors): look at both again next time.
        return entry[5] or entry[1].__name__ == "Parameter"
    return entry.volatile


# --------------------------------------------------------------------------------------------
# The scan


def _inspect(T: _Torch, name: str, value: Any) -> _Entry | tuple | None:
    """One top-level name -> its entry (None: nothing of ours). Never raises."""
    try:
        tp = type(value)
        if tp is T.Tensor or tp is T.Parameter:
            facts = _plain_tensor_facts(T, value, tp)
            if facts is not None:
                return facts  # type: ignore[return-value]
        if issubclass(tp, T.Tensor):
            storages: dict[tuple, tuple[str, int]] = {}
            record = _tensor_record(T, value, tp, name, name, storages)
            # A Parameter can't be weakly referenced (swap-based Module._apply refuses such
            # tensors) and a tensor's grad can appear in any cell: re-check both next time.
            volatile = record.requires_grad or tp is T.Parameter
            return _Entry(id(value), [record], storages, None, None, volatile)
        if issubclass(tp, T.Module):
            return _module_entry(T, value, name)
        if issubclass(tp, T.Optimizer):
            return _optimizer_entry(T, value, name)
        if tp in _CONTAINER_TYPES or issubclass(tp, (list, tuple, dict)):
            return _container_entry(T, value, name)
    except Exception as error:  # a hostile or broken object: say so, don't fail the scan
        return _Entry(
            id(value),
            [
                Record(
                    name,
                    name,
                    "unreadable",
                    _safe_type_name(value),
                    (),
                    note=f"could not inspect: {type(error).__name__}",
                    movable=False,
                )
            ],
            {},
        )
    return None


def _safe_type_name(value: Any) -> str:
    try:
        return type(value).__name__
    except Exception:
        return "?"


def _still_same(T: _Torch, entry: _Entry | tuple, value: Any) -> bool:
    """Whether a name that still holds the same object id still has the same facts."""
    if type(entry) is tuple:
        return False  # a grad-carrying tensor or a Parameter: cheap enough to look again
    try:
        records = entry.records
        kind = records[0].kind if records else ""
        if kind == "module":
            return _module_signature(T, entry.ref) == entry.signature
        if kind == "optimizer":
            return entry.ref() is value and _optimizer_signature(T, value) == entry.signature
    except Exception:
        return False
    return False  # tensors with requires_grad / Parameters: cheap enough to look again


def _namespace_ids(namespace: Mapping[str, Any]) -> dict[str, int]:
    try:
        return dict(zip(namespace.keys(), map(id, namespace.values()), strict=True))
    except Exception:  # a Mapping that is not a dict, or that changed while we read it
        return {name: id(value) for name, value in list(namespace.items())}


def scan(
    namespace: Mapping[str, Any],
    *,
    include_hidden: bool = False,
    previous: Inventory | None = None,
    changed: Iterable[str] = (),
) -> Inventory:
    """Inventory of the tensors, modules, optimizers and tensor containers in ``namespace``.

    ``previous``: the last Inventory of the same namespace. Only names bound to a different
    object since then, names in ``changed`` (the hook passes the names a cell assigned, which
    catches an id reused by a new object), and modules / optimizers / grad-carrying tensors
    whose cheap signature moved are inspected again; everything else is reused as it was.
    """
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor") or not hasattr(torch, "optim"):
        return Inventory({}, {}, torch_imported=False, include_hidden=include_hidden)
    T = _Torch(torch)
    ids = _namespace_ids(namespace)
    entries: dict[str, _Entry] = {}
    if previous is not None and previous._ids and previous.torch_imported:
        stale = {name for name, _ in ids.items() - previous._ids.items()}
        stale.update(changed)
        reused = 0
        for name, entry in previous._entries.items():
            if name in stale or name not in ids:
                continue
            if _entry_volatile(entry) and not _still_same(T, entry, namespace.get(name)):
                stale.add(name)
                continue
            entries[name] = entry
            reused += 1
        items: Iterable[tuple[str, Any]] = [
            (name, namespace.get(name)) for name in stale if name in ids
        ]
    else:
        items = namespace.items() if isinstance(namespace, dict) else list(namespace.items())
    for name, value in items:
        if is_ipython_bookkeeping(name):
            continue
        entry = _inspect(T, name, value)
        if entry is not None:
            entries[name] = entry
    # keep the namespace's own order so views are stable from cell to cell
    if previous is not None:
        entries = {name: entries[name] for name in ids if name in entries}
    hidden = _hidden_entries(T, namespace, entries) if include_hidden else {}
    return Inventory(
        entries, ids, torch_imported=True, include_hidden=include_hidden, hidden=hidden, torch=T
    )


def _hidden_entries(
    T: _Torch, namespace: Mapping[str, Any], visible: Mapping[str, _Entry | tuple]
) -> dict[str, _Entry]:
    """Objects kept alive only by IPython's output history (``Out[12]``, ``_``)."""
    visible_keys: set[tuple] = set()
    for entry in visible.values():
        visible_keys.update(_entry_storages(entry))
    found: dict[str, _Entry] = {}
    seen_ids: set[int] = set()
    candidates: list[tuple[str, Any]] = []
    out = namespace.get("Out")
    if isinstance(out, dict):
        candidates.extend((f"Out[{key!r}]", value) for key, value in list(dict.items(out)))
    for alias in ("_", "__", "___"):
        if alias in namespace:
            candidates.append((alias, namespace[alias]))
    for label, value in candidates:
        if id(value) in seen_ids:
            continue  # `_` is usually the same object as the last Out entry
        seen_ids.add(id(value))
        entry = _inspect(T, label, value)
        if type(entry) is tuple:
            entry = _Entry(entry[0], [_facts_record(T, label, entry)], _facts_storages(entry))
        if entry is None or not entry.storages:
            continue
        if set(entry.storages) <= visible_keys:
            continue  # also reachable from a visible name: not hidden
        for record in entry.records:
            record.hidden = True
            record.movable = False
            record.note = (record.note + "; " if record.note else "") + "held by output history"
        found[label] = entry
    return found


# --------------------------------------------------------------------------------------------
# The result


class Inventory:
    """The result of :func:`scan`: records, per-device totals, renderings."""

    def __init__(
        self,
        entries: dict[str, _Entry | tuple],
        ids: dict[str, int],
        *,
        torch_imported: bool,
        include_hidden: bool = False,
        hidden: dict[str, _Entry] | None = None,
        torch: _Torch | None = None,
    ) -> None:
        self._torch = torch
        self._entries = entries
        self._ids = ids
        self._hidden = hidden or {}
        self.torch_imported = torch_imported
        self.include_hidden = include_hidden
        self._records: list[Record] | None = None
        self._built: list[tuple[Any, list[Record]]] | None = None
        self._totals: dict[str, int] | None = None

    # -- records -----------------------------------------------------------------------------
    @property
    def records(self) -> list[Record]:
        if self._records is None:
            self._records = [r for _, records in self._records_by_entry() for r in records]
            self._mark_sharing()
        return self._records

    def _records_by_entry(self) -> list[tuple[Any, list[Record]]]:
        """(entry, its records) for visible then hidden entries; tensor records are built here."""
        if self._built is None:
            built = []
            for name, entry in self._entries.items():
                if type(entry) is tuple:
                    built.append((entry, [_facts_record(self._torch, name, entry)]))
                else:
                    built.append((entry, entry.records))
            built += [(entry, entry.records) for entry in self._hidden.values()]
            self._built = built
        return self._built

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def __getitem__(self, name: str) -> Record:
        for record in self.records:
            if record.name == name:
                return record
        raise KeyError(name)

    def names(self) -> list[str]:
        """The top-level names that hold something this inventory lists (not hidden ones)."""
        return list(self._entries)

    def roots(self) -> MappingProxyType:
        self.records  # noqa: B018 - builds the tensor records
        return MappingProxyType(
            {name: records for name, (_, records) in zip(self._entries, self._built, strict=False)}
        )

    def _mark_sharing(self) -> None:
        """``shares_with``: names whose storages overlap (aliases, views, tied weights)."""
        owners: dict[tuple, list[str]] = {}
        for entry, records in self._records_by_entry():
            pairs = (
                zip(records, [_facts_storages(entry).keys()], strict=True)
                if type(entry) is tuple
                else entry.keys_per_record()
            )
            for record, keys in pairs:
                for key in keys:
                    names = owners.get(key)
                    if names is None:
                        owners[key] = [record.name]
                    elif names[-1] != record.name:
                        names.append(record.name)
        shared: dict[str, set[str]] = {}
        for names in owners.values():
            if len(names) > 1:
                for name in names:
                    shared.setdefault(name, set()).update(n for n in names if n != name)
        for _, records in self._records_by_entry():
            for record in records:
                others = shared.get(record.name)
                record.shares_with = tuple(sorted(others)) if others else ()

    # -- totals ------------------------------------------------------------------------------
    def _unique_storages(self) -> dict[tuple, tuple[str, int]]:
        merged: dict[tuple, tuple[str, int]] = {}
        for entry in self._entries.values():
            if type(entry) is tuple:
                merged[entry[6]] = (entry[2], entry[7])
                if entry[8] is not None:
                    merged[entry[8][0]] = entry[8][1]
            else:
                merged.update(entry.storages)
        return merged

    def totals(self) -> dict[str, int]:
        """{device: bytes}, every storage counted once across the namespace (gradients and
        optimizer state included; meta counts 0)."""
        if self._totals is None:
            by_device = _bytes_by_device(self._unique_storages())
            self._totals = {d: by_device[d] for d in sorted(by_device, key=device_sort_key)}
        return dict(self._totals)

    def would_need(self) -> dict[str, int]:
        """{device: bytes} as if every storage held data (what meta tensors would need)."""
        needed: dict[str, int] = {}
        for device, nbytes in self._unique_storages().values():
            needed[device] = needed.get(device, 0) + nbytes
        return needed

    @property
    def devices(self) -> list[str]:
        found = {d for r in self.records if not r.hidden for d in r.devices}
        return sorted(found | set(self.totals()), key=device_sort_key)

    def device_totals(self) -> list[DeviceTotal]:
        """Totals with, for CUDA devices when CUDA is *already* initialised, the allocator's
        figures (reading them otherwise would initialise CUDA)."""
        totals = self.totals()
        needed = self.would_need()
        cuda = _initialised_cuda()
        rows = []
        for device in self.devices:
            allocated = reserved = capacity = None
            if cuda is not None and device.startswith("cuda"):
                allocated, reserved, capacity = _cuda_figures(cuda, device)
            rows.append(
                DeviceTotal(
                    device,
                    totals.get(device, 0),
                    needed.get(device, 0),
                    allocated,
                    reserved,
                    capacity,
                )
            )
        return rows

    def mixed_warnings(self) -> list[str]:
        """One line per object whose parts sit on different devices."""
        warnings = []
        for record in self.records:
            if record.mixed and not record.hidden:
                if record.kind == "optimizer":
                    warnings.append(f"{record.name}: {record.note}")
                else:
                    warnings.append(f"{record.name} spans {', '.join(record.devices)}")
        return warnings

    # -- exports -----------------------------------------------------------------------------
    def to_frame(self):
        import pandas as pd

        columns = [
            "name", "kind", "type", "device", "dtype", "shape", "numel", "bytes",
            "would_need_bytes", "requires_grad", "grad_bytes", "shares_with", "hidden", "mixed",
            "note",
        ]  # fmt: skip
        rows = [
            {
                "name": r.name,
                "kind": r.kind,
                "type": r.type,
                "device": r.device,
                "dtype": r.dtype,
                "shape": r.shape,
                "numel": r.numel,
                "bytes": r.bytes,
                "would_need_bytes": r.would_need_bytes,
                "requires_grad": r.requires_grad,
                "grad_bytes": r.grad_bytes,
                "shares_with": r.shares_with,
                "hidden": r.hidden,
                "mixed": r.mixed,
                "note": r.note,
            }
            for r in self.records
        ]
        return pd.DataFrame(rows, columns=columns)

    def to_json(self, **context: Any) -> dict[str, Any]:
        """The protocol snapshot (see :mod:`torchdevice_magic.protocol`)."""
        from .protocol import snapshot

        return snapshot(self, **context)

    def __repr__(self) -> str:
        from .render import inventory_text

        return inventory_text(self)

    def _repr_html_(self) -> str:
        from .render import inventory_html

        return inventory_html(self)


def _initialised_cuda() -> Any:
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return torch.cuda
    except Exception:
        pass
    return None


def _cuda_figures(cuda: Any, device: str) -> tuple[int | None, int | None, int | None]:
    try:
        index = int(device.partition(":")[2] or 0)
        return (
            int(cuda.memory_allocated(index)),
            int(cuda.memory_reserved(index)),
            int(cuda.get_device_properties(index).total_memory),
        )
    except Exception:
        return None, None, None


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


__all__ = [
    "Inventory",
    "Record",
    "DeviceTotal",
    "scan",
    "format_bytes",
    "is_ipython_bookkeeping",
    "device_sort_key",
]
