"""Containers and objects holding tensors (lists, dicts, tuples, dataclasses, plain objects:
what :func:`.objects.walk` walks), for the scan (:mod:`.scanner`): a record per tensor,
module or optimizer found inside, one aggregated record for a container holding more than
:data:`AGGREGATE_ABOVE` of them, and a "watch" entry (a signature, no records) for one that
holds nothing of ours yet. The container limits are defined here (re-exported by
:mod:`.scanner`).

Pure core: no IPython, no ipywidgets, never imports torch. Walks only through
:mod:`.objects`; keeps the shape of what was walked (keys, never values).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from itertools import compress
from math import prod
from typing import Any

from .. import objects
from ..objects import Kind, StorageKey, Storages, TorchTypes
from ..records import Record
from ..units import device_sort_key
from .entries import _Entry, _module_entry, _optimizer_entry, _unreadable
from .facts import (
    _device_names_of,
    _facts_record,
    _facts_storages,
    _get_dtype,
    _get_requires_grad,
    _grad_facts,
    _needed_bytes,
    _plain_tensor_facts,
    _read_storages,
    _tensor_record,
    _TensorFacts,
    bytes_by_device,
)

#: Containers nested deeper than this are not walked (a nested batch is rarely deeper).
MAX_CONTAINER_DEPTH = objects.MAX_DEPTH
#: The hard safety cap on elements visited in one container; hitting it is reported.
CONTAINER_ELEMENT_CAP = objects.ELEMENT_CAP
#: A container holding more tensors than this becomes one aggregated record.
AGGREGATE_ABOVE = 16


# --------------------------------------------------------------------------------------------
# Containers and objects holding tensors (walked by objects.walk)


def _composite_entry(T: TorchTypes, value: Any, name: str, kind: str) -> _Entry:
    if kind in objects.CONTAINERS and objects.size(value, kind) > AGGREGATE_ABOVE:
        # one C-level pass over the children's types decides the big containers
        types = objects.child_types(value, kind)
        if types is not None and objects.holds_nothing(T, types):
            return _watch_entry(T, value, ((-1, None, kind),))
        if types is not None and {T.Tensor, T.Parameter}.issuperset(types):
            tensors = objects.tensor_children(T, value, kind)
            if tensors is not None and len(tensors) <= CONTAINER_ELEMENT_CAP:
                return _tensor_list_entry(T, value, name, kind, tensors)
    walked = objects.walk(T, value, name, kind=kind)
    structure = objects.structure(walked)
    leaves = walked.leaves
    if not leaves:
        # nothing of ours (yet): watched by its structure, so an append shows up next time.
        # A plain object is watched by its own attributes only (added, removed, rebound):
        # thousands of config/record objects must cost next to nothing on rescans.
        if kind in objects.ATTRIBUTE_KINDS:
            structure = structure[:1]
        return _watch_entry(T, value, structure)
    parts = _CompositeParts(T, name)
    parts.read(value, walked)
    entry = _Entry(id(value), parts.records, parts.storages)
    entry.record_keys = parts.record_keys
    entry.kind = "composite"
    entry.volatile = parts.volatile or bool(parts.held)
    entry.ref = None if parts.volatile else parts.held
    entry.structure = structure
    entry.signature = objects.signature(T, value, structure)
    entry.tensor_ids = tuple(parts.reached)
    return entry


class _CompositeParts:
    """The records of one walked composite: a row per tensor, module or optimizer found
    inside, or one aggregated row for a group of more than :data:`AGGREGATE_ABOVE`. Each
    DataLoader's data is a group of its own (it stays where it is when the name moves), so
    its rows, small or aggregated, say so as the mover does."""

    def __init__(self, T: TorchTypes, name: str) -> None:
        self.T = T
        self.name = name
        self.storages: Storages = {}
        self.records: list[Record] = []
        self.record_keys: list[Iterable[StorageKey]] = []
        self.reached: list[int] = []
        self.volatile = False  # grad-carrying tensors inside: looked at again on every recheck
        #: modules and optimizers inside: (kind, weak reference(s), signature), checked cheaply
        self.held: list[tuple[str, Any, tuple[Any, ...]]] = []
        #: the devices of each DataLoader's data, and which records are that data
        self.stays: dict[str, set[str]] = {}
        self.loader_data: list[bool] = []

    def read(self, value: Any, walked: objects.Walk) -> None:
        leaves = walked.leaves
        loaders: list[str | None] = [None] * len(leaves)
        if any(node.kind == Kind.DATALOADER for node in walked.nodes):
            loaders = [objects.loader_above(walked, leaf.node) for leaf in leaves]
        # a walk cut short is one record (the mover does not split it either)
        groups: list[str | None] = [None] * len(leaves) if walked.truncated else loaders
        summaries = {
            group: _ContainerSummary()
            for group, count in Counter(groups).items()
            if count > AGGREGATE_ABOVE or walked.truncated
        }
        for leaf, loader, group in zip(leaves, loaders, groups, strict=True):
            self._add(leaf, loader, summaries.get(group))
        if summaries:
            holders = {node.path: node.value for node in walked.nodes}
            for group, summary in summaries.items():
                holder = value if group is None else holders[group]
                record = summary.record(holder, group or self.name, self.name, walked)
                self._append(record, tuple(summary.storages), group)
        if self.stays:
            self._say_what_stays()

    def _append(self, record: Record, keys: Iterable[StorageKey], loader: str | None) -> None:
        self.records.append(record)
        self.record_keys.append(keys)
        self.loader_data.append(loader is not None)
        if loader is not None:
            self.stays.setdefault(loader, set()).update(record.devices)

    def _say_what_stays(self) -> None:
        """Each row that moves with the name names the DataLoaders whose data stays, and
        where: its button says what the move does."""
        stays = tuple(
            (loader, tuple(sorted(found, key=device_sort_key)))
            for loader, found in self.stays.items()
        )
        self.records = [
            record if loader_data else replace(record, loader_data_stays=stays)
            for record, loader_data in zip(self.records, self.loader_data, strict=True)
        ]

    def _add(
        self, leaf: objects.Leaf, loader: str | None, summary: _ContainerSummary | None
    ) -> None:
        T, name = self.T, self.name
        path, item, item_kind = leaf.path, leaf.value, leaf.kind
        item_type = type(item)
        facts = None
        if item_type is T.Tensor or item_type is T.Parameter:
            self.reached.append(id(item))
            facts = _plain_tensor_facts(T, item, item_type)
        if facts is not None:
            own = _facts_storages(facts)
            self.volatile = self.volatile or facts.requires_grad
            if summary is not None:
                summary.add_facts(T, facts, loader is not None)
                summary.storages.update(own)
                self.storages.update(own)
                return
            record = _facts_record(T, path, facts, root=name)
        elif item_kind == Kind.MODULE or item_kind == Kind.OPTIMIZER:
            record, own = self._held_record(item, item_kind, path)
        else:
            self.reached.append(id(item))
            own = {}
            try:
                record = _tensor_record(T, item, item_type, path, name, own)
            except Exception as error:
                record = _unreadable(path, item, error, root=name)
            self.volatile = self.volatile or record.requires_grad
        self.storages.update(own)
        if summary is not None:
            summary.add_record(record, loader is not None)
            summary.storages.update(own)
            return
        if loader is not None:
            # what moves with its holder is the rest: the row's button says why not this
            record = replace(
                record,
                movable=False,
                movable_reason=objects.LOADER_DATA_STAYS,
                note=record.note or objects.LOADER_DATA_STAYS,
            )
        self._append(record, tuple(own), loader)

    def _held_record(self, item: Any, item_kind: str, path: str) -> tuple[Record, Storages]:
        """A module's or an optimizer's record inside the composite, and its storages."""
        try:
            if item_kind == Kind.MODULE:
                sub_entry = _module_entry(self.T, item, path, root=self.name)
                self.reached.extend(sub_entry.tensor_ids)
            else:
                sub_entry = _optimizer_entry(self.T, item, path, root=self.name)
            self.held.append((item_kind, sub_entry.ref, sub_entry.signature))
            return sub_entry.records[0], sub_entry.storages
        except Exception as error:
            self.volatile = True
            return _unreadable(path, item, error, root=self.name), {}


def _watch_entry(T: TorchTypes, value: Any, structure: objects.Spec) -> _Entry:
    """A composite holding nothing of ours (yet): no records, watched by its structure."""
    entry = _Entry(id(value), [], {}, objects.signature(T, value, structure), kind="watch")
    entry.structure = structure
    return entry


def _tensor_list_entry(
    T: TorchTypes, value: Any, name: str, kind: str, tensors: list[Any]
) -> _Entry:
    """A big container of plain tensors: one aggregated record, its facts read column-wise."""
    storages: Storages = {}
    devices = _device_names_of(T, tensors)
    _read_storages(T, tensors, devices, storages)
    requires_grad = list(map(_get_requires_grad, tensors))
    grad_bytes = 0
    if True in requires_grad:
        for tensor in compress(tensors, requires_grad):
            grad = _grad_facts(T, tensor)
            if grad is not None:
                storages[grad.key] = (grad.device, grad.nbytes)
                grad_bytes += 0 if grad.device == "meta" else grad.nbytes
    by_device = bytes_by_device(storages)
    device_names = tuple(sorted(by_device, key=device_sort_key))
    types = {tp.__name__ for tp in set(map(type, tensors))}
    element_type = types.pop() if len(types) == 1 else "mixed"
    dtypes = set(map(_get_dtype, tensors))
    movable = "meta" not in by_device
    record = Record(
        name,
        name,
        "container",
        f"{type(value).__name__}[{element_type}]",
        device_names,
        T.dtype_name(dtypes.pop()) if len(dtypes) == 1 else "mixed",
        None,
        sum(map(T.Tensor.numel, tensors)),
        sum(by_device.values()),
        _needed_bytes(storages),
        True in requires_grad,
        grad_bytes,
        by_device,
        mixed=len(device_names) > 1,
        note=f"{len(tensors):,} {element_type} objects",
        movable=movable,
        movable_reason="" if movable else "holds meta tensors (no data)",
        element_count=len(tensors),
    )
    entry = _Entry(id(value), [record], storages, kind="composite")
    entry.volatile = True in requires_grad
    entry.structure = ((-1, None, kind),)
    entry.signature = objects.signature(T, value, entry.structure)
    entry.tensor_ids = tuple(map(id, tensors))
    return entry


class _ContainerSummary:
    """What one aggregated record says about the thousands of objects in a container (or in
    one DataLoader's data)."""

    __slots__ = (
        "count", "types", "dtypes", "numel", "requires_grad", "grad_bytes", "movable",
        "loader_data", "storages",
    )  # fmt: skip

    def __init__(self) -> None:
        self.count = 0
        self.types: set[str] = set()
        self.dtypes: set[str] = set()
        self.numel = 0
        self.requires_grad = False
        self.grad_bytes = 0
        #: whether what moves with the name (all but a DataLoader's data) can move
        self.movable = True
        #: how many of the objects are a DataLoader's data (which stays where it is)
        self.loader_data = 0
        self.storages: Storages = {}

    def add_facts(self, T: TorchTypes, facts: _TensorFacts, loader_data: bool) -> None:
        self.count += 1
        self.types.add(facts.type.__name__)
        self.dtypes.add(T.dtype_name(facts.dtype))
        self.numel += prod(facts.shape)
        if facts.requires_grad:
            self.requires_grad = True
            if facts.grad is not None:
                self.grad_bytes += facts.grad.nbytes
        if loader_data:
            self.loader_data += 1
        else:
            self.movable = self.movable and facts.device != "meta"

    def add_record(self, record: Record, loader_data: bool) -> None:
        self.count += 1
        self.types.add(record.type)
        self.dtypes.add(record.dtype or "?")
        self.numel += record.numel
        self.requires_grad = self.requires_grad or record.requires_grad
        self.grad_bytes += record.grad_bytes
        if loader_data:
            self.loader_data += 1
        else:
            self.movable = self.movable and record.movable

    def record(self, value: Any, name: str, root: str, walked: objects.Walk) -> Record:
        by_device = bytes_by_device(self.storages)
        devices = tuple(sorted(by_device, key=device_sort_key))
        element_type = next(iter(self.types)) if len(self.types) == 1 else "mixed"
        if self.loader_data == self.count:
            # all of it is a DataLoader's data: the row says what the mover says
            movable, reason = False, objects.LOADER_DATA_STAYS
            note = reason
        else:
            movable = self.movable
            reason = "" if movable else "holds meta tensors (no data)"
            note = f"{self.count:,} {element_type} objects"
        if walked.truncated:
            note += f"; stopped after {walked.cap:,} elements, the rest is not counted"
            if self.loader_data < self.count:
                # the mover does not move what it could not walk to the end: nor does the row
                movable, reason = False, objects.cut_short_reason(root, walked)
                note += f"; {reason}"
        return Record(
            name,
            root,
            "container",
            f"{type(value).__name__}[{element_type}]",
            devices,
            next(iter(self.dtypes)) if len(self.dtypes) == 1 else "mixed",
            None,
            self.numel,
            sum(by_device.values()),
            _needed_bytes(self.storages),
            self.requires_grad,
            self.grad_bytes,
            by_device,
            mixed=len(devices) > 1,
            note=note,
            movable=movable,
            movable_reason=reason,
            element_count=self.count,
            truncated=walked.truncated,
        )
