"""Compatibility names: the scan lives in :mod:`.scanner` (objects -> scanner -> Inventory),
its rows in :mod:`.records`. Kept so that ``from torchdevice_magic.inventory import ...`` in
user code and older branches keeps working; new code imports from those modules."""

from .records import DeviceTotal, Record
from .scanner import (
    AGGREGATE_ABOVE,
    CONTAINER_ELEMENT_CAP,
    MAX_CONTAINER_DEPTH,
    Inventory,
    Scanner,
    is_ipython_bookkeeping,
    orphan_warning,
    scan,
)
from .units import device_sort_key, format_bytes

__all__ = [
    "AGGREGATE_ABOVE",
    "CONTAINER_ELEMENT_CAP",
    "MAX_CONTAINER_DEPTH",
    "DeviceTotal",
    "Inventory",
    "Record",
    "Scanner",
    "device_sort_key",
    "format_bytes",
    "is_ipython_bookkeeping",
    "orphan_warning",
    "scan",
]
