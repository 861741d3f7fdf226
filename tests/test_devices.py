"""Device discovery through torch.accelerator: what a CPU-only kernel, a kernel with the simulated
accelerator and (on a GPU machine) a CUDA kernel are told, and that nothing is initialised."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from torchdevice_magic import devices
from torchdevice_magic.devices import DeviceError, Target

CPU_ONLY = torch.accelerator.current_accelerator() is None


@pytest.mark.skipif(not CPU_ONLY, reason="this torch build has an accelerator")
def test_cpu_only_kernel_offers_cpu_and_says_why_not_cuda() -> None:
    assert devices.accelerator_type() is None
    assert devices.best_device() == "cpu"
    targets = devices.available_targets(allow_meta=False)
    assert targets[0] == Target("cpu", True)
    assert targets[1].device == "cuda" and not targets[1].enabled
    assert "no accelerator" in targets[1].reason
    assert targets[-1] == Target("meta", False, devices.META_REFUSED)
    assert devices.available_targets(allow_meta=True)[-1] == Target("meta", True)


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("cuda:0", "cuda is not available in this kernel"),
        ("gpu", "'gpu' is not a device"),
        ("cpu:1", "cpu:1 does not exist"),
        ("meta", "moving to meta is turned off"),
        (3.5, "expected a string such as 'cuda:0'"),
    ],
)
def test_bad_devices_are_one_line_errors(typed: object, message: str) -> None:
    if typed == "cuda:0" and not CPU_ONLY:
        pytest.skip("this torch build has an accelerator")
    with pytest.raises(DeviceError, match=message) as caught:
        devices.resolve_device(typed, allow_meta=False)
    assert "\n" not in str(caught.value)


def test_good_devices_resolve() -> None:
    assert devices.resolve_device(" cpu ", allow_meta=False) == torch.device("cpu")
    assert devices.resolve_device(torch.device("meta"), allow_meta=True) == torch.device("meta")


def test_cpu_has_no_allocator_figures_but_free_host_memory() -> None:
    assert devices.memory_figures("cpu") == devices.MemoryFigures()
    free = devices.free_bytes("cpu")
    assert free is None or free > 0
    assert devices.free_bytes("meta") is None


def test_legacy_fallback_without_torch_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch, "accelerator")
    expected = "cuda" if torch.version.cuda else None
    if expected is None and torch.backends.mps.is_built():
        expected = "mps"
    assert devices.accelerator_type() == expected


def test_no_torch_import_and_no_accelerator_without_torch() -> None:
    code = (
        "import sys, torchdevice_magic.devices as d;"
        "assert d.accelerator_type() is None and d.device_count() == 0;"
        "assert 'torch' not in sys.modules; print('ok')"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "ok"


@pytest.mark.simulated
def test_simulated_accelerator_is_an_accelerator_like_any_other(simulated_device: str) -> None:
    kind = simulated_device.partition(":")[0]
    assert devices.accelerator_type() == kind
    assert devices.device_count() == 1
    assert devices.best_device() == simulated_device
    assert Target(simulated_device, True) in devices.available_targets(allow_meta=False)
    assert devices.resolve_device(kind, allow_meta=False) == torch.device(simulated_device)
    with pytest.raises(
        DeviceError, match=f"{kind}:3 does not exist; this kernel sees {simulated_device}"
    ):
        devices.resolve_device(f"{kind}:3", allow_meta=False)
    with pytest.raises(DeviceError, match=f"its accelerator is {kind}"):
        devices.resolve_device("cuda", allow_meta=False)
    # no allocator: no figures, free memory unknown (a move then checks nothing up front)
    assert devices.memory_figures(simulated_device) == devices.MemoryFigures()
    assert devices.free_bytes(simulated_device) is None
    assert devices.reset_peak(simulated_device) is False


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_figures_once_initialised() -> None:
    x = torch.ones(1024, device="cuda")
    figures = devices.memory_figures("cuda:0")
    assert figures.allocated is not None and figures.allocated >= x.numel() * 4
    assert figures.capacity and figures.reserved is not None
    assert devices.free_bytes("cuda:0") > 0
