"""On a rank, "Move all to <accelerator>" moves to the rank's own local device, never every rank
to device 0, and the rank is warned about what it holds on another rank's device. Run on the
simulated accelerator with two devices, as rank 1 (LOCAL_RANK=1, as torchrun sets it); and a
move between the two devices, and its undo, keep a model, its gradients and its optimizer state
together."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import torchdevice_magic as tdm
from torchdevice_magic import devices
from torchdevice_magic.app import DeviceController, PlainSettings


@pytest.fixture
def rank_one(two_devices: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LOCAL_RANK", "1")
    return two_devices


@pytest.mark.simulated
def test_a_process_that_is_no_rank_moves_to_its_current_device(
    two_devices: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert devices.best_device() == f"{two_devices}:0"
    assert devices.resolve_device(two_devices, allow_meta=False) == torch.device(two_devices, 0)


@pytest.mark.simulated
def test_move_all_on_rank_one_goes_to_its_own_device(rank_one: str) -> None:
    own = f"{rank_one}:1"
    assert devices.best_device() == own
    assert devices.resolve_device(rank_one, allow_meta=False) == torch.device(own)
    namespace: dict[str, Any] = {"model": torch.nn.Linear(4, 2), "x": torch.ones(3, 4)}
    app = DeviceController(namespace, PlainSettings())
    assert app.default_target() == own
    assert app.header().move_all.label == f"Move all to {own}"
    # the accelerator named without an index, as "Move all to cuda" or .to("cuda") name it
    result = app.move(rank_one)
    assert result.ok
    assert str(namespace["model"].weight.device) == own and str(namespace["x"].device) == own
    assert str(namespace["model"](namespace["x"]).device) == own


@pytest.mark.simulated
def test_a_tensor_on_another_ranks_device_is_warned_about_once(rank_one: str) -> None:
    namespace: dict[str, Any] = {
        "mine": torch.ones(2, device=f"{rank_one}:1"),
        "stray": torch.ones(2, device=f"{rank_one}:0"),
        "host": torch.ones(2),
    }
    app = DeviceController(namespace, PlainSettings())
    warnings = app.new_mixed_warnings(app.full_scan())
    assert warnings == [
        f"stray (Tensor) is on {rank_one}:0, but this process is local rank 1, whose device "
        f"is {rank_one}:1: move it with .to('{rank_one}:1')"
    ]
    assert app.new_mixed_warnings(app.full_scan()) == []


@pytest.mark.simulated
def test_the_header_notes_say_what_the_rank_holds_on_another_ranks_device(rank_one: str) -> None:
    # the header (widget, %devices, sidebar) says it every time, not only once after the cell
    namespace: dict[str, Any] = {
        "mine": torch.ones(2, device=f"{rank_one}:1"),
        "stray": torch.ones(2, device=f"{rank_one}:0"),
    }
    app = DeviceController(namespace, PlainSettings())
    line = (
        f"stray (Tensor) is on {rank_one}:0, but this process is local rank 1, whose device "
        f"is {rank_one}:1: move it with .to('{rank_one}:1')"
    )
    app.new_mixed_warnings(app.full_scan())
    assert line in app.header().device_notes
    assert line in app.header().to_wire()["device_notes"]
    for index in range(5):
        namespace[f"more{index}"] = torch.ones(1, device=f"{rank_one}:0")
    notes = app.header(inventory=app.full_scan()).device_notes
    assert notes[-1] == "and 3 more objects on other ranks' devices"
    assert app.move(f"{rank_one}:1").ok
    assert app.header(inventory=app.full_scan()).device_notes == ()


@pytest.mark.simulated
@pytest.mark.parametrize(("start", "target"), [(1, "cpu"), (1, 0), (0, 1), ("cpu", 1)])
def test_moves_between_two_devices_and_their_undo_keep_every_part_together(
    two_devices: str, start: int | str, target: int | str
) -> None:
    def device(which: int | str) -> str:
        return which if isinstance(which, str) else f"{two_devices}:{which}"

    model = torch.nn.Linear(3, 2).to(device(start))
    model(torch.ones(1, 3, device=device(start))).sum().backward()
    optimizer = torch.optim.Adam(model.parameters())
    optimizer.step()
    weight = model.weight
    namespace: dict[str, Any] = {"model": model, "x": torch.ones(2, 3, device=device(start))}
    namespace["opt"] = optimizer

    def places() -> set[str]:
        grad = model.weight.grad
        assert grad is not None and model.weight is weight
        state = optimizer.state[weight]["exp_avg"]
        return {str(t.device) for t in (model.weight, grad, namespace["x"], state)}

    result = tdm.move(namespace, device(target))
    assert result.ok and places() == {device(target)}
    assert result.undo().ok and places() == {device(start)}
    assert str(model(namespace["x"]).device) == device(start)
