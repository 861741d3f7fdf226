"""The simulated accelerator with several devices: simdev:0 and simdev:1 are different devices,
as cuda:0 and cuda:1 are -- CUDA's cross-device messages, the current device, copies between
devices, training on the second one.

The simulated child process registers one device; each test here asks for two and gives the
count back, so the other simulated tests see the accelerator they expect.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
import torch

from torchdevice_magic.testing import DEVICES_VARIABLE, simulated_accelerator

SAME_DEVICE = "Expected all tensors to be on the same device"


@pytest.mark.simulated
def test_operators_mixing_two_devices_raise_cudas_messages(two_devices: str) -> None:
    first = torch.ones(2, 3, device=f"{two_devices}:0")
    second = torch.ones(2, 3, device=f"{two_devices}:1")
    assert str(first.device) == f"{two_devices}:0" and str(second.device) == f"{two_devices}:1"
    with pytest.raises(
        RuntimeError,
        match=f"{SAME_DEVICE}, but found at least two devices, {two_devices}:1 and {two_devices}:0!",
    ):
        second + first
    with pytest.raises(
        RuntimeError,
        match=(
            f"{SAME_DEVICE}, but got mat2 is on {two_devices}:0, different from other tensors on "
            rf"{two_devices}:1 \(when checking argument in method wrapper_PrivateUse1_mm\)"
        ),
    ):
        second @ first.t()
    model = torch.nn.Linear(3, 2).to(f"{two_devices}:1")
    with pytest.raises(RuntimeError, match=f"mat1 is on {two_devices}:0, different from"):
        model(first)
    with pytest.raises(IndexError, match=rf"the indexed tensor \({two_devices}:1\)"):
        second[torch.tensor([0], device=f"{two_devices}:0")]
    # a 0-dim CPU tensor still mixes with either device, and a CPU index indexes both
    assert torch.equal((second * torch.tensor(3.0)).cpu(), torch.full((2, 3), 3.0))
    assert second[torch.tensor([1])].device == second.device


@pytest.mark.simulated
def test_copies_between_devices_keep_values_and_land_on_the_asked_device(two_devices: str) -> None:
    host = torch.randn(4, 5, dtype=torch.float64)
    on_first = host.to(f"{two_devices}:0")
    on_second = on_first.to(f"{two_devices}:1")
    assert str(on_second.device) == f"{two_devices}:1"
    assert torch.equal(on_second.cpu(), host)
    # results of an operator stay on its inputs' device; views and copies too
    assert str((on_second * 2).device) == f"{two_devices}:1"
    assert str(on_second.t()[0].device) == f"{two_devices}:1"
    target = torch.zeros(4, 5, dtype=torch.float64, device=f"{two_devices}:0")
    target.copy_(on_second)
    assert torch.equal(target.cpu(), host) and str(target.device) == f"{two_devices}:0"
    # torch.load without map_location puts a tensor back on the device it was saved from
    assert str(pickle.loads(pickle.dumps(on_second)).device) == f"{two_devices}:1"
    with pytest.raises(RuntimeError, match=f"{two_devices} error: invalid device ordinal"):
        torch.ones(1, device=f"{two_devices}:2")


@pytest.mark.simulated
def test_the_current_device_is_what_an_index_less_factory_uses(two_devices: str) -> None:
    module = getattr(torch, two_devices)
    assert module.device_count() == torch.accelerator.device_count() == 2
    assert module.current_device() == 0
    assert str(torch.ones(1, device=two_devices).device) == f"{two_devices}:0"
    module.set_device(1)
    assert module.current_device() == 1
    assert str(torch.ones(1, device=two_devices).device) == f"{two_devices}:1"
    with module.device(0):
        assert str(torch.zeros(1, device=two_devices).device) == f"{two_devices}:0"
    assert module.current_device() == 1
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        module.set_device(5)
    # fewer devices: the current one, taken away, gives way to the first
    simulated_accelerator(devices=1)
    assert module.device_count() == 1 and module.current_device() == 0
    assert str(torch.ones(1, device=two_devices).device) == f"{two_devices}:0"


@pytest.mark.simulated
def test_a_model_trains_on_the_second_device_and_matches_the_cpu(two_devices: str) -> None:
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    model = pickle.loads(pickle.dumps(reference)).to(f"{two_devices}:1")
    weight = model[0].weight
    model.to(f"{two_devices}:0").to(f"{two_devices}:1")
    assert model[0].weight is weight and str(weight.device) == f"{two_devices}:1"
    inputs = torch.randn(8, 3)
    for net, x in ((reference, inputs), (model, inputs.to(f"{two_devices}:1"))):
        optimizer = torch.optim.Adam(net.parameters())
        for _ in range(3):
            optimizer.zero_grad()
            net(x).pow(2).mean().backward()
            optimizer.step()
    assert str(model[0].weight.grad.device) == f"{two_devices}:1"
    for trained, expected in zip(model.parameters(), reference.parameters(), strict=True):
        assert str(trained.device) == f"{two_devices}:1"
        torch.testing.assert_close(trained.detach().cpu(), expected.detach())


def test_the_device_count_comes_from_the_environment_at_registration() -> None:
    code = (
        "import torch\n"
        "from torchdevice_magic.testing import simulated_accelerator\n"
        "kind = simulated_accelerator()\n"
        "print(torch.accelerator.device_count(), torch.ones(1, device=kind + ':1').device)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, DEVICES_VARIABLE: "2"},
    )
    assert run.stdout.split() == ["2", "simdev:1"]
    bad = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, DEVICES_VARIABLE: "two"},
    )
    assert bad.returncode != 0
    assert f"{DEVICES_VARIABLE} must be a whole number of devices" in bad.stderr
