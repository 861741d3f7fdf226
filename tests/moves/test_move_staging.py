"""Copies to CUDA through pinned staging buffers: the ring's arithmetic on the CPU, the real
thing (pinned, non_blocking, one synchronisation) where a GPU is."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from movekit import (
    HAS_CUDA,
)
from torch import nn

from torchdevice_magic.moves import move


class _FakeEvent:
    log: list[str] = []

    def record(self, stream: Any) -> None:
        self.log.append("record")

    def synchronize(self) -> None:
        self.log.append("synchronize")


def test_pinned_staging_packs_tensors_through_a_ring_of_buffers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The staging arithmetic (alignment, buffer switches, waits, dtype views), run on the CPU
    with pageable buffers and fake events; the real thing is checked on CUDA below."""
    from torchdevice_magic.moves import staging

    class CpuStager(staging.PinnedStager):
        CHUNK = 1024

    real_empty = torch.empty

    def empty(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        return real_empty(*args, **kwargs)  # pageable stands in for pinned

    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    _FakeEvent.log = []
    stager = CpuStager(torch, torch.device("cpu"))
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
    assert _FakeEvent.log.count("record") >= 2 and "synchronize" in _FakeEvent.log


def test_staging_falls_back_to_plain_copies_without_pinned_memory() -> None:
    from torchdevice_magic.moves import staging

    copier = staging.Copier(torch)
    stager = staging.PinnedStager(torch, torch.device("cpu"))
    copier.stagers[torch.device("cpu")] = stager
    if torch.cuda.is_available():
        pytest.skip("pinned memory exists here")
    with pytest.raises(staging.NoPinnedMemory):
        stager.to(torch.ones(3))  # a CPU-only build has no pinned memory
    assert not stager.usable and not stager.eligible(torch.ones(3))


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_bulk_move_to_cuda_is_staged_pinned_with_one_synchronisation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchdevice_magic.moves import staging

    ns = {f"t{i}": torch.randn(1000 + i) for i in range(300)}
    ns["model"] = nn.Linear(64, 64)
    values = {k: v.detach().clone() for k, v in ns.items() if isinstance(v, torch.Tensor)}
    syncs: list[Any] = []
    real_sync = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: (syncs.append(d), real_sync(d)))
    staged: list[int] = []
    real_to = staging.PinnedStager.to
    monkeypatch.setattr(
        staging.PinnedStager, "to", lambda s, t: (staged.append(1), real_to(s, t))[1]
    )
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    result = move(ns, "cuda")
    allocated = torch.cuda.memory_allocated() - before
    assert result.ok, result.failed
    assert len(syncs) == 1
    assert len(staged) >= 300 + 2  # every bulk tensor and the module's parameters
    for k, v in values.items():
        assert ns[k].device.type == "cuda" and torch.equal(ns[k].cpu(), v), k
    assert abs(allocated - result.predicted_bytes) <= 0.02 * result.predicted_bytes
    assert result.bytes_moved <= result.predicted_bytes
