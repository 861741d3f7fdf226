"""Undo: everything back where it came from, each object to its own device(s), all or nothing;
names rebound since are left alone; state created after the move follows its parameters back."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from movekit import (
    HAS_CUDA,
    IDENTITY_KEYS,
    CountingFault,
    all_tensors,
    assert_links,
    assert_same,
    identities,
    make_namespace,
    reach_namespace,
    snapshot,
)
from torch import nn

import torchdevice_magic.moves as moves
from torchdevice_magic.moves import MoveError, move


def test_undo_from_meta_is_refused() -> None:
    ns = make_namespace()
    result = move(ns, "meta")
    assert not result.can_undo  # meta keeps no data
    with pytest.raises(MoveError, match="^cannot undo a move to meta: meta tensors keep no data$"):
        result.undo()


def _undo_round_trip(target: str) -> None:
    ns = make_namespace()
    ns.pop("view")  # views are checked in the matrix above
    before = snapshot(ns)
    model = ns["model"]
    param_ids = [id(p) for p in model.parameters()]
    result = move(ns, target)
    assert result.ok and result.can_undo
    assert all(p.device.type == torch.device(target).type for p in model.parameters())
    back = result.undo()
    assert back.ok, back.failed
    assert not result.can_undo and back.can_undo
    after = snapshot(ns)
    for name, (oid, described) in before.items():
        if name in ("model", "opt", "w", "free", "head", "count", "text"):
            assert after[name][0] == oid, name  # moved in place: the very same objects
        assert_same(_without_identity(described), _without_identity(after[name][1]), name)
    # ... and the Parameters inside are the same objects too
    assert [id(p) for p in model.parameters()] == param_ids
    with pytest.raises(MoveError, match="already undone"):
        result.undo()


def _without_identity(described: Any) -> Any:
    """A snapshot with the facts a correct round trip may change removed (ids of rebound
    objects, storages); devices, dtypes, shapes, strides, flags and values stay."""
    if isinstance(described, dict) and "storage" in described:
        return {k: v for k, v in described.items() if k not in IDENTITY_KEYS}
    if isinstance(described, dict):
        return {k: _without_identity(v) for k, v in described.items()}
    if isinstance(described, (list, tuple)):
        items = [_without_identity(v) for v in described]
        if len(items) == 3 and isinstance(described[1], int) and isinstance(described[0], type):
            items[1] = None  # a container's id: rebuilt containers are new objects
        return tuple(items) if isinstance(described, tuple) else items
    return described


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_undo_round_trip_is_bit_exact_on_cuda() -> None:
    _undo_round_trip("cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_undo_puts_a_module_spanning_devices_back_per_parameter_on_cuda() -> None:
    _spanning_undo("cuda")


def _spanning_undo(other: str) -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model[1].to(other)
    values = [p.detach().cpu().clone() for p in model.parameters()]
    ids = [id(p) for p in model.parameters()]
    ns = {"model": model}
    result = move(ns, "cpu")
    assert result.moved[0].from_devices == ("cpu", str(torch.device(other.split(":")[0], 0)))
    assert all(p.device.type == "cpu" for p in model.parameters())
    back = result.undo()
    assert back.ok, back.failed
    assert [id(p) for p in model.parameters()] == ids
    kind = torch.device(other).type
    assert [p.device.type for p in model.parameters()] == ["cpu", "cpu", kind, kind]
    assert all(
        torch.equal(p.detach().cpu(), v) for p, v in zip(model.parameters(), values, strict=True)
    )


@pytest.mark.simulated
def test_undo_round_trip_is_bit_exact_on_a_device_with_data(simulated_device: str) -> None:
    _undo_round_trip(simulated_device)


@pytest.mark.simulated
def test_undo_puts_a_module_spanning_devices_back_per_parameter(simulated_device: str) -> None:
    _spanning_undo(simulated_device)


@pytest.mark.simulated
def test_undo_says_nothing_is_held_on_the_old_device_when_nothing_is(
    simulated_device: str,
) -> None:
    """04_tour's namespace: a model, a tensor, a dict holding it and a view of it. After the
    undo no reference is left to the storages on the device, so the summary must not send
    the user to ``%devices --holders`` for memory that no one holds."""
    images = torch.randn(64, 256)
    labels = torch.randint(0, 10, (64,))
    ns: dict[str, Any] = {
        "model": nn.Linear(8, 4),
        "images": images,
        "labels": labels,
        "batch": {"images": images, "labels": labels},
        "first": images[:4],
    }
    del images, labels
    result = move(ns, simulated_device)
    assert result.ok and result.still_held_bytes == 0, result.summary()
    back = result.undo()
    assert back.ok, back.failed
    assert back.still_held_bytes == 0, back.summary()
    assert "still held" not in back.summary()


@pytest.mark.simulated
def test_undo_skips_names_rebound_since(simulated_device: str) -> None:
    ns = {"x": torch.ones(2), "y": torch.ones(3)}
    result = move(ns, simulated_device)
    ns["y"] = "something else"
    back = result.undo()
    assert [i.name for i in back.moved] == ["x"] and ns["x"].device.type == "cpu"
    assert back.skipped == [("y", "y was rebound since the move; left as it is")]


@pytest.mark.simulated
def test_fault_during_undo_leaves_things_as_they_were(
    simulated_device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = make_namespace()
    ns.pop("view")
    result = move(ns, simulated_device)
    moved = snapshot(ns)
    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "to", CountingFault(torch.Tensor.to, 4, RuntimeError("undo fault")))
        back = result.undo()
    assert not back.ok and "undo fault" in (back.failed or "")
    assert result.can_undo  # a failed undo can be tried again
    after = snapshot(ns)
    for name in moved:
        assert after[name][0] == moved[name][0], name
    assert result.undo().ok


@pytest.mark.simulated
def test_move_all_and_undo_on_a_device_with_data(simulated_device: str) -> None:
    ns = reach_namespace()
    ids = identities(ns)
    values = {path: t.detach().cpu().clone() for path, t in all_tensors(ns)}
    devices = {path: t.device for path, t in all_tensors(ns)}
    result = move(ns, simulated_device)
    # a DataLoader's data stays (its dataset is also `subset`'s, which moves it)
    assert result.ok and [n for n, _ in result.skipped] == ["loader"], result
    now = all_tensors(ns)
    assert {path for path, _t in now} == set(values)
    for path, t in now:
        expected = "cpu" if path.endswith(".step") else "simdev"  # Adam's step stays
        assert t.device.type == expected, path
        assert torch.equal(t.detach().cpu(), values[path]), path
    assert identities(ns) == ids
    assert_links(ns)
    # training works on the new device, through the objects the user holds
    tr = ns["trainer"]
    tr.optimizer.zero_grad()
    tr.model(torch.randn(2, 4, device=simulated_device)).sum().backward()
    tr.optimizer.step()
    trained = {path: t.detach().cpu().clone() for path, t in all_tensors(ns)}
    back = result.undo()
    assert back.ok, back.failed
    assert identities(ns) == ids
    assert_links(ns)
    for path, t in all_tensors(ns):
        assert t.device == devices[path], path
        assert torch.equal(t.detach().cpu(), trained[path]), path
    tr.optimizer.zero_grad()
    tr.model(torch.randn(2, 4)).sum().backward()
    tr.optimizer.step()


@pytest.mark.simulated
def test_undo_after_steps_brings_state_created_after_the_move_back(simulated_device: str) -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)  # no state yet
    ns = {"model": model, "opt": opt}
    result = move(ns, simulated_device)
    assert result.ok
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 4, device=simulated_device)).sum().backward()
        opt.step()
    assert opt.state[model.weight]["exp_avg"].device.type == "simdev"  # created there
    back = result.undo()
    assert back.ok, back.failed
    for p in model.parameters():
        assert p.device.type == "cpu" and p.grad is not None and p.grad.device.type == "cpu"
        state = opt.state[p]
        assert state["exp_avg"].device.type == "cpu" and state["exp_avg_sq"].device.type == "cpu"
        assert state["step"].device.type == "cpu"
    opt.zero_grad()
    model(torch.randn(5, 4)).sum().backward()
    opt.step()


@pytest.mark.simulated
def test_lbfgs_steps_after_a_move_and_after_undo(simulated_device: str) -> None:
    model = nn.Linear(3, 1)
    opt = torch.optim.LBFGS(model.parameters(), history_size=3, max_iter=4)

    def step(device: str) -> None:
        x, y = torch.randn(8, 3, device=device), torch.randn(8, 1, device=device)

        def closure() -> torch.Tensor:
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()  # (mse_loss's out= resize trips the simulator)
            loss.backward()
            return loss

        opt.step(closure)

    step("cpu")
    ns = {"model": model, "opt": opt}
    result = move(ns, simulated_device)
    assert result.ok, result.failed
    step(simulated_device)
    assert result.undo().ok
    step("cpu")


@pytest.mark.simulated
def test_torchscript_is_refused_before_anything_moves_on_a_device_with_data(
    simulated_device: str,
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(nn.Linear(2, 2))
    result = move({"scripted": scripted}, simulated_device)
    assert result.ok and not result.moved and "TorchScript" in dict(result.skipped)["scripted"]
    assert all(p.device.type == "cpu" for p in scripted.parameters())


def test_a_round_trip_through_a_backend_whose_storages_hide_their_pointer(
    monkeypatch: pytest.MonkeyPatch, lazy_backend: str
) -> None:
    """torch's lazy backend keeps data, but its storages refuse ``data_ptr()``: the bulk path
    falls back to the general storage rule, there and back."""
    real = moves.resolve_device
    monkeypatch.setattr(
        moves,
        "resolve_device",
        lambda d, allow: torch.device(lazy_backend, 0) if d == lazy_backend else real(d, allow),
    )
    ns = {f"t{i}": torch.full((3,), float(i)) for i in range(5)}
    result = move(ns, lazy_backend)
    assert result.ok, result.failed
    assert all(t.device.type == lazy_backend for t in ns.values())
    back = result.undo()
    assert back.ok, back.failed
    assert all(torch.equal(ns[f"t{i}"], torch.full((3,), float(i))) for i in range(5))


@pytest.mark.simulated
def test_a_module_whose_parameters_a_live_graph_saved_is_refused_not_split(
    simulated_device: str,
) -> None:
    """The sidebar's path: the one-click fix moved the model, the cell ran again (its result
    keeps a graph that saved the second layer's weight), then Undo. torch cannot swap a
    Parameter a graph saved, and the simulated device's tensors move by swapping: the model
    must be left whole where it is, with the reason, never half on each device."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    ns: dict[str, Any] = {"model": model, "opt": opt}
    moved = move(ns, simulated_device)
    assert moved.ok, moved.summary()
    ns["y"] = model(torch.randn(3, 4, device=simulated_device))
    with pytest.raises(MoveError, match=r"model\.2\.weight is saved by an autograd graph"):
        move(ns, "cpu", ["model"])
    assert {str(p.device) for p in model.parameters()} == {simulated_device}
    # the undo undoes nothing (the optimizer that follows the model would be split from it)
    # and stays available
    with pytest.raises(MoveError, match="^nothing was undone: model.2.weight is saved"):
        moved.undo()
    assert {str(p.device) for p in model.parameters()} == {simulated_device}
    state = [v for s in opt.state.values() for k, v in s.items() if k != "step"]
    assert {str(v.device) for v in state} == {simulated_device}
    # once the result is gone, the undo goes through
    del ns["y"]
    back = moved.undo()
    assert back.ok, back.summary()
    assert {str(p.device) for p in model.parameters()} == {"cpu"}
