"""Copies to CUDA through pinned staging buffers (moves/staging.py).

On the CPU the stager runs with pageable buffers standing in for pinned ones and recorded
events (``torch.cuda.Event`` and ``torch.empty`` replaced): the packing, the requests for pinned
memory, the non_blocking device copies and the ring's waits are checked call by call. Where a GPU
is (tests marked ``cuda``; ``./dev gpu-check`` runs them), a real move is checked: staged through
pinned memory with ``non_blocking``, one synchronisation, a ring of two buffers reused past
64 MiB, the pinned pool reused by the next move, and the memory prediction.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from movekit import HAS_CUDA
from torch import nn

from torchdevice_magic.moves import move, staging


class RecordedEvent:
    """Stands in for ``torch.cuda.Event``: each one is numbered, and what is done with it is
    logged, in order, on the class."""

    log: list[str] = []
    made = 0

    def __init__(self) -> None:
        self.number = RecordedEvent.made
        RecordedEvent.made += 1

    def record(self, stream: Any) -> None:
        self.log.append(f"record {self.number}")

    def synchronize(self) -> None:
        self.log.append(f"wait {self.number}")


class SmallStager(staging.PinnedStager):
    CHUNK = 1024  # bytes: a ring of two 1 KiB buffers


@pytest.fixture
def on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The stager on the CPU: pageable buffers (the requests for pinned memory are recorded),
    recorded events; returns the recorded ``torch.empty`` calls that asked for pinned memory."""
    requests: list[dict[str, Any]] = []
    real_empty = torch.empty

    def empty(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        if pin_memory:
            requests.append(dict(kwargs, size=args))
        return real_empty(*args, **kwargs)  # pageable stands in for pinned

    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch.cuda, "Event", RecordedEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    RecordedEvent.log = []
    RecordedEvent.made = 0
    return requests


def test_pinned_staging_packs_tensors_through_a_ring_of_buffers(
    on_the_cpu: list[dict[str, Any]],
) -> None:
    """The staging arithmetic (alignment, buffer switches, dtype views) on the CPU."""
    stager = SmallStager(torch, torch.device("cpu"))
    sources = [
        torch.randn(7),
        torch.arange(30, dtype=torch.int64),
        torch.tensor([True, False, True]),
        torch.randn(2, 3).half(),
        torch.tensor(3.5),
        torch.randn(100),
        torch.randn(60),
        torch.randn(200),
        torch.randn(200),
    ]
    assert all(stager.eligible(t) for t in sources)
    assert not stager.eligible(torch.randn(300))  # bigger than a buffer: copied directly
    assert not stager.eligible(torch.randn(4, 4).t())  # not contiguous
    copies = [stager.to(t) for t in sources]
    for source, copy in zip(sources, copies, strict=True):
        assert copy.dtype == source.dtype and copy.shape == source.shape
        assert torch.equal(copy, source) and copy.untyped_storage() is not None
        assert copy.data_ptr() != source.data_ptr()
    assert len(stager.buffers) == 2  # the ring, reused
    assert len(on_the_cpu) == 2 and all(r["dtype"] == torch.uint8 for r in on_the_cpu)


def test_the_ring_keeps_two_buffers_in_flight_and_waits_only_to_reuse_one(
    on_the_cpu: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two 400-byte tensors fit one 1 KiB buffer (64-byte aligned): eight tensors fill the
    ring twice. Each buffer is asked for pinned once; its event is recorded when the stager
    moves on, and waited for only when the ring comes back to it; every device copy is
    non_blocking and reads from a ring buffer."""
    copies: list[tuple[int, int, bool]] = []  # (destination pointer, source pointer, non_blocking)
    real_copy = torch.Tensor.copy_

    def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        copies.append((self.data_ptr(), src.data_ptr(), non_blocking))
        return real_copy(self, src, non_blocking)

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    stager = SmallStager(torch, torch.device("cpu"))
    sources = [torch.full((100,), float(i)) for i in range(8)]
    moved = [stager.to(t) for t in sources]
    assert all(torch.equal(m, s) for m, s in zip(moved, sources, strict=True))
    assert len(on_the_cpu) == 2 and len(stager.buffers) == 2
    assert RecordedEvent.log == ["record 0", "record 1", "wait 0", "record 2", "wait 1"]

    starts = [b.data_ptr() for b in stager.buffers]

    def ring_slot(pointer: int) -> tuple[int, int]:
        for index, start in enumerate(starts):
            if start <= pointer < start + SmallStager.CHUNK:
                return index, pointer - start
        raise AssertionError("not in a staging buffer")

    host, device = copies[0::2], copies[1::2]  # each tensor: into the ring, then out of it
    assert [ring_slot(dst) for dst, _src, _nb in host] == [(0, 0), (0, 448), (1, 0), (1, 448)] * 2
    assert all(not nb for _dst, _src, nb in host)
    assert [ring_slot(src) for _dst, src, _nb in device] == [ring_slot(d) for d, _s, _n in host]
    assert all(nb for _dst, _src, nb in device)


def test_staging_falls_back_to_plain_copies_without_pinned_memory() -> None:
    if torch.cuda.is_available():
        pytest.skip("pinned memory exists here")
    stager = staging.PinnedStager(torch, torch.device("cpu"))
    with pytest.raises(staging.NoPinnedMemory):
        stager.to(torch.ones(3))  # a CPU-only build has no pinned memory
    assert not stager.usable and not stager.eligible(torch.ones(3))


# ------------------------------------------------------------------------------------------
# CUDA: the real thing


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_bulk_move_to_cuda_is_staged_pinned_with_one_synchronisation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns: dict[str, Any] = {f"t{i}": torch.randn(1000 + i) for i in range(300)}
    ns["model"] = nn.Linear(64, 64)
    values = {k: v.detach().clone() for k, v in ns.items() if isinstance(v, torch.Tensor)}
    torch.cuda.synchronize()  # (before the count starts: only the move's own are counted)
    before = torch.cuda.memory_allocated()
    syncs: list[Any] = []
    real_sync = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: (syncs.append(d), real_sync(d)))
    staged: list[int] = []
    real_to = staging.PinnedStager.to
    monkeypatch.setattr(
        staging.PinnedStager, "to", lambda s, t: (staged.append(1), real_to(s, t))[1]
    )
    result = move(ns, "cuda")
    monkeypatch.undo()
    allocated = torch.cuda.memory_allocated() - before
    assert result.ok, result.failed
    assert syncs == [torch.device("cuda", 0)]
    assert len(staged) == 300 + 2  # every bulk tensor and the module's parameters
    for k, v in values.items():
        assert ns[k].device.type == "cuda" and torch.equal(ns[k].cpu(), v), k
    assert abs(allocated - result.predicted_bytes) <= 0.02 * result.predicted_bytes
    assert result.bytes_moved <= result.predicted_bytes


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_every_copy_to_cuda_reads_pinned_memory_and_does_not_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns: dict[str, Any] = {f"t{i}": torch.randn(500 + i) for i in range(50)}
    ns["model"] = nn.Linear(32, 32)
    ns["batch"] = {"x": torch.randn(8, 32), "y": torch.arange(8)}
    copies: list[tuple[str, str, bool, bool]] = []  # (to, from, source pinned, non_blocking)
    real_copy = torch.Tensor.copy_

    def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        pinned = src.device.type == "cpu" and src.is_pinned()
        copies.append((self.device.type, src.device.type, pinned, non_blocking))
        return real_copy(self, src, non_blocking)

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    result = move(ns, "cuda")
    monkeypatch.undo()
    assert result.ok, result.failed
    to_gpu = [c for c in copies if c[0] == "cuda"]
    assert len(to_gpu) == 50 + 2 + 2  # bulk tensors, the module's parameters, the batch
    assert all(c == ("cuda", "cpu", True, True) for c in to_gpu), set(to_gpu)
    into_pinned = [c for c in copies if c[0] == "cpu"]
    assert len(into_pinned) == len(to_gpu)  # each went through the ring first


class RecordingStager(staging.PinnedStager):
    """The stager a move makes, kept for the test to look at."""

    made: list[staging.PinnedStager] = []

    def __init__(self, torch: Any, dest: Any) -> None:
        super().__init__(torch, dest)
        RecordingStager.made.append(self)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_past_64_mib_the_ring_reuses_two_pinned_buffers_with_both_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five 40 MiB tensors: one per 64 MiB buffer. The second is staged while the first copy
    may still run (no wait before it); from the third on, each waits for the copy that last
    used its buffer, and the ring never grows past two buffers."""
    log: list[Any] = []
    real_event = torch.cuda.Event

    class Event(real_event):  # type: ignore[misc, valid-type]
        def synchronize(self) -> None:
            log.append("wait")
            super().synchronize()

    real_copy = torch.Tensor.copy_

    def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        if self.device.type == "cpu":
            log.append(self.data_ptr())  # staged at this pinned address
        return real_copy(self, src, non_blocking)

    RecordingStager.made = []
    monkeypatch.setattr(staging, "PinnedStager", RecordingStager)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    ns = {f"t{i}": torch.full((10 << 20,), float(i)) for i in range(5)}
    result = move(ns, "cuda")
    monkeypatch.undo()
    assert result.ok, result.failed
    (stager,) = RecordingStager.made
    starts = [b.data_ptr() for b in stager.buffers]
    assert len(starts) == 2 and stager.CHUNK == 64 << 20
    steps = [starts.index(x) if x != "wait" else "wait" for x in log]
    assert steps == [0, 1, "wait", 0, "wait", 1, "wait", 0]
    assert all(torch.equal(ns[f"t{i}"].cpu(), torch.full((10 << 20,), float(i))) for i in range(5))


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_the_next_move_reuses_the_pinned_buffers() -> None:
    """The ring's buffers come from torch's caching host allocator: once a move has made
    them, the next move gets them back instead of pinning new memory."""

    def fill() -> dict[str, torch.Tensor]:
        return {f"t{i}": torch.randn(4 << 20) for i in range(10)}  # 160 MiB: both buffers

    assert move(fill(), "cuda").ok
    made = torch.cuda.host_memory_stats()["num_host_alloc"]
    for _ in range(3):
        assert move(fill(), "cuda").ok
    assert torch.cuda.host_memory_stats()["num_host_alloc"] == made
