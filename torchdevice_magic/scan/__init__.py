"""Which tensors, modules and optimizers live in a namespace, on which devices, taking how much.

Data flows one way, lowest first: :mod:`.facts` (what is read from one tensor) ->
:mod:`.entries` (what one name produced: a tensor, a module, an optimizer) -> :mod:`.composites`
(containers and objects holding tensors) -> :mod:`.inspection` (one name to its entry) ->
:mod:`.columns` (plain tensors kept column-wise) -> :mod:`.book` (the incremental bookkeeping)
-> :mod:`.inventory` (:class:`Inventory`, the immutable result) -> :mod:`.scanner`
(:class:`Scanner`, :func:`scan`: the full scan and the rescan).

Everything outside this package imports from here; the modules' private names stay inside.
"""

from .composites import AGGREGATE_ABOVE, CONTAINER_ELEMENT_CAP, MAX_CONTAINER_DEPTH
from .facts import bytes_by_device
from .inventory import Inventory, orphan_warning, register_drawing, spans_warning
from .scanner import Scanner, scan

__all__ = [
    "AGGREGATE_ABOVE",
    "CONTAINER_ELEMENT_CAP",
    "MAX_CONTAINER_DEPTH",
    "Inventory",
    "Scanner",
    "bytes_by_device",
    "orphan_warning",
    "register_drawing",
    "scan",
    "spans_warning",
]
