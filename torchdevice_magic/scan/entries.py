"""What one top-level name produced, for the scan (:mod:`.scanner`): :class:`_Entry` (its
records and storages, plus what it takes to know, next time, whether the name still holds the
same thing), the "unreadable" record of a hostile object, and the entries of modules and
optimizers with the signatures that tell a rescan whether they changed.

Containers and objects holding tensors are in :mod:`.composites`; :func:`.inspection._inspect`
picks the builder for a value. Pure core: no IPython, no ipywidgets, never imports torch.
Modules are read through :func:`.objects.module_parts`, optimizers through
:func:`.objects.optimizer_params` / :func:`.objects.optimizer_state_tensors`. An entry holds
weak references to modules and optimizers only, never to Parameters (torch's swap-based
``Module._apply`` refuses to swap tensors that have weak references).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from itertools import chain, compress, repeat
from operator import attrgetter, is_, is_not, ne
from typing import Any

from .. import objects
from ..objects import Kind, StorageKey, Storages, TorchTypes
from ..records import KEEPS_NO_STATE, Record
from ..units import device_sort_key, format_bytes
from .facts import (
    _data_ptr,
    _device_names_of,
    _facts_storages,
    _get_dtype,
    _get_grad,
    _needed_bytes,
    _read_storages,
    _sizes_by_device,
    _TensorFacts,
    bytes_by_device,
)
from .shards import sharded_module_note

# --------------------------------------------------------------------------------------------
# What one top-level name produced


#: how a module's row and warning say to make a plain tensor attribute move with it
LEFT_BEHIND_FIX = "register_buffer in its class makes it move with the module"


class _Entry:
    """What one top-level name produced (records, storages), plus what it takes to know, next
    time, whether the name still holds the same thing."""

    __slots__ = (
        "object_id", "records", "_storages", "_pending", "signature", "ref", "volatile",
        "record_keys", "tensor_ids", "structure", "kind", "loose",
    )  # fmt: skip

    def __init__(
        self,
        object_id: int,
        records: list[Record],
        storages: Storages,
        signature: Any = None,
        ref: Any = None,
        volatile: bool = False,
        kind: str = "",
    ) -> None:
        self.object_id = object_id
        self.records = records
        # storage key -> (device, nbytes); nbytes is what the storage *would* need on meta.
        self._storages = storages
        # storages of one device read as {pointer: nbytes}, keyed only when first asked
        self._pending: list[tuple[str, dict[int, int]]] | None = None
        self.signature = signature
        self.ref = ref
        self.volatile = volatile
        self.kind = kind or (records[0].kind if records else "")
        # For entries with several records (a small container): each record's storage keys.
        self.record_keys: list[Iterable[StorageKey]] | None = None
        # ids of the tensors this entry reaches (a module's parameters and buffers, a
        # container's tensors) or, for an optimizer, of the parameters it updates
        self.tensor_ids: tuple[int, ...] = ()
        # composites: the shape of what was walked (keys only), for objects.signature
        self.structure: objects.Spec | None = None
        # a module's plain tensor attributes: (its owner, weakly; the key; the tensor's id)
        self.loose: tuple[tuple[Any, str, int], ...] = ()

    @property
    def storages(self) -> Storages:
        """{storage key: (device, nbytes)}; a scan's one-device batches are keyed here, when
        first asked (building the (device, pointer) keys costs as much as reading them)."""
        pending = self._pending
        if pending is not None:
            keyed: Storages = {}
            for device, sizes in pending:
                keys = zip(repeat(device), sizes)
                keyed.update(zip(keys, zip(repeat(device), sizes.values())))  # noqa: B905
            keyed.update(self._storages)
            self._storages, self._pending = keyed, None
        return self._storages

    @storages.setter
    def storages(self, storages: Storages) -> None:
        self._storages, self._pending = storages, None

    def keys_per_record(self) -> Iterable[tuple[Record, Iterable[StorageKey]]]:
        if self.record_keys is None:
            return ((record, self.storages.keys()) for record in self.records)
        return zip(self.records, self.record_keys, strict=True)


def _entry_storages(entry: Any) -> Mapping[StorageKey, tuple[str, int]]:
    return _facts_storages(entry) if type(entry) is _TensorFacts else entry.storages


def _entry_spans_devices(entry: Any) -> bool:
    """Whether an entry lists a shown record on more than one device (a module, an optimizer
    or a container; a plain tensor's record never spans devices)."""
    return type(entry) is _Entry and any(r.mixed and not r.hidden for r in entry.records)


def _entry_volatile(entry: Any) -> bool:
    if type(entry) is _TensorFacts:
        # A tensor's grad can appear in any cell, and a Parameter can't be weakly referenced
        # (swap-based Module._apply refuses such tensors): look at both again next time.
        return entry.requires_grad or entry.type.__name__ == "Parameter"
    return entry.volatile


def _unreadable(name: str, value: Any, error: BaseException, root: str | None = None) -> Record:
    return Record(
        name,
        root or name,
        "unreadable",
        _safe_type_name(value),
        (),
        note=f"could not inspect: {type(error).__name__}",
        movable=False,
        movable_reason="could not be inspected",
    )


def _safe_type_name(value: Any) -> str:
    try:
        return type(value).__name__
    except Exception:
        return "?"


# --------------------------------------------------------------------------------------------
# Modules


_params_of = attrgetter("_parameters")
_buffers_of = attrgetter("_buffers")
_children_of = attrgetter("_modules")


def _module_signature(T: TorchTypes, submodules: list[Any]) -> tuple[Any, ...]:
    """What changes when a module moves, gains or drops gradients, or swaps a child/parameter.

    Built with ``map``/``chain`` over C-level getters: the hook computes this after every cell.
    TorchScript and lazy modules take the careful path (their dicts are not plain dicts, lazy
    parameters have no data pointer)."""
    try:
        params = chain.from_iterable(map(dict.values, map(_params_of, submodules)))
        buffers = chain.from_iterable(map(dict.values, map(_buffers_of, submodules)))
        tensors = [t for t in chain(params, buffers) if t is not None]
        children = chain.from_iterable(map(dict.values, map(_children_of, submodules)))
        return _signature_of(T, children, tensors, map(_get_grad, tensors))
    except Exception:
        parts = objects.module_parts(T, submodules[0])
        tensors = parts.params + parts.buffers
        return (
            tuple(map(id, parts.submodules)),
            tuple(map(id, tensors)),
            tuple(map(_data_ptr, tensors)),
            tuple(map(id, map(_get_grad, tensors))),
            tuple(parts.uninitialized),
        )


def _signature_of(
    T: TorchTypes, children: Iterable[Any], tensors: list[Any], grads: Iterable[Any]
) -> tuple[Any, ...]:
    """The eager module signature from its parts (the scan reads the grads once for both)."""
    return (
        tuple(map(id, children)),
        tuple(map(id, tensors)),
        tuple(map(T.Tensor.data_ptr, tensors)),
        tuple(map(id, grads)),
    )


def _scalar_cpu_buffers_apart(
    param_devices: list[str], buffers: list[Any], buffer_devices: list[str]
) -> bool:
    """Whether a module is on one device but for 0-dim buffers on the cpu."""
    mixing = set(param_devices)
    for buffer, device in zip(buffers, buffer_devices, strict=True):
        if not objects.mixes_with_any_device(buffer):
            mixing.add(device)
    return len(mixing) <= 1


def _module_dtypes(params: list[Any], buffers: list[Any]) -> set[Any]:
    """The dtypes a module's row names: its parameters' and its floating-point buffers'. An
    integer buffer (BatchNorm's ``num_batches_tracked``, a transformer's ``position_ids``) is a
    counter or an index, not the model's precision: counted, every CNN read "mixed"."""
    floating = [b for b in buffers if getattr(b.dtype, "is_floating_point", False)]
    found = set(map(_get_dtype, chain(params, floating)))
    return found or set(map(_get_dtype, buffers))


def _live_submodules(refs: list[Any]) -> list[Any] | None:
    submodules = list(map(weakref.ref.__call__, refs))
    return None if None in submodules else submodules


def _one_device_module(
    T: TorchTypes, params: list[Any], buffers: list[Any], grads: list[Any], devices: list[str]
) -> tuple[str, dict[int, int], dict[int, int], dict[int, int]] | None:
    """(device, {pointer: nbytes} of the parameters, of the buffers not sharing a parameter's
    storage, of the grads) when all of them (``devices``: their device names) are on one
    device with data pointers; else None."""
    if not devices or devices.count(devices[0]) != len(devices):
        return None
    device = devices[0]
    found: list[dict[int, int]] = []
    for tensors in (params, buffers, grads):
        if not tensors:
            found.append({})
            continue
        groups = _sizes_by_device(T, tensors, [device] * len(tensors))
        if groups is None:
            return None
        found.append(groups[0][1])
    param_sizes, buffer_sizes, grad_sizes = found
    if not param_sizes.keys().isdisjoint(buffer_sizes):
        buffer_sizes = {k: v for k, v in buffer_sizes.items() if k not in param_sizes}
    return device, param_sizes, buffer_sizes, grad_sizes


def _module_entry(T: TorchTypes, module: Any, name: str, root: str | None = None) -> _Entry:
    parts = objects.module_parts(T, module)
    submodules, params, buffers = parts.submodules, parts.params, parts.buffers
    param_devices = _device_names_of(T, params)
    buffer_devices = _device_names_of(T, buffers)
    if parts.tensors is not None and parts.edges is not None:  # eager: grads read once
        raw_grads = list(map(_get_grad, parts.tensors))
        signature = _signature_of(T, parts.edges, parts.tensors, raw_grads)
        grads = raw_grads[: parts.raw_params]
    else:
        signature = _module_signature(T, submodules)
        grads = list(map(_get_grad, params))
    if any(map(is_, grads, repeat(None))):  # by identity: `in` would call Tensor.__eq__
        grads = list(compress(grads, map(is_not, grads, repeat(None))))
    grad_devices = _device_names_of(T, grads)
    may_be_dispatched = _may_be_dispatched(submodules)
    loose = objects.plain_tensor_attributes(T, module, submodules)
    loose_tensors = [found.tensor for found in loose]
    loose_devices = _device_names_of(T, loose_tensors)
    # per-record bytes count each storage once (tied weights, parameters sharing a storage)
    pending = None
    dispatch = None
    offload_note = ""
    if not parts.extra and not may_be_dispatched and not loose:
        every_device = param_devices + buffer_devices + grad_devices
        pending = _one_device_module(T, params, buffers, grads, every_device)
    if pending is not None:  # the usual model: one device; keyed only when asked
        device, param_sizes, buffer_sizes, grad_sizes = pending
        param_bytes = {device: sum(param_sizes.values())} if param_sizes else {}
        buffer_bytes = {device: sum(buffer_sizes.values())} if buffer_sizes else {}
        grad_bytes = {device: sum(grad_sizes.values())} if grad_sizes else {}
        plain_bytes = {}
        combined = {**param_sizes, **buffer_sizes, **grad_sizes}
        needed = sum(combined.values())
        storages: Storages = {}
        by_device = {device: needed} if combined else {}
    else:
        param_storages: Storages = {}
        buffer_storages: Storages = {}
        _read_storages(T, params, param_devices, param_storages)
        _read_storages(T, buffers, buffer_devices, buffer_storages)
        plain_storages: Storages = {}
        _read_storages(T, loose_tensors, loose_devices, plain_storages)
        for (_, tensor), key in zip(parts.extra, parts.extra_keys, strict=True):
            device = T.device_name(tensor.device)
            param_devices.append(device)
            if key is None:
                objects.add_storages(T, tensor, device, param_storages)
            else:  # packed weights: unpacked on request, keyed by their packed holder
                packed_key = (device, *key)
                param_storages[packed_key] = (device, tensor.untyped_storage().nbytes())
        if may_be_dispatched:
            dispatch = objects.accelerate_dispatch(T, name, submodules)
        if dispatch is not None:
            offload_note = _place_offloaded(T, dispatch, param_storages, buffer_storages)
            param_devices = [device for device, _ in param_storages.values()]
            buffer_devices = [device for device, _ in buffer_storages.values()]
        for key in param_storages:
            buffer_storages.pop(key, None)
        for key in chain(param_storages, buffer_storages):
            plain_storages.pop(key, None)
        param_bytes = bytes_by_device(param_storages)
        buffer_bytes = bytes_by_device(buffer_storages)
        plain_bytes = bytes_by_device(plain_storages)
        storages = {**param_storages, **buffer_storages, **plain_storages}
        grad_storages: Storages = {}
        _read_storages(T, grads, grad_devices, grad_storages)
        grad_bytes = bytes_by_device(grad_storages)
        storages.update(grad_storages)
    param_count = sum(map(T.Tensor.numel, params)) + sum(t.numel() for _, t in parts.extra)
    device_set = set(param_devices) | set(buffer_devices) | set(loose_devices)
    notes: list[str] = []
    movable, movable_reason = True, ""
    if dispatch is not None:
        notes.append(offload_note)
        movable, movable_reason = False, dispatch.reason
    meta_params = "meta" in param_devices
    devices = tuple(sorted(device_set, key=device_sort_key))
    mixed = len(devices) > 1 and dispatch is None
    if mixed and _scalar_cpu_buffers_apart(
        param_devices, buffers + loose_tensors, buffer_devices + loose_devices
    ):
        # AveragedModel's ``n_averaged``: a 0-dim cpu tensor mixes with tensors of any device
        # in torch's ops, so it never makes a device error and is no reason to warn
        mixed = False
        notes.append("its 0-dim buffers on the cpu mix with any device")
    if mixed:
        notes.insert(0, f"spans {', '.join(devices)}")
        left = _left_behind_note(name, loose, loose_devices, param_devices)
        if left:
            notes.insert(1, left)
    if meta_params and dispatch is None:
        notes.append("meta parameters (no data)")
        movable, movable_reason = False, "meta parameters hold no data: use to_empty()"
    if parts.uninitialized:
        shown = ", ".join(parts.uninitialized[:3]) + ("..." if len(parts.uninitialized) > 3 else "")
        notes.append(f"uninitialized lazy parameters: {shown}")
    sharded = sharded_module_note(params)
    if sharded:
        notes.append(sharded)
        # the device mesh places the shards: the row's Move is off, with the mover's reason
        movable = False
        movable_reason = objects.sharded_reason(name, params) or movable_reason
    if pending is None:
        by_device = bytes_by_device(storages)
        needed = _needed_bytes(storages)
    dtypes = _module_dtypes(params, buffers)
    record = Record(
        name,
        root or name,
        "module",
        type(module).__name__,
        devices,
        T.dtype_name(dtypes.pop()) if len(dtypes) == 1 else ("mixed" if dtypes else None),
        None,
        param_count,
        sum(by_device.values()),
        needed,
        False,
        sum(grad_bytes.values()),
        by_device,
        mixed=mixed,
        note="; ".join(notes),
        movable=movable,
        movable_reason=movable_reason,
        param_count=param_count,
        param_bytes=param_bytes,
        buffer_bytes=buffer_bytes,
        plain_bytes=plain_bytes,
        grad_bytes_by_device=grad_bytes,
    )
    refs = list(map(weakref.ref, submodules))
    entry = _Entry(id(module), [record], storages, signature, refs, True, Kind.MODULE)
    if pending is not None:
        entry._pending = [(pending[0], combined)]
    entry.tensor_ids = tuple(map(id, chain(params, buffers, loose_tensors)))
    entry.loose = tuple((weakref.ref(found.owner), found.key, id(found.tensor)) for found in loose)
    return entry


def _left_behind_note(
    name: str, loose: list[objects.LooseTensor], devices: list[str], param_devices: list[str]
) -> str:
    """Names the plain tensor attributes away from the parameters, with why and the fix."""
    home = set(param_devices)
    away = [
        (f"{name}.{found.name}", device)
        for found, device in zip(loose, devices, strict=True)
        if device not in home and not objects.mixes_with_any_device(found.tensor)
    ]
    if not away:
        return ""
    shown = ", ".join(f"{where} on {device}" for where, device in away[:3])
    more = f" and {len(away) - 3} more" if len(away) > 3 else ""
    what = "is a plain tensor attribute" if len(away) == 1 else "are plain tensor attributes"
    return f"{shown}{more} {what}, which .to() does not move: {LEFT_BEHIND_FIX}"


def _place_offloaded(
    T: TorchTypes, dispatch: objects.Dispatch, params: Storages, buffers: Storages
) -> str:
    """Count an accelerate-dispatched model's weights where its hooks keep them: the meta
    tensors a hook holds the weights of leave ``params``/``buffers`` (they are not missing
    data), the weights held in memory come in under their device, the disk-offloaded ones
    under ``"disk"`` (memory-mapped files, not RAM). Returns the note that says where, and who
    decides."""
    standing_in: Storages = {}
    for tensor in dispatch.held:
        objects.add_storages(T, tensor, "meta", standing_in)
    for key in standing_in:
        params.pop(key, None)
        buffers.pop(key, None)
    in_memory: Storages = {}
    for _, tensor in dispatch.weights:
        objects.add_storages(T, tensor, T.device_name(tensor.device), in_memory)
    for key in chain(params, buffers):
        in_memory.pop(key, None)
    params.update(in_memory)
    params.update({key: ("disk", nbytes) for key, nbytes in dispatch.disk.items()})
    places = [
        f"{device} {format_bytes(nbytes)}"
        for device, nbytes in sorted(bytes_by_device(in_memory).items())
    ]
    if dispatch.disk:
        places.append(f"disk {format_bytes(sum(dispatch.disk.values()))} (memory-mapped)")
    owner = "accelerate's hooks own its placement"
    return f"offloaded: {', '.join(places)}; {owner}" if places else owner


_dict_of = attrgetter("__dict__")


def _may_be_dispatched(submodules: list[Any]) -> bool:
    """Whether accelerate put hooks or a device map on any submodule (instance dicts only)."""
    dicts = list(map(_dict_of, submodules))
    return any(map(dict.__contains__, dicts, repeat("_hf_hook"))) or any(
        map(dict.__contains__, dicts, repeat("hf_device_map"))
    )


# --------------------------------------------------------------------------------------------
# Optimizers


def _optimizer_signature(
    T: TorchTypes,
    optimizer: Any,
    params: list[Any] | None = None,
    values: list[Any] | None = None,
    value_types: set[type] | None = None,
) -> tuple[Any, ...]:
    """Changes when state appears, is replaced (load_state_dict, or a tensor swapped inside a
    parameter's state), when list state grows (LBFGS history), or when the parameters move.
    (``params``, ``values``, ``value_types``: what the caller already read, the same way.)"""
    state = optimizer.state
    if params is None:
        params = objects.optimizer_params(optimizer)
    if values is None:
        values = list(chain.from_iterable(map(dict.values, state.values())))
    if value_types is None:
        value_types = set(map(type, values))
    lists = tuple(len(v) for v in values if type(v) is list) if list in value_types else ()
    return (
        id(state),
        len(state),
        tuple(map(id, state.values())),
        tuple(map(id, values)),
        lists,
        tuple(map(T.Tensor.data_ptr, params)),
        # without state, whether it keeps none depends on the momentum (the row says which)
        () if state else _plain_sgd_momenta(T, optimizer),
    )


def _plain_sgd_momenta(T: TorchTypes, optimizer: Any) -> tuple[Any, ...]:
    """The momentum of each parameter group of torch's own SGD (which keeps state only with
    momentum), else ()."""
    if type(optimizer) is not T.torch.optim.SGD:
        return ()
    return tuple(group.get("momentum", 0) for group in optimizer.param_groups)


def _keeps_no_state(T: TorchTypes, optimizer: Any) -> bool:
    """Whether the optimizer never gets state: torch's SGD without momentum."""
    momenta = _plain_sgd_momenta(T, optimizer)
    return bool(momenta) and not any(momenta)


def _optimizer_entry(T: TorchTypes, optimizer: Any, name: str, root: str | None = None) -> _Entry:
    storages: Storages = {}
    tensor_type = T.Tensor
    all_params = objects.optimizer_params(optimizer)
    params = all_params
    if False in map(isinstance, params, repeat(tensor_type)):
        params = [p for p in params if isinstance(p, tensor_type)]
    param_devices = _device_names_of(T, params)
    state = optimizer.state
    per_param = list(state.values())
    all_dicts = set(map(type, per_param)) <= {dict}
    if not all_dicts:
        per_param = [value for value in per_param if isinstance(value, dict)]
    values = list(chain.from_iterable(map(dict.values, per_param)))
    value_types = set(map(type, values))
    owners: list[int] | None = None  # id of each state tensor's parameter, when needed
    is_tensor: list[bool] | None = None
    if value_types.isdisjoint((list, tuple, dict)):
        # the common case (SGD, Adam...): one tensor or number per state key, column-wise
        if value_types <= {tensor_type, T.Parameter}:
            state_tensors = values
        else:
            is_tensor = list(map(isinstance, values, repeat(tensor_type)))
            state_tensors = list(compress(values, is_tensor))
    else:  # LBFGS and friends keep lists of tensors in their state
        found = objects.optimizer_state_tensors(T, optimizer)
        state_tensors = [tensor for _, _, tensor in found]
        owners = [id(param) for param, _, _ in found]
    devices = _device_names_of(T, state_tensors)
    by_device_sizes = _sizes_by_device(T, state_tensors, devices)
    if by_device_sizes is not None:  # the usual case: summed here, keyed when asked
        totals = [(device, sum(sizes.values())) for device, sizes in by_device_sizes]
        needed = sum(total for _, total in totals)
        state_bytes = {device: 0 if device == "meta" else total for device, total in totals}
    else:
        _read_storages(T, state_tensors, devices, storages)
        state_bytes = bytes_by_device(storages)
        needed = _needed_bytes(storages)
    # torch keeps 0-dim ``step`` counters on the CPU on purpose: only real state counts, for
    # the mismatch check and for the devices the row shows (column-wise: Adam has 3 per param)
    state_devices = set(devices)
    parameter_device_set = set(param_devices)
    if params and len(state_devices | parameter_device_set) == 1:  # one device: all in place
        misplaced = 0
        real_devices = state_devices if any(map(T.Tensor.dim, state_tensors)) else set()
    else:
        if owners is None:
            owner_params = (
                list(state) if all_dicts else [p for p, v in state.items() if isinstance(v, dict)]
            )
            owner_ids = chain.from_iterable(map(repeat, map(id, owner_params), map(len, per_param)))
            owners = list(owner_ids if is_tensor is None else compress(owner_ids, is_tensor))
        param_device = dict(zip(map(id, params), param_devices, strict=True))
        real = list(map(T.Tensor.dim, state_tensors))
        real_state_devices = list(compress(devices, real))
        real_devices = set(real_state_devices)
        owner_devices = map(param_device.get, compress(owners, real), real_state_devices)
        misplaced = sum(map(ne, real_state_devices, owner_devices))
    by_device = dict(state_bytes)
    devices_present = tuple(sorted(real_devices or state_bytes, key=device_sort_key))
    parameter_devices = tuple(sorted(parameter_device_set, key=device_sort_key))
    note = ""
    if misplaced:
        note = (
            f"state on {', '.join(devices_present)} but parameters on "
            f"{', '.join(parameter_devices)}"
        )
    elif not state and _keeps_no_state(T, optimizer):
        note = KEEPS_NO_STATE
    record = Record(
        name,
        root or name,
        "optimizer",
        type(optimizer).__name__,
        devices_present,
        None,
        None,
        len(state),
        sum(by_device.values()),
        needed,
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
        _optimizer_signature(
            T, optimizer, all_params, *((values, value_types) if all_dicts else (None, None))
        ),
        weakref.ref(optimizer),
        True,
        Kind.OPTIMIZER,
    )
    if by_device_sizes is not None:
        entry._pending = by_device_sizes
    entry.tensor_ids = tuple(map(id, params))
    return entry
