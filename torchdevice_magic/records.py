"""The scan's typed, immutable results: one :class:`Record` per row, one :class:`DeviceTotal` per
device. Pure leaf (no torch, no IPython). Records are frozen: a scan builds each one complete
(sharing, hidden and root included) and later scans reuse records of objects that did not change.
The dict fields (``bytes_by_device``...) are owned by the record and never changed after it is
built."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

#: The note the scan gives an optimizer that never keeps state (torch's SGD without momentum),
#: unlike one that has none yet (Adam before its first step).
KEEPS_NO_STATE = "keeps no state (SGD without momentum)"
#: What a frame of records says of an optimizer that has no state yet (Adam before its first
#: step): the words the table's device column adds, ``cpu (params; no state yet)``.
NO_STATE_YET = "no state yet (it gets some at its first step)"
#: The columns of a frame of records (:meth:`Record.frame_row`).
FRAME_COLUMNS = [
    "name", "kind", "type", "device", "param_devices", "dtype", "shape", "numel", "bytes",
    "would_need_bytes", "requires_grad", "grad_bytes", "shares_with", "hidden", "mixed", "note",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Record:
    """One row of the inventory: a top-level name, an element of a small container or object
    (``trainer.model``, ``batch['x']``), or one aggregated big container."""

    name: str
    root: str
    kind: str  # "tensor" | "parameter" | "module" | "optimizer" | "container" | "unreadable"
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
    #: why ``movable`` is False, in one line ("" when movable)
    movable_reason: str = ""
    #: for what moves with its name: each DataLoader that name holds, with the devices of its
    #: data, which stays there when the name moves (its batches move in the training loop)
    loader_data_stays: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # modules
    param_count: int = 0
    param_bytes: dict[str, int] = field(default_factory=dict)
    buffer_bytes: dict[str, int] = field(default_factory=dict)
    #: its plain tensor attributes (``self.pe = pe``, not a buffer) not also parameters or
    #: buffers: in ``bytes_by_device``, but not what ``module.to()`` moves
    plain_bytes: dict[str, int] = field(default_factory=dict)
    grad_bytes_by_device: dict[str, int] = field(default_factory=dict)
    # optimizers
    state_bytes: dict[str, int] = field(default_factory=dict)
    param_devices: tuple[str, ...] = ()
    # containers
    element_count: int = 0
    truncated: bool = False

    @property
    def row_devices(self) -> tuple[str, ...]:
        """The devices a row names (its device column, the device sort): where its data is;
        for an optimizer without state, where the parameters it updates are. That optimizer
        holds no bytes of its own: totals and moves read ``devices``, never this."""
        if self.devices or self.kind != "optimizer":
            return self.devices
        return self.param_devices

    @property
    def device(self) -> str:
        """The device column's words: ``cpu``; ``cpu, cuda:0``; an optimizer without state
        says where its parameters are and that the device is theirs, ``cpu (params; no state
        yet)``; ``-`` for what holds no tensor."""
        if self.devices:
            return ", ".join(self.devices)
        if self.kind == "optimizer" and self.param_devices:
            state = "no state" if self.note == KEEPS_NO_STATE else "no state yet"
            return f"{', '.join(self.param_devices)} (params; {state})"
        return "-"

    def frame_row(self) -> dict[str, Any]:
        """The record as one row of a pandas DataFrame (:data:`FRAME_COLUMNS`), for filtering:
        ``device`` names where the data is and nothing else (one device, several joined by
        ", ", ``mixed`` says so, or ``""`` when it holds no data). The table's ``cpu (params;
        no state yet)`` for an optimizer without state is split into ``param_devices`` (where
        the parameters it updates are, for every optimizer) and ``note``."""
        row = {column: getattr(self, column) for column in FRAME_COLUMNS}
        row["device"] = ", ".join(self.devices)
        row["param_devices"] = ", ".join(self.param_devices)
        if self.kind == "optimizer" and not self.devices and not self.note:
            row["note"] = NO_STATE_YET
        return row

    def data_bytes(self) -> int:
        """The object's own data, gradients apart: the one size figure every view shows (the
        table's size column, the diagnosis); a module's ``bytes`` include its gradients."""
        if self.kind == "module":
            return max(self.bytes - self.grad_bytes, 0)
        return self.bytes

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


class ColumnRows(NamedTuple):
    """The plain tensors of a namespace as columns: what a view sorts, filters and counts
    without building a :class:`Record` per tensor (``Inventory.view_columns``). Each is an
    exact ``torch.Tensor`` bound to a top-level name, movable, without gradients, never
    hidden; its record has kind ``"tensor"``, type ``"Tensor"``, one device, and
    ``bytes == would_need_bytes == size``. Read-only lists (shared with the scan)."""

    names: list[str]
    devices: list[str]
    sizes: list[int]
    shared: frozenset[str]  # those sharing a storage with another name


NO_COLUMNS = ColumnRows([], [], [], frozenset())

__all__ = ["Record", "DeviceTotal", "ColumnRows", "NO_COLUMNS", "KEEPS_NO_STATE"]
