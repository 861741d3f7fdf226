"""The budget and what a move reports: the free-memory check with its numbers, the bytes moved,
progress, and the bytes of replaced tensors that other references still hold."""

from __future__ import annotations

import pytest
import torch
from movekit import (
    HAS_CUDA,
    Holder,
    assert_same,
    make_namespace,
    snapshot,
)
from torch import nn

from torchdevice_magic import devices as device_discovery
from torchdevice_magic.moves import MoveError, MoveResult, move
from torchdevice_magic.moves.budget import check_memory
from torchdevice_magic.units import format_bytes


def test_not_enough_memory_is_refused_with_the_numbers() -> None:
    ns = {"big": torch.zeros(256, 1024), "small": torch.zeros(10)}
    ns["again"] = ns["big"]
    ns["part"] = ns["big"][:5]
    before = snapshot(ns)
    with pytest.raises(MoveError) as info:
        move(ns, "meta", free_bytes=1)
    assert str(info.value) == "needs 1.0 MiB, 1 B free on meta — nothing was moved"
    assert_same(before, snapshot(ns))
    with pytest.raises(MoveError, match=r"^needs 40 B, 39 B free on meta — nothing was moved$"):
        move(ns, "meta", names=["small"], free_bytes=39)
    assert move(ns, "meta", names=["small"], free_bytes=40).ok


def test_cpu_memory_is_checked_from_proc_meminfo() -> None:
    free = device_discovery.free_bytes(torch.device("cpu"))
    try:
        with open("/proc/meminfo") as f:
            has_meminfo = "MemAvailable:" in f.read()
    except OSError:
        has_meminfo = False
    assert (free is not None and free > 0) if has_meminfo else free is None


def test_summary_and_progress() -> None:
    ns = make_namespace()
    calls: list[tuple[int, int]] = []
    result = move(ns, "meta", progress=lambda d, t: calls.append((d, t)))
    assert calls[0] == (0, result.bytes_moved) and calls[-1] == (result.bytes_moved,) * 2
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:], strict=False))
    text = result.summary()
    assert text.startswith(f"Moved {len(result.moved)} objects (") and " to meta in " in text
    assert "\n" not in text
    assert MoveResult(device="meta", failed="x: boom").summary() == "Nothing was moved: x: boom"
    assert format_bytes(1023) == "1023 B" and format_bytes(3 * 2**30 + 2**29) == "3.5 GiB"


def test_progress_on_many_tensors_is_monotonic_and_complete() -> None:
    ns = {f"t{i}": torch.zeros(10) for i in range(1000)}
    calls: list[tuple[int, int]] = []
    result = move(ns, "meta", progress=lambda d, t: calls.append((d, t)))
    assert result.ok and len(result.moved) == 1000
    assert calls[0] == (0, 40_000) and calls[-1] == (40_000, 40_000)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:], strict=False))
    assert 10 < len(calls) <= 110  # throttled to about one call per percent


def test_still_held_bytes_counts_old_tensors_kept_elsewhere() -> None:
    class Holder:
        pass

    keep = Holder()
    x, y = torch.zeros(100), torch.zeros(50)
    keep.x = x  # an attribute: not part of the move
    ns = {"x": x, "y": y}
    del x, y
    result = move(ns, "meta")
    assert result.still_held_bytes == 400
    assert keep.x.device.type == "cpu"
    assert move({"z": torch.zeros(10)}, "meta").still_held_bytes == 0
    model = nn.Linear(4, 4)
    sd = model.state_dict()  # aliases of the parameters, not moved
    r = move({"model": model}, "meta")
    assert r.still_held_bytes == sum(v.untyped_storage().nbytes() for v in sd.values())


def test_still_held_counts_only_what_others_keep_of_moved_container_tensors() -> None:
    kept = torch.zeros(100)
    elsewhere = [kept]  # not part of the move
    ns = {"batch": {"x": kept, "y": torch.zeros(50)}, "obj": Holder()}
    ns["obj"].t = torch.zeros(25)
    result = move(ns, "meta")
    assert result.ok and result.still_held_bytes == 400
    assert elsewhere[0].device.type == "cpu" and ns["batch"]["x"].device.type == "meta"


def test_what_was_already_on_the_target_is_not_reported_as_still_held() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    model[1].to("meta")
    ns = {"model": model}
    result = move(ns, "meta")
    assert result.ok and result.still_held_bytes == 0
    assert result.bytes_moved == (8 * 8 + 8) * 4  # only the part that was on the cpu


def test_the_free_memory_check_reads_the_accelerators_own_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pre-check on a CUDA target, with the accelerator's figures replaced (no GPU here):
    free is what the driver reports plus what the caching allocator holds unused."""
    gib = 2**30
    driver_free, total = 3 * gib, 8 * gib
    monkeypatch.setattr(
        torch.accelerator, "get_memory_info", lambda device=None: (driver_free, total)
    )
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (driver_free, total))
    cached = device_discovery.MemoryFigures(allocated=gib, reserved=gib + gib // 2)
    monkeypatch.setattr(device_discovery, "memory_figures", lambda device: cached)
    cuda = torch.device("cuda", 0)
    free = driver_free + gib // 2
    check_memory({cuda: free}, None)  # fits exactly
    with pytest.raises(MoveError) as info:
        check_memory({cuda: free + 512}, None)
    expected = f"needs {format_bytes(free + 512)}, {format_bytes(free)} free on cuda:0"
    assert str(info.value) == f"{expected} — nothing was moved"


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_the_free_memory_check_refuses_with_cudas_real_figures() -> None:
    """What the pre-check calls free is CUDA's own figure (the driver's free memory plus what
    the caching allocator holds unused); a move needing 4 MiB more is refused with those
    numbers before anything is touched. (An expanded tensor: 4 bytes of storage here, a full
    copy on the target.)"""
    torch.ones(1, device="cuda")  # the context, which a move creates anyway
    driver_free, _total = torch.cuda.mem_get_info(0)
    free = driver_free + max(torch.cuda.memory_reserved(0) - torch.cuda.memory_allocated(0), 0)
    assert device_discovery.free_bytes("cuda:0") == free
    elements = free // 4 + (1 << 20)
    ns = {"wide": torch.zeros(1).expand(elements)}
    with pytest.raises(MoveError) as info:
        move(ns, "cuda")
    need = -(-elements * 4 // 512) * 512
    expected = f"needs {format_bytes(need)}, {format_bytes(free)} free on cuda:0"
    assert str(info.value) == f"{expected} — nothing was moved"
    assert ns["wide"].device.type == "cpu"
