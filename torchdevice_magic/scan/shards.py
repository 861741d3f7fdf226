"""What a DTensor is on this rank: "shard k of N" of a global tensor, for its row's note.

A DTensor (``torch.distributed.tensor``, and every parameter FSDP2's ``fully_shard`` leaves) is
one global tensor spread over the ranks of a device mesh: its ``shape`` is the global shape, and
this rank holds a local piece (which is what the scan counts in bytes). The note says which piece
and how big the whole is, so a table of one rank reads right ("128 B here, shard 1 of 2 of
256 B"), read from the mesh's coordinate of this rank and the placements, without touching data.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import Any

from ..units import format_bytes

#: what a rank's piece is called for each placement type
_PIECES = {"Shard": "shard", "_StridedShard": "shard", "Replicate": "replica", "Partial": "partial"}


def dtensor_note(tensor: Any) -> str:
    """The note of a DTensor row: its piece on this rank, its placements, its global size."""
    placements = tuple(getattr(tensor, "placements", ()))
    mesh = getattr(tensor, "device_mesh", None)
    coordinate = mesh.get_coordinate() if mesh is not None else None
    mesh_shape = tuple(mesh.shape) if mesh is not None else ()
    return shard_note(
        coordinate,
        mesh_shape,
        [type(p).__name__ + placement_dim(p) for p in placements],
        tuple(tensor.shape),
        tensor.dtype.itemsize,
    )


def shard_note(
    coordinate: Sequence[int] | None,
    mesh_shape: Sequence[int],
    placements: Sequence[str],
    global_shape: Sequence[int],
    itemsize: int,
) -> str:
    """``DTensor shard 1 of 2 (Shard(0)); global 8×4, 128 B``: the piece this rank holds along
    each mesh dimension (``coordinate``, None for a rank outside the mesh), the placements as
    torch prints them, and the global size."""
    numel = 1
    for size in global_shape:
        numel *= size
    dims = "×".join(map(str, global_shape)) or "scalar"
    whole = f"global {dims}, {format_bytes(numel * itemsize)}"
    names = ", ".join(placements)
    if coordinate is None or len(coordinate) != len(placements):
        return f"DTensor not on this rank ({names}); {whole}"
    pieces = [
        f"{_PIECES.get(placement.partition('(')[0], 'piece')} {index} of {count}"
        for placement, index, count in zip(placements, coordinate, mesh_shape, strict=False)
    ]
    return f"DTensor {', '.join(pieces)} ({names}); {whole}"


def placement_dim(placement: Any) -> str:
    dim = getattr(placement, "dim", None)
    return f"({dim})" if isinstance(dim, int) else ""


def sharded_module_note(params: Iterable[Any]) -> str:
    """The note of a module whose parameters are DTensors (FSDP2's ``fully_shard``, or
    ``distribute_module``): how many, the piece this rank holds of the first, and the global
    size of them all. Empty for any other module, at no cost while ``torch.distributed.tensor``
    was never imported."""
    tensor_module = sys.modules.get("torch.distributed.tensor")
    dtensor = getattr(tensor_module, "DTensor", None)
    if dtensor is None:
        return ""
    sharded = [p for p in params if isinstance(p, dtensor)]
    if not sharded:
        return ""
    global_bytes = sum(p.numel() * p.dtype.itemsize for p in sharded)
    piece = dtensor_note(sharded[0]).removeprefix("DTensor ").partition(";")[0]
    return (
        f"{len(sharded)} sharded parameters (DTensor), this rank's {piece}; "
        f"global {format_bytes(global_bytes)}"
    )
