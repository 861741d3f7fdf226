"""The plain tensors of a namespace as columns, for the scan (:mod:`.scanner`): most of a big
namespace is exact ``torch.Tensor``s bound to top-level names, read by a full scan
column-wise (:func:`_read_columns`, the scan's hot path) into one :class:`_Columns`, which the
inventories of the rescans that follow share. Records are built from the columns only when a
view asks, many at once field by field (:func:`_bulk_records`). Tensors that need more care
(gradients, Parameters, no data pointer) go one at a time through
:func:`.inspection._inspect`.

Pure core: no IPython, no ipywidgets, never imports torch. Columns hold ids, device names,
dtypes, shapes, storage pointers and sizes: never a tensor.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from itertools import compress, repeat
from math import prod
from operator import and_, is_, not_
from typing import Any

from ..objects import StorageKey, TorchTypes
from ..records import Record
from .entries import _entry_volatile
from .facts import _device_names_of, _get_dtype, _get_requires_grad, _get_shape, _is_cpu
from .inspection import _inspect


class _Columns:
    """Plain tensors bound to top-level names, read column-wise by a full scan: the bulk of a
    namespace. One object per full scan, shared (never changed) by the inventories of the
    rescans that follow; names rebound since are listed in the state's ``dropped``.

    Only exact ``torch.Tensor``s without ``requires_grad`` and with a data pointer are here:
    nothing about them can change without rebinding the name (or the cell naming it), so they
    are never looked at again. Records are built from the columns only when a view asks, once
    per tensor, and kept here for the inventories that share these columns."""

    __slots__ = (
        "names", "ids", "devices", "dtypes", "shapes", "pointers", "sizes", "_position",
        "_records", "_complete", "_keys",
    )  # fmt: skip

    def __init__(
        self,
        names: list[str],
        ids: list[int],
        devices: list[str],
        dtypes: list[Any],
        shapes: list[Any],
        pointers: list[int],
        sizes: list[int],
    ) -> None:
        self.names: list[str] = names
        self.ids: list[int] = ids
        self.devices: list[str] = devices
        self.dtypes: list[Any] = dtypes
        self.shapes: list[Any] = shapes
        self.pointers: list[int] = pointers
        self.sizes: list[int] = sizes
        self._position: dict[str, int] | None = None
        self._records: list[Record | None] | None = None
        self._complete = False  # every record built (all_records)
        self._keys: list[StorageKey] | None = None

    def __len__(self) -> int:
        return len(self.names)

    def position(self) -> dict[str, int]:
        if self._position is None:
            self._position = dict(zip(self.names, range(len(self.names))))  # noqa: B905
        return self._position

    def key(self, index: int) -> StorageKey:
        return (self.devices[index], self.pointers[index])

    def keys(self) -> list[StorageKey]:
        """Every column's storage key (made once: the columns never change). Read-only."""
        if self._keys is None:
            self._keys = list(zip(self.devices, self.pointers))  # noqa: B905 - same lengths
        return self._keys

    def all_records(self, T: TorchTypes) -> list[Record | None]:
        """Every column's record, built together (what opening a view on a big namespace
        waits for): field by field over all tensors, each pass a ``map`` in C, instead of one
        dataclass ``__init__`` per tensor (27 attribute sets and 6 default dicts each: ~9 us a
        record, 0.9 s for 100,000). The same records :meth:`record` builds one at a time."""
        records = self._records
        if records is not None and self._complete:
            return records
        count = len(self.names)
        if count < _BULK_RECORDS:
            return [self.record(T, index) for index in range(count)]
        self._complete = True
        built = _bulk_records(
            count,
            {
                "name": self.names,
                "root": self.names,
                "kind": repeat("tensor", count),
                "type": repeat("Tensor", count),
                "devices": map(tuple, zip(self.devices)),  # noqa: B905 - one column
                "dtype": map(T.dtype_name, self.dtypes),
                "shape": self.shapes,
                "numel": map(prod, self.shapes),
                "bytes": self.sizes,
                "would_need_bytes": self.sizes,
                "bytes_by_device": map(dict, map(_as_pairs, self.devices, self.sizes)),
            },
        )
        if records is not None:  # keep the records already handed out (identity matters)
            built = [old if old is not None else new for old, new in zip(records, built)]  # noqa: B905
        self._records = built  # type: ignore[assignment]
        return self._records  # type: ignore[return-value]

    def record(self, T: TorchTypes, index: int) -> Record:
        records = self._records
        if records is None:
            records = self._records = [None] * len(self.names)
        record = records[index]
        if record is None:
            shape = self.shapes[index]
            device = self.devices[index]
            nbytes = self.sizes[index]
            record = records[index] = Record(
                self.names[index],
                self.names[index],
                "tensor",
                "Tensor",
                (device,),
                T.dtype_name(self.dtypes[index]),
                shape,
                prod(shape),
                nbytes,
                nbytes,
                bytes_by_device={device: nbytes},
            )
        return record


#: Columns of at least this many tensors get their records built field by field (_bulk_records)
_BULK_RECORDS = 64


def _as_pairs(device: str, nbytes: int) -> tuple[tuple[str, int]]:
    return ((device, nbytes),)


def _bulk_records(count: int, values: dict[str, Iterable[Any]]) -> list[Record]:
    """``count`` Records whose fields come from ``values`` (one iterable per field), the rest
    at their defaults (a fresh dict each for dict fields: a record owns its dicts). Equal to
    ``Record(**fields)`` per row, but each field is set for all rows by one ``map`` over the
    slot's descriptor (Record is frozen with slots: its ``__init__`` sets every slot through
    ``object.__setattr__`` too; there is no ``__post_init__``)."""
    records = list(map(object.__new__, repeat(Record, count)))
    for field in dataclasses.fields(Record):
        setter = getattr(Record, field.name).__set__
        if field.name in values:
            column: Iterable[Any] = values[field.name]
        elif field.default_factory is not dataclasses.MISSING:
            factory = field.default_factory
            column = [factory() for _ in range(count)]
        else:
            column = repeat(field.default, count)
        deque(map(setter, records, column), maxlen=0)
    return records


#: Tensors read per batch of column passes: a batch's tensors stay in the CPU cache across the
#: passes (one pass per fact over 20,000 tensors would fetch each tensor from memory 7 times).
COLUMN_BATCH = 256


def _read_columns(
    T: TorchTypes,
    names: list[str],
    tensors: list[Any],
    types: list[type] | None,
    ids: list[int],
    into: dict[str, Any],
) -> tuple[_Columns, list[str]]:
    """The full scan's hot path: each plain tensor's facts read column-wise (``map`` over
    unbound methods and ``attrgetter``s, so the per-tensor loop runs in C), a batch of
    :data:`COLUMN_BATCH` tensors at a time. Grad-carrying tensors, Parameters and storages
    without a data pointer (empty, meta, wrapper devices) go to ``into`` one at a time.
    ``types``: each tensor's type (None: all exact ``torch.Tensor``). Returns the columns and
    the names to look at in every rescan."""
    untyped_storage = T.Tensor.untyped_storage
    data_ptr, nbytes = T.UntypedStorage.data_ptr, T.UntypedStorage.nbytes
    pointers: list[int] = []
    sizes: list[int] = []
    requires_grad: list[bool] = []
    on_cpu: list[bool] = []
    dtypes: list[Any] = []
    shapes: list[Any] = []
    columns: tuple[list[Any], ...] = (pointers, sizes, requires_grad, on_cpu, dtypes, shapes)
    for start in range(0, len(tensors), COLUMN_BATCH):
        batch = tensors[start : start + COLUMN_BATCH]
        try:
            storages = list(map(untyped_storage, batch))
            pointers += map(data_ptr, storages)
            sizes += map(nbytes, storages)
            requires_grad += map(_get_requires_grad, batch)
            on_cpu += map(_is_cpu, batch)
            dtypes += map(_get_dtype, batch)
            # plain tuples of ints (the collector stops tracking them), not torch.Size
            shapes += map(tuple, map(_get_shape, batch))
        except Exception:  # something unusual among them: pointer 0 sends each one careful
            for column, placeholder in zip(columns, (0, 0, False, True, None, None)):  # noqa: B905
                del column[start:]
                column += [placeholder] * len(batch)
    volatile: list[str] = []
    if 0 in pointers or True in requires_grad or (types is not None and T.Parameter in types):
        simple = list(map(and_, map(bool, pointers), map(not_, requires_grad)))
        if types is not None:
            simple = list(map(and_, simple, map(is_, types, repeat(T.Tensor))))
        other = list(map(not_, simple))
        volatile = _batch_careful(
            T, list(compress(names, other)), list(compress(tensors, other)), into
        )
        names, tensors, ids = (list(compress(c, simple)) for c in (names, tensors, ids))
        pointers, sizes = list(compress(pointers, simple)), list(compress(sizes, simple))
        on_cpu = list(compress(on_cpu, simple))
        dtypes, shapes = list(compress(dtypes, simple)), list(compress(shapes, simple))
    if False not in on_cpu:
        devices = ["cpu"] * len(tensors)
    else:  # devices only for those not on the CPU
        elsewhere = iter(_device_names_of(T, list(compress(tensors, map(not_, on_cpu)))))
        devices = ["cpu" if cpu else next(elsewhere) for cpu in on_cpu]
    return _Columns(names, ids, devices, dtypes, shapes, pointers, sizes), volatile


def _batch_careful(
    T: TorchTypes, names: list[str], tensors: list[Any], into: dict[str, Any]
) -> list[str]:
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


_NO_COLUMNS = _Columns([], [], [], [], [], [], [])
