"""What a rank of a distributed job holds on another rank's device: the post-cell warning.

Each rank should keep its tensors on its own local device (:func:`devices.own_device_index`,
THE rule for which one); the classic mistake is every rank allocating on ``cuda:0``, or
``torch.load`` without ``map_location`` putting each rank's copy where it was saved. Rank 1
holding a tensor on ``cuda:0`` takes memory rank 0 counts on, and mixes devices the first time it
meets its own. Pure core: plain records in, lines out.
"""

from __future__ import annotations

from collections.abc import Iterable

from .devices import RankInfo
from .records import Record


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
