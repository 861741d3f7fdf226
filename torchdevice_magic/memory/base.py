"""What the holders and the timeline share: storage keys and their per-device sums, what one
reference holds (:class:`_Source`), the release counter, and one-level looks into top-level
containers.

Pure core: no IPython, no ipywidgets, torch never imported here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..scan import Inventory, bytes_by_device, scan

StorageKey = tuple[Any, ...]
Keys = dict[StorageKey, tuple[str, int]]

#: Types that never hold a tensor: skipped without a look.
_NOTHING_TO_HOLD = frozenset({int, float, complex, bool, str, bytes, type(None), range})
#: Bumped by every release and move (:func:`holders_changed`): the timeline re-measures what
#: it tracks when it changed.
_RELEASES = [0]


def holders_changed() -> None:
    """What the holders hold may have changed outside a cell (a release, or a move that gave
    the tensors a failed cell's frames reach new storages): the timeline measures every
    holder it tracks again at its next record, instead of the ones the cell touched."""
    _RELEASES[0] += 1


ErrorGetter = Callable[[], Any]


@dataclass
class _Source:
    """What one reference holds, before the named storages are subtracted."""

    where: str
    kind: str
    keys: Keys
    release: Callable[[], str] | None
    fix: str = ""
    count: int = 0
    token: Any = None  # identity of what it measured (the timeline's leak check)
    key: str = ""  # stable among a name's holders (the timeline follows it between cells)
    #: what to subtract instead of the named storages (an optimizer's own state is "named"
    #: under its name, but releasing the orphaned part frees it; a second name: nothing)
    subtract: Keys | None = None


def _keys_of(parts: Mapping[str, Any]) -> tuple[Inventory, Keys]:
    inventory = scan(parts)
    return inventory, inventory.storages()


def _root_keys(inventory: Inventory, root: str) -> Keys:
    storages_of = getattr(inventory, "storages_of", None)  # O(1) where the scanner has it
    if storages_of is not None:
        return storages_of(root)
    return inventory.subset([root]).storages()


def _by_device(keys: Mapping[StorageKey, tuple[str, int]]) -> dict[str, int]:
    """{device: bytes} of memory in use: the scan's one rule (meta occupies nothing), with
    meta left out."""
    return bytes_by_device(keys, list_meta=False)


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _shallow_items(value: Any) -> list[tuple[Any, Any]]:
    """(key, element) of a top-level list/tuple/dict, with the base classes' iteration (never a
    subclass's override); anything else: none."""
    try:
        if isinstance(value, dict):
            return list(dict.items(value))
        if isinstance(value, list):
            return list(enumerate(list.__iter__(value)))
        if isinstance(value, tuple):
            return list(enumerate(tuple.__iter__(value)))
    except Exception:
        pass
    return []
