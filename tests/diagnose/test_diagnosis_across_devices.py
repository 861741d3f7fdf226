"""Multi-GPU mistakes on CPU: with two simulated devices, a model on device 1 fed a batch on
device 0 (every rank loading data onto ``cuda:0``) fails with CUDA's cross-device message, and
the diagnosis names both culprits with the fix that moves the batch to the model's device. On a
rank (LOCAL_RANK set) the fix goes to the rank's own device instead, and says so."""

from __future__ import annotations

import pytest
import torch

import torchdevice_magic as tdm


@pytest.mark.simulated
def test_a_batch_on_device_zero_for_a_model_on_device_one_is_explained(two_devices: str) -> None:
    model = torch.nn.Linear(8, 4).to(f"{two_devices}:1")
    x = torch.randn(2, 8, device=f"{two_devices}:0")
    with pytest.raises(RuntimeError) as raised:
        model(x)
    assert f"mat1 is on {two_devices}:0, different from other tensors on {two_devices}:1" in str(
        raised.value
    )
    diagnosis = tdm.diagnose(raised.value, {"model": model, "x": x}, "y = model(x)")
    assert diagnosis is not None
    assert diagnosis.text().splitlines() == [
        f"Device mismatch: x (Tensor, 64 B) is on {two_devices}:0; model (Linear, 144 B) is on "
        f"{two_devices}:1.",
        f'Fix: x = x.to("{two_devices}:1")   # move the small thing to where the big thing is',
    ]


@pytest.mark.simulated
def test_two_tensors_on_two_devices_are_explained(two_devices: str) -> None:
    a = torch.ones(3, device=f"{two_devices}:1")
    b = torch.ones(3, device=f"{two_devices}:0")
    with pytest.raises(RuntimeError) as raised:
        a + b
    assert str(raised.value) == (
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"{two_devices}:1 and {two_devices}:0!"
    )
    diagnosis = tdm.diagnose(raised.value, {"a": a, "b": b}, "c = a + b")
    assert diagnosis is not None
    text = diagnosis.text()
    assert f"a (Tensor, 12 B) is on {two_devices}:1" in text
    assert f"b (Tensor, 12 B) is on {two_devices}:0" in text


@pytest.mark.simulated
def test_on_rank_one_the_fix_moves_the_model_to_the_ranks_own_device(
    two_devices: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the cell sends the model to device 0 (every rank on cuda:0); the batch is on rank 1's own
    monkeypatch.setenv("LOCAL_RANK", "1")
    cell = f'model = torch.nn.Linear(8, 4).to("{two_devices}:0")\ny = model(x)'
    model = torch.nn.Linear(8, 4).to(f"{two_devices}:0")
    x = torch.randn(2, 8, device=f"{two_devices}:1")
    with pytest.raises(RuntimeError) as raised:
        model(x)
    diagnosis = tdm.diagnose(raised.value, {"model": model, "x": x}, cell)
    assert diagnosis is not None
    assert diagnosis.target == f"{two_devices}:1"
    assert diagnosis.text().splitlines()[1] == (
        f'Fix: model.to("{two_devices}:1")   # this process is local rank 1, whose own device '
        f"is {two_devices}:1: what is on {two_devices}:0 joins it"
    )
    namespace = {"model": model, "x": x}
    exec(diagnosis.fix, namespace)
    assert model(x).device == torch.device(f"{two_devices}:1")


@pytest.mark.simulated
def test_on_rank_zero_the_own_device_wins_over_the_bigger_side(
    two_devices: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the same placement as the first test, where bytes send the batch to device 1: rank 0's
    # own device is 0, so the model comes back there
    monkeypatch.setenv("LOCAL_RANK", "0")
    model = torch.nn.Linear(8, 4).to(f"{two_devices}:1")
    x = torch.randn(2, 8, device=f"{two_devices}:0")
    with pytest.raises(RuntimeError) as raised:
        model(x)
    diagnosis = tdm.diagnose(raised.value, {"model": model, "x": x}, "y = model(x)")
    assert diagnosis is not None
    assert diagnosis.fix == f'model.to("{two_devices}:0")'
    assert f"local rank 0, whose own device is {two_devices}:0" in diagnosis.reason


@pytest.mark.simulated
def test_on_a_rank_a_cpu_batch_still_joins_the_accelerator(
    two_devices: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # only the CPU is the other side: the ordinary rule (free memory included) decides
    monkeypatch.setenv("LOCAL_RANK", "1")
    model = torch.nn.Linear(8, 4).to(f"{two_devices}:1")
    x = torch.randn(2, 8)
    with pytest.raises(RuntimeError) as raised:
        model(x)
    diagnosis = tdm.diagnose(raised.value, {"model": model, "x": x}, "y = model(x)")
    assert diagnosis is not None
    assert diagnosis.fix == f'x = x.to("{two_devices}:1")'
    assert "rank" not in diagnosis.reason
