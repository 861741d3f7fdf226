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

import re
import sys
import weakref
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import attrgetter, is_not, methodcaller, ne
from types import MappingProxyType
from typing import Any

from .units import device_sort_key, format_bytes

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

    def size_order(self) -> tuple[int, str]:
        """Sort key of every view: biggest first (meta rows by what they would need), then name."""
        return (-max(self.bytes, self.would_need_bytes), self.name)

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

    __slots__ = (
        "object_id", "records", "storages", "signature", "ref", "volatile", "record_keys",
        "tensor_ids",
    )  # fmt: skip

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
        # ids of the tensors this entry reaches (a module's parameters and buffers, a
        # container's tensors) or, for an optimizer, of the parameters it updates
        self.tensor_ids: tuple[int, ...] = ()

    def keys_per_record(self) -> Iterable[tuple[Record, Iterable[tuple]]]:
        if self.record_keys is None:
            return ((record, self.storages.keys()) for record in self.records)
        return zip(self.records, self.record_keys, strict=True)


# --------------------------------------------------------------------------------------------
# Facts about one tensor


class _Torch:
    """The few torch objects the scan needs, looked up once per scan (torch already imported)."""

    __slots__ = (
        "torch", "Tensor", "Parameter", "Module", "Optimizer", "UntypedStorage", "dtype_names",
    )  # fmt: skip

    _device_names: dict[Any, str] = {}

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.Tensor = torch.Tensor
        self.Parameter = torch.nn.Parameter
        self.Module = torch.nn.Module
        self.Optimizer = torch.optim.Optimizer
        self.UntypedStorage = torch.UntypedStorage
        self.dtype_names: dict[Any, str] = {}

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


_get_device = attrgetter("device")
_get_dtype = attrgetter("dtype")
_get_shape = attrgetter("shape")
_get_requires_grad = attrgetter("requires_grad")
_get_grad = attrgetter("grad")
_data_ptr = methodcaller("data_ptr")


def _device_names_of(T: _Torch, tensors: list[Any]) -> list[str]:
    devices = list(map(_get_device, tensors))
    try:
        return list(map(T._device_names.__getitem__, devices))
    except KeyError:
        return [T.device_name(device) for device in devices]


def _read_storages(
    T: _Torch, tensors: list[Any], devices: list[str], into: dict[tuple, tuple[str, int]]
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
        return [_storage_facts(t, d, into) for t, d in zip(tensors, devices, strict=True)]
    keys = list(zip(devices, pointers, strict=True))
    if 0 in pointers:  # meta and empty storages have no data pointer
        for index, pointer in enumerate(pointers):
            if not pointer:
                keys[index] = (devices[index], "impl", storages[index]._cdata)
    into.update(zip(keys, zip(devices, sizes, strict=True), strict=True))
    return sizes


def _special_note(tensor: Any, tp: type) -> str:
    """A short note for layouts and subclasses that behave differently from plain tensors."""
    try:
        if tp.__name__ == "FunctionalTensor" or "Fake" in tp.__name__:
            return "fake tensor (no data)"
        if tp.__name__ == "DTensor":
            placements = getattr(tensor, "placements", ())
            return "DTensor local shard; placements " + ", ".join(
                type(p).__name__ + _placement_dim(p) for p in placements
            )
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
    """The careful path: any tensor, whatever its layout or subclass."""
    device = T.device_name(tensor.device)
    note = _special_note(tensor, tp)
    measured = _dtensor_local(tensor) if tp.__name__ == "DTensor" else tensor
    if note == "fake tensor (no data)":
        needed = _storage_facts_unusual(measured, device, storages)
    else:
        needed = _storage_facts(measured, device, storages)
    grad_bytes = 0
    requires_grad = tensor.requires_grad
    if requires_grad and (tensor.is_leaf or tensor.retains_grad):
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


_params_of = attrgetter("_parameters")
_buffers_of = attrgetter("_buffers")
_children_of = attrgetter("_modules")


def _is_not_none(value: Any) -> bool:
    return value is not None


def _module_tensors(submodules: list[Any]) -> tuple[list[Any], list[Any]]:
    params = list(chain.from_iterable(map(dict.values, map(_params_of, submodules))))
    buffers = list(chain.from_iterable(map(dict.values, map(_buffers_of, submodules))))
    return params, buffers


def _module_signature(T: _Torch, submodules: list[Any]) -> tuple:
    """What changes when a module moves, gains or drops gradients, or swaps a child/parameter.

    Built with ``map``/``chain`` over C-level getters: the hook computes this after every cell.
    """
    params, buffers = _module_tensors(submodules)
    return _signature_of(submodules, [t for t in chain(params, buffers) if t is not None])


def _signature_of(submodules: list[Any], tensors: list[Any]) -> tuple:
    children = chain.from_iterable(map(dict.values, map(_children_of, submodules)))
    return (
        tuple(map(id, children)),
        tuple(map(id, tensors)),
        tuple(map(_data_ptr, tensors)),
        tuple(map(id, map(_get_grad, tensors))),
    )


def _live_submodules(refs: list[Any]) -> list[Any] | None:
    submodules = list(map(weakref.ref.__call__, refs))
    return None if None in submodules else submodules


def _sum_by_device(devices: list[str], sizes: list[int]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for device, size in zip(devices, sizes, strict=True):
        totals[device] = totals.get(device, 0) + (0 if device == "meta" else size)
    return totals


def _module_entry(T: _Torch, module: Any, name: str) -> _Entry:
    storages: dict[tuple, tuple[str, int]] = {}
    submodules = _submodules(module)
    all_params, all_buffers = _module_tensors(submodules)
    present = [t for t in chain(all_params, all_buffers) if t is not None]
    signature = _signature_of(submodules, present)
    # tied weights appear twice; each tensor counts once
    params = list({id(p): p for p in all_params if p is not None}.values())
    buffers = list({id(b): b for b in all_buffers if b is not None}.values())
    param_devices = _device_names_of(T, params)
    buffer_devices = _device_names_of(T, buffers)
    param_bytes = _sum_by_device(param_devices, _read_storages(T, params, param_devices, storages))
    buffer_bytes = _sum_by_device(
        buffer_devices, _read_storages(T, buffers, buffer_devices, storages)
    )
    grads = [g for g in map(_get_grad, params) if g is not None]
    grad_devices = _device_names_of(T, grads)
    grad_sizes = _read_storages(T, grads, grad_devices, storages)
    grad_bytes: dict[str, int] = {}
    for device, size in zip(grad_devices, grad_sizes, strict=True):
        grad_bytes[device] = grad_bytes.get(device, 0) + size
    param_count = sum(map(T.Tensor.numel, params))
    meta_params = "meta" in param_devices
    by_device = _bytes_by_device(storages)
    devices = tuple(sorted(set(param_devices) | set(buffer_devices), key=device_sort_key))
    mixed = len(devices) > 1
    note = f"spans {', '.join(devices)}" if mixed else ""
    if meta_params:
        note = (note + "; " if note else "") + "meta parameters (no data)"
    dtypes = set(map(_get_dtype, chain(params, buffers)))
    record = Record(
        name,
        name,
        "module",
        type(module).__name__,
        devices,
        T.dtype_name(dtypes.pop()) if len(dtypes) == 1 else ("mixed" if dtypes else None),
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
    entry = _Entry(id(module), [record], storages, signature, refs, True)
    entry.tensor_ids = signature[1]
    return entry


def _optimizer_params(optimizer: Any) -> list[Any]:
    return list(chain.from_iterable(group["params"] for group in optimizer.param_groups))


def _optimizer_signature(T: _Torch, optimizer: Any) -> tuple:
    """Changes when state appears, is replaced (load_state_dict, or a tensor swapped inside a
    parameter's state), or when the parameters move."""
    state = optimizer.state
    params = _optimizer_params(optimizer)
    return (
        id(state),
        len(state),
        tuple(map(id, state.values())),
        tuple(map(id, chain.from_iterable(map(dict.values, state.values())))),
        tuple(map(T.Tensor.data_ptr, params)),
    )


def _optimizer_entry(T: _Torch, optimizer: Any, name: str) -> _Entry:
    storages: dict[tuple, tuple[str, int]] = {}
    tensor_type = T.Tensor
    params = [p for p in _optimizer_params(optimizer) if isinstance(p, tensor_type)]
    param_device = dict(zip(map(id, params), _device_names_of(T, params), strict=True))
    state = optimizer.state
    per_param = [value for value in state.values() if isinstance(value, dict)]
    values = list(chain.from_iterable(map(dict.values, per_param)))
    # which parameter each state value belongs to, for the misplaced-state check
    owner_ids = list(
        chain.from_iterable(
            repeat(id(param), len(value))
            for param, value in state.items()
            if isinstance(value, dict)
        )
    )
    is_tensor = [type(v) is tensor_type or isinstance(v, tensor_type) for v in values]
    state_tensors = list(compress(values, is_tensor))
    owners = list(compress(owner_ids, is_tensor))
    devices = _device_names_of(T, state_tensors)
    state_bytes = _sum_by_device(devices, _read_storages(T, state_tensors, devices, storages))
    misplaced = 0
    real_devices: set[str] = set()
    for device, owner, value in zip(devices, owners, state_tensors, strict=True):
        # torch keeps 0-dim ``step`` counters on the CPU on purpose: only real state counts,
        # for the mismatch check and for the devices the row shows
        if value.dim() > 0:
            real_devices.add(device)
            if device != param_device.get(owner, device):
                misplaced += 1
    by_device = _bytes_by_device(storages)
    devices_present = tuple(sorted(real_devices or state_bytes, key=device_sort_key))
    parameter_devices = tuple(sorted(set(param_device.values()), key=device_sort_key))
    note = ""
    if misplaced:
        note = (
            f"state on {', '.join(devices_present)} but parameters on "
            f"{', '.join(parameter_devices)}"
        )
    record = Record(
        name,
        name,
        "optimizer",
        type(optimizer).__name__,
        devices_present,
        None,
        None,
        len(optimizer.state),
        sum(by_device.values()),
        sum(nbytes for _, nbytes in storages.values()),
        bytes_by_device=by_device,
        mixed=bool(misplaced),
        note=note,
        state_bytes=state_bytes,
        param_devices=parameter_devices,
    )
    entry = _Entry(
        id(optimizer),
        [record],
        storages,
        _optimizer_signature(T, optimizer),
        weakref.ref(optimizer),
        True,
    )
    entry.tensor_ids = tuple(map(id, params))
    return entry


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
    aggregate = len(walk.leaves) > AGGREGATE_ABOVE or walk.truncated
    records: list[Record] = []
    record_keys: list[Iterable[tuple]] = []
    reached: list[int] = []
    summary = _ContainerSummary()
    for path, item in walk.leaves:
        item_type = type(item)
        reached.append(id(item))
        facts = None
        if item_type is T.Tensor or item_type is T.Parameter:
            facts = _plain_tensor_facts(T, item, item_type)
        if facts is not None:
            own = _facts_storages(facts)
            if aggregate:
                summary.add_facts(T, facts)
                storages.update(own)
                continue
            record = _facts_record(T, path, facts, root=name)
        elif issubclass(item_type, T.Module):
            entry = _module_entry(T, item, path)
            record, own = entry.records[0], entry.storages
            record.root = name
            reached.extend(entry.tensor_ids)
        else:
            own = {}
            record = _tensor_record(T, item, item_type, path, name, own)
        storages.update(own)
        if aggregate:
            summary.add_record(record)
        else:
            records.append(record)
            record_keys.append(tuple(own))
    if aggregate:
        entry = _Entry(id(value), [summary.record(value, name, storages, walk)], storages)
    else:
        entry = _Entry(id(value), records, storages)
        entry.record_keys = record_keys
    entry.tensor_ids = tuple(reached)
    return entry


class _ContainerSummary:
    """What one aggregated record says about the thousands of objects in a container."""

    __slots__ = ("count", "types", "dtypes", "numel", "requires_grad", "grad_bytes", "movable")

    def __init__(self) -> None:
        self.count = 0
        self.types: set[str] = set()
        self.dtypes: set[str] = set()
        self.numel = 0
        self.requires_grad = False
        self.grad_bytes = 0
        self.movable = True

    def add_facts(self, T: _Torch, facts: tuple) -> None:
        self.count += 1
        self.types.add(facts[1].__name__)
        self.dtypes.add(T.dtype_name(facts[3]))
        self.numel += facts[4].numel()
        if facts[5]:
            self.requires_grad = True
            if facts[8] is not None:
                self.grad_bytes += facts[8][1][1]
        self.movable = self.movable and facts[2] != "meta"

    def add_record(self, record: Record) -> None:
        self.count += 1
        self.types.add(record.type)
        self.dtypes.add(record.dtype or "?")
        self.numel += record.numel
        self.requires_grad = self.requires_grad or record.requires_grad
        self.grad_bytes += record.grad_bytes
        self.movable = self.movable and record.movable

    def record(self, value: Any, name: str, storages: dict, walk: _ContainerWalk) -> Record:
        by_device = _bytes_by_device(storages)
        devices = tuple(sorted(by_device, key=device_sort_key))
        element_type = next(iter(self.types)) if len(self.types) == 1 else "mixed"
        note = f"{self.count:,} {element_type} objects"
        if walk.truncated:
            note += f"; stopped after {CONTAINER_ELEMENT_CAP:,} elements, the rest is not counted"
        return Record(
            name,
            name,
            "container",
            f"{type(value).__name__}[{element_type}]",
            devices,
            next(iter(self.dtypes)) if len(self.dtypes) == 1 else "mixed",
            None,
            self.numel,
            sum(by_device.values()),
            sum(nbytes for _, nbytes in storages.values()),
            self.requires_grad,
            self.grad_bytes,
            by_device,
            mixed=len(devices) > 1,
            note=note,
            movable=self.movable,
            element_count=self.count,
            truncated=walk.truncated,
        )


def _bytes_by_device(storages: Mapping[tuple, tuple[str, int]]) -> dict[str, int]:
    by_device: dict[str, int] = {}
    for device, nbytes in storages.values():
        by_device[device] = by_device.get(device, 0) + (0 if device == "meta" else nbytes)
    return by_device


# --------------------------------------------------------------------------------------------
# Plain tensors: the common case, kept as one compact tuple per name. A Record costs more to
# build than reading the tensor, and most scans (the hook's, after every cell) never look at
# records of tensors nobody changed, so records are built from these tuples only when asked.


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
        # .grad of a non-leaf tensor makes torch warn: only leaves (or retain_grad) have one
        if requires_grad and (tensor.is_leaf or tensor.retains_grad):
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


def _batch_tensor_facts(
    T: _Torch, names: list[str], tensors: list[Any], into: dict[str, Any]
) -> list[str]:
    """:func:`_plain_tensor_facts` for many tensors at once, column-wise (the full scan's hot
    path); falls back to one at a time if any of them needs the careful path. Returns the
    names to look at again in every rescan (grad-carrying tensors and Parameters)."""
    try:
        devices = _device_names_of(T, tensors)
        storages = list(map(T.Tensor.untyped_storage, tensors))
        pointers = list(map(T.UntypedStorage.data_ptr, storages))
        if 0 in pointers:
            raise ValueError("storages without data pointers")
        sizes = list(map(T.UntypedStorage.nbytes, storages))
        requires_grad = list(map(_get_requires_grad, tensors))
        grads: list[Any] = [None] * len(tensors)
        if True in requires_grad:
            for index, flag in enumerate(requires_grad):
                if flag:
                    grads[index] = _plain_tensor_facts(T, tensors[index], T.Tensor)[8]
        into.update(
            zip(
                names,
                zip(
                    map(id, tensors),
                    map(type, tensors),
                    devices,
                    map(_get_dtype, tensors),
                    map(_get_shape, tensors),
                    requires_grad,
                    zip(devices, pointers, strict=True),
                    sizes,
                    grads,
                    strict=True,
                ),
                strict=True,
            )
        )
        volatile = list(compress(names, requires_grad))
        if T.Parameter in set(map(type, tensors)):
            volatile += [n for n, t in zip(names, tensors, strict=True) if type(t) is T.Parameter]
        return volatile
    except Exception:
        volatile = []
        for name, tensor in zip(names, tensors, strict=True):
            entry = _inspect(T, name, tensor)
            if entry is None:
                into.pop(name, None)
                continue
            into[name] = entry
            if _entry_volatile(entry):
                volatile.append(name)
        return volatile


def _facts_storages(facts: tuple) -> dict[tuple, tuple[str, int]]:
    storages = {facts[6]: (facts[2], facts[7])}
    if facts[8] is not None:
        storages[facts[8][0]] = facts[8][1]
    return storages


def _facts_record(T: _Torch, name: str, facts: tuple, root: str | None = None) -> Record:
    _, tp, device, dtype, shape, requires_grad, _, nbytes, grad = facts
    numel = shape.numel()
    actual = 0 if device == "meta" else nbytes
    grad_bytes = 0 if grad is None or grad[1][0] == "meta" else grad[1][1]
    return Record(
        name,
        root or name,
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
            submodules = _live_submodules(entry.ref)
            return submodules is not None and _module_signature(T, submodules) == entry.signature
        if kind == "optimizer":
            return entry.ref() is value and _optimizer_signature(T, value) == entry.signature
    except Exception:
        return False
    return False  # tensors with requires_grad / Parameters: cheap enough to look again


def scan(
    namespace: Mapping[str, Any],
    *,
    include_hidden: bool = False,
    previous: Inventory | None = None,
    changed: Iterable[str] = (),
    recheck: bool = True,
) -> Inventory:
    """Inventory of the tensors, modules, optimizers and tensor containers in ``namespace``.

    ``recheck=False``: the caller knows nothing could have reached a module or an optimizer
    since ``previous`` (the hook decides this from the names a cell mentions), so their
    signatures are not computed again; rebound and ``changed`` names still are.

    ``previous``: the last Inventory of the same namespace. Only names bound to a different
    object since then, names in ``changed`` (the hook passes the names a cell assigned, which
    catches a freed object's id reused by a new one), and modules / optimizers / grad-carrying
    tensors whose cheap signature moved are inspected again; the rest is reused as it was.
    """
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "Tensor") or not hasattr(torch, "optim"):
        return Inventory({}, [], [], set(), torch_imported=False, include_hidden=include_hidden)
    T = _Torch(torch)
    try:
        if type(namespace) is dict:  # values() follows keys() order in a plain dict
            keys, values = list(namespace), list(namespace.values())
        else:
            keys = list(namespace)
            values = list(map(namespace.__getitem__, keys))
    except Exception:  # a Mapping that changed while we read it: take a snapshot
        snapshot = dict(namespace.items())
        keys, values, namespace = list(snapshot), list(snapshot.values()), snapshot
    ids = list(map(id, values))
    if previous is not None and previous.torch_imported and previous._keys:
        entries, volatile = _rescan(T, namespace, keys, ids, previous, changed, recheck)
    else:
        entries, volatile = _full_scan(T, keys, values)
    hidden = _hidden_entries(T, namespace, entries) if include_hidden else {}
    inventory = Inventory(
        entries,
        keys,
        ids,
        volatile,
        torch_imported=True,
        include_hidden=include_hidden,
        hidden=hidden,
        torch=T,
        record_cache=previous._record_cache if previous is not None else None,
    )
    if previous is not None:
        before, after = previous._entries, entries
        if volatile == previous._volatile and all(before.get(n) is after.get(n) for n in volatile):
            # no module or optimizer changed since the previous scan
            inventory.objects_changed = False
            inventory._owned_keys = previous._owned_keys
    return inventory


def _full_scan(T: _Torch, keys: list[str], values: list[Any]) -> tuple[dict[str, Any], set[str]]:
    tensor_type, parameter_type = T.Tensor, T.Parameter
    kinds = list(map(type, values))
    # Plain tensors and Parameters, most of a namespace, are picked out column-wise.
    plain = [kind is tensor_type or kind is parameter_type for kind in kinds]
    plain_names = list(compress(keys, plain))
    plain_tensors = list(compress(values, plain))
    if any(map(_maybe_bookkeeping, plain_names)):  # `_`, `_12`... can hold a tensor
        keep = [not is_ipython_bookkeeping(name) for name in plain_names]
        plain_names = list(compress(plain_names, keep))
        plain_tensors = list(compress(plain_tensors, keep))
    entries: dict[str, Any] = {}
    volatile: set[str] = set()
    for name, value, is_plain in zip(keys, values, plain, strict=True):
        if is_plain or is_ipython_bookkeeping(name):
            continue
        entry = _inspect(T, name, value)
        if entry is not None:
            entries[name] = entry
            if _entry_volatile(entry):
                volatile.add(name)
    volatile.update(_batch_tensor_facts(T, plain_names, plain_tensors, entries))
    # the namespace's own order (definition order): the DataFrame and the views follow it
    return {name: entries[name] for name in keys if name in entries}, volatile


def _maybe_bookkeeping(name: str) -> bool:
    return name[:1] == "_" or name in IPYTHON_NAMES


def _rescan(
    T: _Torch,
    namespace: Mapping[str, Any],
    keys: list[str],
    ids: list[int],
    previous: Inventory,
    changed: Iterable[str],
    recheck: bool = True,
) -> tuple[dict[str, Any], set[str]]:
    entries = dict(previous._entries)
    volatile = set(previous._volatile)
    known = len(previous._keys)
    if keys[:known] == previous._keys:
        # the usual cell: same names, some rebound, perhaps a few new ones at the end
        stale = list(compress(keys, map(ne, ids, previous._ids)))
        stale += keys[known:]
    else:
        current = dict(zip(keys, ids, strict=True))
        before = dict(zip(previous._keys, previous._ids, strict=True))
        stale = [name for name in keys if before.get(name) != current[name]]
        for gone in before.keys() - current.keys():
            entries.pop(gone, None)
            volatile.discard(gone)
    # Names the cell mentions: look again at plain tensors and containers among them (a freed
    # object's id may now belong to a new one). Modules and optimizers need not: their
    # signatures and weak references catch a replacement.
    # A name with no entry yet (an empty list the cell appended to: same id, so not stale)
    # is looked at again too, or its new tensors would be missed until a full scan.
    forced = [
        n
        for n in changed
        if (n in entries and not _entry_volatile(entries[n]))
        or (n not in entries and n in namespace)
    ]
    stale = list(dict.fromkeys(chain(stale, forced)))
    stale_set = set(stale)
    for name in list(volatile) if recheck else ():
        if name not in stale_set and not _still_same(T, entries[name], namespace.get(name)):
            stale.append(name)
    for name in stale:
        if is_ipython_bookkeeping(name):
            continue
        entry = _inspect(T, name, namespace.get(name))
        if entry is None:
            entries.pop(name, None)
            volatile.discard(name)
            continue
        entries[name] = entry
        if _entry_volatile(entry):
            volatile.add(name)
        else:
            volatile.discard(name)
    return entries, volatile


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
        keys: list[str],
        ids: list[int],
        volatile: set[str],
        *,
        torch_imported: bool,
        include_hidden: bool = False,
        hidden: dict[str, _Entry] | None = None,
        torch: _Torch | None = None,
        record_cache: dict[str, tuple[Any, list[Record]]] | None = None,
    ) -> None:
        self._torch = torch
        self._entries = entries
        # what the next incremental scan compares against: the namespace's names and ids
        self._keys = keys
        self._ids = ids
        self._volatile = volatile
        # name -> (entry, records): records of entries the next scan reuses are reused too
        self._record_cache: dict[str, tuple[Any, list[Record]]] = record_cache or {}
        self._hidden = hidden or {}
        self.torch_imported = torch_imported
        self.include_hidden = include_hidden
        self._records: list[Record] | None = None
        self._built: list[tuple[Any, list[Record]]] | None = None
        self._totals: dict[str, int] | None = None
        self._storages: dict[tuple, tuple[str, int]] | None = None
        self._owned_keys: set[tuple] | None = None
        #: False when a rescan found every module and optimizer as it was before
        self.objects_changed = True

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
            cache = self._record_cache
            fresh_cache: dict[str, tuple[Any, list[Record]]] = {}
            for name, entry in self._entries.items():
                if type(entry) is tuple:
                    cached = cache.get(name)
                    if cached is not None and cached[0] is entry:
                        pair = cached
                    else:
                        pair = (entry, [_facts_record(self._torch, name, entry)])
                else:
                    pair = (entry, entry.records)
                fresh_cache[name] = pair
                built.append(pair)
            built += [(entry, entry.records) for entry in self._hidden.values()]
            self._built = built
            self._record_cache = fresh_cache
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
        """``shares_with``: names whose storages overlap (aliases, views, tied weights).

        Counted over every storage key at once (C-level), so only the few entries that really
        share a storage do per-record work.
        """
        built = self._records_by_entry()
        counts = Counter(chain.from_iterable(_entry_storages(entry) for entry, _ in built))
        shared_keys = {key for key, count in counts.items() if count > 1}
        for _, records in built:
            for record in records:
                if record.shares_with:
                    record.shares_with = ()  # records are reused across scans: reset
        if not shared_keys:
            return
        owners: dict[tuple, list[str]] = {}
        for entry, records in built:
            if shared_keys.isdisjoint(_entry_storages(entry)):
                continue
            pairs = (
                zip(records, [_facts_storages(entry).keys()], strict=True)
                if type(entry) is tuple
                else entry.keys_per_record()
            )
            for record, keys in pairs:
                for key in shared_keys.intersection(keys):
                    names = owners.setdefault(key, [])
                    if record.name not in names:
                        names.append(record.name)
        shared: dict[str, set[str]] = {}
        for names in owners.values():
            for name in names:
                shared.setdefault(name, set()).update(n for n in names if n != name)
        for _, records in built:
            for record in records:
                others = shared.get(record.name)
                if others:
                    record.shares_with = tuple(sorted(others))

    # -- totals ------------------------------------------------------------------------------
    def _unique_storages(self) -> dict[tuple, tuple[str, int]]:
        if self._storages is None:
            entries = self._entries.values()
            merged = dict([(e[6], (e[2], e[7])) for e in entries if type(e) is tuple])
            merged.update([e[8] for e in entries if type(e) is tuple and e[8] is not None])
            for entry in entries:
                if type(entry) is not tuple:
                    merged.update(entry.storages)
            self._storages = merged
        return self._storages

    def storages(self) -> dict[tuple, tuple[str, int]]:
        """Every storage the listed objects reach, once: ``{storage key: (device, nbytes)}``.

        The key is ``(device, data_ptr)`` (or the storage's own address where there is no
        data pointer); ``nbytes`` is what the storage holds (what it would need, for meta).
        Memory accounting outside the inventory (holders, per-cell timelines) uses these keys so
        that nothing is counted twice."""
        return dict(self._unique_storages())

    def storages_of(self, name: str) -> dict[tuple, tuple[str, int]]:
        """The storages one top-level name (or hidden ``Out[...]`` label) reaches, like
        :meth:`storages` for that name alone; ``{}`` when it holds none. O(1) in the size of
        the namespace (per-cell memory accounting asks this for the names a cell touched)."""
        entry = self._entries.get(name)
        if entry is None:
            entry = self._hidden.get(name)
        return dict(_entry_storages(entry)) if entry is not None else {}

    def changed_since(self, previous: Inventory) -> list[str]:
        """Top-level names whose entry is not the very one ``previous`` had (looked at again,
        rebound, new), and names ``previous`` had that this one has not. Identity comparisons
        in C: an incremental consumer (the per-cell memory timeline) then updates only these
        instead of re-adding every storage."""
        now, before = self._entries, previous._entries
        names = list(now)
        changed = list(compress(names, map(is_not, map(before.get, names), now.values())))
        changed.extend(before.keys() - now.keys())
        return changed

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
        """Devices holding any storage of a visible name (meta included, at 0 bytes)."""
        return list(self.totals())

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

    def held_by_modules(self, name: str) -> bool:
        """Whether this name's tensor shares a storage with a module or optimizer here (a
        buffer or parameter under another name: changing it in place changes the module)."""
        entry = self._entries.get(name)
        if entry is None:
            return False
        keys = _entry_storages(entry).keys()
        return not self._module_keys().isdisjoint(keys)

    def _module_keys(self) -> set[tuple]:
        if self._owned_keys is None:
            owned: set[tuple] = set()
            for name in self._volatile:
                entry = self._entries.get(name)
                if entry is not None and type(entry) is not tuple:
                    owned.update(entry.storages)
            self._owned_keys = owned
        return self._owned_keys

    def mixed_records(self) -> list[Record]:
        """Modules spanning devices and optimizers whose state sits away from its parameters.
        Cheap: only modules and optimizers (always among the volatile names) are looked at."""
        entries = self._entries
        mixed = []
        for name in self._volatile:
            entry = entries.get(name)
            if entry is not None and type(entry) is not tuple:
                mixed.extend(record for record in entry.records if record.mixed)
        return mixed

    def orphaned_optimizers(self) -> list[tuple[str, int, int]]:
        """(name, unreachable, total) for optimizers that update parameters no name here
        reaches: a model rebuilt (its cell re-run) after the optimizer was made, or moved to
        meta (which makes new Parameters). ``opt.step()`` then trains tensors nobody sees."""
        entries = self._entries
        optimizers = [
            (name, entry)
            for name in self._volatile
            if type(entry := entries.get(name)) is _Entry
            and entry.records
            and entry.records[0].kind == "optimizer"
            and entry.tensor_ids
        ]
        if not optimizers:
            return []
        reachable: set[int] = set()
        for entry in entries.values():
            if type(entry) is tuple:
                reachable.add(entry[0])
            elif not (entry.records and entry.records[0].kind == "optimizer"):
                reachable.update(entry.tensor_ids)
        orphaned = []
        for name, entry in optimizers:
            unreachable = sum(1 for i in entry.tensor_ids if i not in reachable)
            if unreachable:
                orphaned.append((name, unreachable, len(entry.tensor_ids)))
        return orphaned

    def subset(self, names: Iterable[str]) -> Inventory:
        """The inventory of just these top-level names (what a cell read or created)."""
        wanted = set(names)
        entries = {name: e for name, e in self._entries.items() if name in wanted}
        return Inventory(
            entries,
            [],
            [],
            set(),
            torch_imported=self.torch_imported,
            torch=self._torch,
            record_cache=self._record_cache,
        )

    def mixed_warnings(self) -> list[str]:
        """One line per object whose parts sit on different devices, and per optimizer that
        trains parameters no name here reaches."""
        warnings = [orphan_warning(*orphan) for orphan in self.orphaned_optimizers()]
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


def orphan_warning(name: str, unreachable: int, total: int) -> str:
    held = "all" if unreachable == total else f"{unreachable} of"
    return (
        f"{name} updates {held} {total} parameters that no variable here holds "
        "(model re-created, or moved to meta, after the optimizer was made?): "
        "make the optimizer again"
    )


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


__all__ = [
    "Inventory",
    "Record",
    "DeviceTotal",
    "scan",
    "format_bytes",
    "is_ipython_bookkeeping",
    "device_sort_key",
]
