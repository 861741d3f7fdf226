"""All or nothing: a failure anywhere (a copy, a module, a put-back, the commit, a progress
callback, Ctrl-C) leaves the namespace, its containers and its objects exactly as before."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from movekit import (
    TARGETS,
    CountingFault,
    assert_same,
    exactly,
    make_namespace,
    reach_namespace,
    snapshot,
    storage_id,
)
from torch import nn

from torchdevice_magic import objects
from torchdevice_magic.moves import jobs, move


def fault_sweep(monkeypatch: pytest.MonkeyPatch, owner: Any, attr: str, target: str) -> int:
    """Make the k-th ``owner.attr`` call raise, for every k until a move runs clean."""
    real = getattr(owner, attr)
    k = 0
    while True:
        k += 1
        assert k < 500, "the move never completed"
        ns = make_namespace()
        before = snapshot(ns)
        fault = CountingFault(real, k, RuntimeError(f"injected fault #{k}"))
        with monkeypatch.context() as m:
            m.setattr(owner, attr, fault)
            result = move(ns, target)
        if fault.calls < k:  # the fault never fired: the move completed
            assert result.ok
            return k - 1
        assert not result.ok and f"injected fault #{k}" in (result.failed or "")
        assert result.moved == [] and "\n" not in (result.failed or "")
        assert not result.can_undo
        assert_same(before, snapshot(ns), f"fault #{k}")


@pytest.mark.parametrize("target", TARGETS)
def test_every_tensor_to_failure_leaves_the_namespace_as_it_was(
    monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    calls = fault_sweep(monkeypatch, torch.Tensor, "to", target)
    assert calls > 20 or target == "cuda"  # modules, tensors, containers, state
    if target == "cuda":  # most copies to CUDA are staged: pinned copy_ then device copy_
        assert fault_sweep(monkeypatch, torch.Tensor, "copy_", target) > 20


@pytest.mark.parametrize("target", TARGETS)
def test_every_module_to_failure_leaves_the_namespace_as_it_was(
    monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    if target == "cuda":  # to CUDA modules go through Module._apply with the pinned copier
        assert fault_sweep(monkeypatch, nn.Module, "_apply", target) >= 3
    else:
        assert fault_sweep(monkeypatch, nn.Module, "to", target) == 3  # model, head, free's


def test_ctrl_c_part_way_restores_and_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in (1, 5, 20):
        ns = make_namespace()
        before = snapshot(ns)
        with monkeypatch.context() as m:
            m.setattr(torch.Tensor, "to", CountingFault(torch.Tensor.to, k, KeyboardInterrupt()))
            with pytest.raises(KeyboardInterrupt):
                move(ns, "meta")
        assert_same(before, snapshot(ns))


class HalfMoves(nn.Module):
    """A custom module whose move fails after it moved half of its parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)
        self.b = nn.Linear(2, 2)

    def _apply(self, fn: Any, recurse: bool = True) -> HalfMoves:
        self.a._apply(fn)
        raise RuntimeError("HalfMoves cannot move")


class Stubborn(torch.Tensor):
    """A tensor subclass whose .to() raises."""

    def to(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        raise RuntimeError("Stubborn stays")


def test_custom_objects_that_fail_part_way_roll_everything_back() -> None:
    ns = make_namespace()
    ns["zz_half"] = HalfMoves()
    before = snapshot(ns)
    result = move(ns, "meta")
    assert result.failed == "zz_half: RuntimeError: HalfMoves cannot move"
    assert_same(before, snapshot(ns))

    ns = make_namespace()
    ns["zz_stubborn"] = torch.ones(3).as_subclass(Stubborn)
    before = snapshot(ns)
    result = move(ns, "meta")
    assert result.failed == "zz_stubborn: RuntimeError: Stubborn stays"
    assert_same(before, snapshot(ns))


class FailingNamespace(dict):
    """A namespace whose second rebinding fails (the commit step itself fails)."""

    armed = False
    sets = 0

    def __setitem__(self, key: str, value: Any) -> None:
        if self.armed:
            self.sets += 1
            if self.sets == 2:
                raise RuntimeError("namespace is read-only")
        super().__setitem__(key, value)


def test_a_failing_commit_is_rolled_back() -> None:
    ns = FailingNamespace(make_namespace())
    before = snapshot(ns)
    ns.armed = True
    result = move(ns, "meta")
    ns.armed = False
    assert not result.ok and "namespace is read-only" in (result.failed or "")
    assert_same(before, snapshot(ns))


def test_a_failing_progress_callback_is_rolled_back() -> None:
    ns = make_namespace()
    before = snapshot(ns)
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append(done)
        if len(calls) == 3:
            raise RuntimeError("widget closed")

    result = move(ns, "meta", progress=progress)
    assert not result.ok and "widget closed" in (result.failed or "")
    assert_same(before, snapshot(ns))


def test_param_record_restores_in_place_moves() -> None:
    """The ``param.data =`` path (cpu <-> cuda) of the rollback, exercised on the CPU."""
    p = nn.Parameter(torch.randn(3))
    p.grad = torch.ones(3)
    grad, storage, grad_storage = p.grad, storage_id(p), storage_id(p.grad)
    record = jobs.ParamRecord(p)
    p.data = torch.zeros(3)  # what module.to does for cpu <-> cuda
    p.grad.data = torch.zeros(3)
    record.restore()
    assert storage_id(p) == storage and p.grad is grad and storage_id(grad) == grad_storage
    assert torch.equal(grad, torch.ones(3)) and p.requires_grad and p.is_leaf


def test_containers_are_changed_in_place_and_rolled_back_in_place() -> None:
    t = torch.ones(2)
    box = [t, {"k": t}]
    ns = {"box": box, "again": box}
    result = move(ns, "meta")
    assert result.ok and ns["box"] is box is ns["again"]
    assert box[0] is box[1]["k"] and box[0].device.type == "meta"


def test_torchscript_in_place_moves_are_checked_and_rolled_back() -> None:
    """Where Parameters move in place (``param.data = ...``: cpu <-> cuda), a TorchScript
    module's tables (no ``.get``) are read, checked and restored like an eager module's: a
    check that raised after the parameters moved would leave a rollback that fails too."""
    from torchdevice_magic.moves import jobs, plan_modules

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))
    params = list(scripted.parameters())
    values = [p.detach().clone() for p in params]
    plan = jobs.Plan({"s": scripted}, "cpu", explicit=True)
    job = jobs.ModuleJob("s", scripted, torch.device("cpu"), None)
    plan_modules.record_module(plan, job, scripted)
    assert len(job.params) == 4 and len(job.buffers) == 3
    job.apply()  # the in-place path's identity check runs on the script module's tables
    for p in params:  # what module.to does between devices with compatible tensors
        p.data = torch.zeros_like(p)
    job.restore()
    assert list(scripted.parameters()) == params
    assert all(torch.equal(p, v) for p, v in zip(params, values, strict=True))


@pytest.mark.parametrize("where", ["set_child", "to"])
def test_a_failure_part_way_leaves_every_container_exactly_as_before(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Every k-th put-back (the commit) or copy fails in turn: the namespace, the containers
    changed in place and the objects' attributes are exactly as before each time."""

    owner: Any = objects if where == "set_child" else torch.Tensor
    real = getattr(owner, where)
    k = 0
    while True:
        k += 1
        assert k < 200, "the move never completed"
        ns = reach_namespace()
        before = exactly(ns)
        fault = CountingFault(real, k, RuntimeError(f"fault #{k}"))
        with monkeypatch.context() as m:
            m.setattr(owner, where, fault)
            result = move(ns, "meta")
        if fault.calls < k:
            assert result.ok
            break
        assert not result.ok and f"fault #{k}" in (result.failed or ""), result.failed
        assert exactly(ns) == before, f"fault #{k}"
    assert k > 5


def test_bulk_tensors_name_the_one_that_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = {f"t{i}": torch.full((3,), float(i)) for i in range(50)}
    before = snapshot(ns)
    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "to", CountingFault(torch.Tensor.to, 17, RuntimeError("no room")))
        result = move(ns, "meta")
    assert result.failed == "t16: RuntimeError: no room"
    assert_same(before, snapshot(ns))
