"""What a rank of a distributed job holds on another rank's device: the post-cell warning and
the header's notes.

Each rank should keep its tensors on its own local device (:func:`devices.own_device_index`,
THE rule for which one); the classic mistake is every rank allocating on ``cuda:0``, or
``torch.load`` without ``map_location`` putting each rank's copy where it was saved. Rank 1
holding a tensor on ``cuda:0`` takes memory rank 0 counts on, and mixes devices the first time it
meets its own. Pure core: plain records in, lines out.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from .devices import RankInfo, best_device, rank_info
from .records import Record


class _HasRecords(Protocol):
    @property
    def records(self) -> Sequence[Record]: ...


def new_rank_warnings(inventory: _HasRecords, warned: set[tuple[Any, ...]]) -> list[str]:
    """One line per object this rank holds on another rank's device that ``warned`` does not
    hold yet (it is added there). Nothing, and no record read, when this process is no rank."""
    info = rank_info()
    if not info.is_rank or "torch" not in sys.modules:
        return []
    own = best_device()
    found = []
    for name, type_name, device in foreign_placements(inventory.records, own, info):
        key = ("rank", name, device, own)
        if key not in warned:
            warned.add(key)
            found.append(foreign_warning(name, type_name, device, own, info))
    return found


#: the most objects the header names one by one; the rest are counted
HEADER_NOTES = 3


def rank_notes(inventory: _HasRecords) -> list[str]:
    """The header's lines (the widget, ``%devices`` and the sidebar show them) for what this
    rank holds on another rank's device now: one per object, the first :data:`HEADER_NOTES`
    of them, then how many more. Unlike :func:`new_rank_warnings`, every one, every time: the
    header says how things are, not what changed. Nothing when this process is no rank."""
    info = rank_info()
    if not info.is_rank or "torch" not in sys.modules:
        return []
    own = best_device()
    found = foreign_placements(inventory.records, own, info)
    lines = [foreign_warning(*placement, own, info) for placement in found[:HEADER_NOTES]]
    if len(found) > HEADER_NOTES:
        more = len(found) - HEADER_NOTES
        lines.append(f"and {more} more object{'s' * (more != 1)} on other ranks' devices")
    return lines


def foreign_placements(
    records: Iterable[Record], own: str, info: RankInfo
) -> list[tuple[str, str, str]]:
    """``(name, type, device)`` of each object a rank holds on an accelerator device that is not
    its own ``own`` (``"cuda:1"``): rank 1 holding a tensor on ``cuda:0`` takes memory another
    rank counts on, and mixes devices the first time it meets its own. CPU and meta are not
    devices of another rank. Empty when this process is no rank."""
    if not info.is_rank:
        return []
    kind = own.partition(":")[0]
    found = []
    for record in records:
        if record.hidden:
            continue
        for device in record.devices:
            if device.partition(":")[0] == kind and device != own:
                found.append((record.name, record.type, device))
                break
    return found


def foreign_warning(name: str, type_name: str, device: str, own: str, info: RankInfo) -> str:
    """One line for an object a rank holds on another rank's device."""
    return (
        f"{name} ({type_name}) is on {device}, but this process is {info.label()}, "
        f"whose device is {own}: move it with .to({own!r})"
    )
