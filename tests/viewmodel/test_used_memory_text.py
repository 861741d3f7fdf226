"""What an initialised CUDA device's used memory is made of (``used_memory_text``), from
figures in the shape torch.cuda reports them (mem_get_info, memory_reserved,
memory_allocated, list_gpu_processes), and the header and %devices carrying the line. The
CUDA-marked test reads the real device."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torchdevice_magic import scan
from torchdevice_magic import viewmodel as vm
from torchdevice_magic.devices import UsageFigures, usage_figures
from torchdevice_magic.units import format_bytes

GIB = 1024**3
MIB = 1024**2
# "I deleted the model and nvidia-smi still shows 6 GiB": an 80 GiB card with 6.5 GiB used,
# 1 GiB still in tensors (0.25 GiB of them in the user's variables), 5 GiB kept by the
# allocator's cache, and 0.5 GiB for the context
DELETED_MODEL = UsageFigures(
    total=80 * GIB, free=80 * GIB - 6 * GIB - 512 * MIB, reserved=6 * GIB, allocated=1 * GIB,
    processes=None, pid=4242,
)  # fmt: skip


def test_used_memory_is_split_into_what_holds_it() -> None:
    text = vm.used_memory_text("cuda:0", DELETED_MODEL, 256 * MIB)
    assert text == (
        "cuda:0: 6.5 GiB used of 80.0 GiB (what nvidia-smi shows) = 256.0 MiB in your "
        "variables + 768.0 MiB in tensors held outside them (%devices --holders) + 5.0 GiB "
        "cached by PyTorch's allocator (torch.cuda.empty_cache() returns it) + 512.0 MiB this "
        "process's CUDA context and other processes"
    )


def test_other_processes_are_named_when_nvml_lists_them() -> None:
    figures = UsageFigures(
        total=80 * GIB, free=80 * GIB - 10 * GIB, reserved=6 * GIB, allocated=6 * GIB,
        processes=((4242, 6 * GIB + 512 * MIB), (977, 3 * GIB + 512 * MIB)), pid=4242,
    )  # fmt: skip
    text = vm.used_memory_text("cuda:1", figures, 7 * GIB)  # more than allocated: clamped
    assert "6.0 GiB in your variables + 0 B in tensors held outside them" in text
    assert "+ 0 B cached by PyTorch's allocator" in text
    assert text.endswith(
        "+ 512.0 MiB this process's CUDA context + 3.5 GiB used by 1 other process (pid 977)"
    )
    alone = UsageFigures(80 * GIB, 79 * GIB, 512 * MIB, 0, ((4242, GIB),), 4242)
    assert vm.used_memory_text("cuda:0", alone, 0).endswith(
        "+ 512.0 MiB this process's CUDA context; no other process uses it"
    )


def test_the_header_carries_the_notes_for_every_view() -> None:
    inventory = scan({"x": torch.ones(4)})
    note = vm.used_memory_text("cuda:0", DELETED_MODEL, 0)
    head = vm.header(inventory, device_notes=["CUDA was first initialised by cell [3]", note])
    assert head.to_wire()["device_notes"] == ["CUDA was first initialised by cell [3]", note]
    from torchdevice_magic.render import Table

    table = repr(Table(inventory, device_notes=[note]))
    assert note in table.splitlines()[1:3]
    assert vm.header(scan({})).device_notes == ()


def test_without_cuda_initialised_nothing_is_read() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        pytest.skip("CUDA is initialised in this process")
    assert usage_figures("cuda:0") is None and usage_figures("cpu") is None
    assert not torch.cuda.is_initialized()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_the_figures_add_up_to_what_the_driver_says() -> None:
    x = torch.ones(256, 1024, 1024, device="cuda")  # 1 GiB in a variable
    del_me: Any = torch.ones(256, 1024, 1024, device="cuda")
    del del_me  # freed: its 1 GiB stays in the allocator's cache
    figures = usage_figures("cuda:0", processes=True)
    assert figures is not None and figures.allocated >= x.nbytes
    assert figures.reserved - figures.allocated >= GIB
    text = vm.used_memory_text("cuda:0", figures, x.nbytes)
    used = format_bytes(figures.total - figures.free)
    assert text.startswith(f"cuda:0: {used} used of {format_bytes(torch.cuda.mem_get_info(0)[1])}")
    assert f"{format_bytes(x.nbytes)} in your variables" in text
    torch.cuda.empty_cache()
    after = usage_figures("cuda:0")
    assert after is not None and after.reserved - after.allocated < GIB
