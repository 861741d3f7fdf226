"""The budget: the bytes a plan will allocate on each target, and the free-memory check that
refuses a move, with the numbers, before anything is touched.

The figure is what the move allocates: each storage once (aliases, views and tied weights are
not counted twice), nothing already on its target, and on CUDA rounded up to the caching
allocator's 512-byte blocks, so it is what ``torch.cuda.memory_allocated`` will grow by
(``benchmarks/move.py`` checks it within 2% on a GPU).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..devices import free_bytes as device_free_bytes
from ..objects import tensor_bytes
from ..units import format_bytes
from .jobs import Plan, storage_of
from .result import MoveError

#: the CUDA caching allocator hands out blocks in multiples of this many bytes
CUDA_BLOCK = 512


class Budget(NamedTuple):
    """What a plan allocates."""

    need: dict[Any, int]  # target device -> bytes allocated there (CUDA: in whole blocks)
    data_bytes: int  # the bytes of data the move copies (no rounding): what progress counts


def allocated_on(device: Any, nbytes: int) -> int:
    """The bytes a storage of ``nbytes`` takes on ``device``."""
    if device.type == "cuda":
        return -(-nbytes // CUDA_BLOCK) * CUDA_BLOCK
    return nbytes


def needed_bytes(plan: Plan) -> Budget:
    """The bytes the plan will allocate on each target. Also sets each module job's
    ``nbytes`` (what progress counts for it)."""
    need: dict[Any, int] = {}
    counted: set[tuple[Any, Any]] = set()
    data = 0

    def add(want: Any, snb: int) -> int:
        nonlocal data
        data += snb
        need[want] = need.get(want, 0) + allocated_on(want, snb)
        return snb

    for job in plan.modules.values():
        total = 0
        for record in job.params:
            want = job.target_of(record.param)
            for t in (record.data, record.grad_data):
                if t is None or t.device == want:
                    continue
                key, snb, _s = storage_of(t)
                if (key, want) not in counted:
                    counted.add((key, want))
                    total += add(want, snb)
        for buffer in job.buffers:
            b = buffer.buffer
            want = job.target_of(b)
            if b.device == want or (buffer.storage_key, want) in counted:
                continue
            counted.add((buffer.storage_key, want))
            total += add(want, storage_of(b)[1])
        job.nbytes = total
    for gkey, members in plan.groups.items():
        if gkey in counted:  # aliases a module's tensor: lands in the same storage
            continue
        if len(members) == 1:
            t = members[0].tensor
            snb = members[0].storage_bytes if t._base is None else tensor_bytes(t)
        else:
            snb = members[0].storage_bytes
        add(gkey[1], snb)
    for bulk in plan.bulk:
        data += sum(bulk.nbytes)
        if bulk.dest.type == "cuda":
            size = sum(allocated_on(bulk.dest, n) for n in bulk.nbytes)
        else:
            size = sum(bulk.nbytes)
        need[bulk.dest] = need.get(bulk.dest, 0) + size
    return Budget(need, data)


def check_memory(need: dict[Any, int], free_bytes: int | None) -> None:
    """:class:`MoveError` with the numbers when what lands on a target does not fit in its
    free memory (``free_bytes`` replaces the device's figure: tests simulate a full device)."""
    for target, nbytes in need.items():
        if nbytes <= 0:
            continue
        if free_bytes is not None:
            free: int | None = int(free_bytes)
        elif target.type == "meta":
            free = None  # meta stores nothing
        else:
            free = device_free_bytes(target)
        if free is not None and nbytes > free:
            raise MoveError(
                f"needs {format_bytes(nbytes)}, {format_bytes(max(free, 0))} free on "
                f"{target} — nothing was moved"
            )
