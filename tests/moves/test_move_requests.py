"""What a move accepts and refuses, before anything is touched: devices, names, IPython's
names, objects that must not be moved by hand (accelerate, TorchScript, quantized, meta),
broken objects; and that discovering devices never initialises CUDA."""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch
from movekit import (
    HAS_CUDA,
    assert_same,
    make_namespace,
    snapshot,
)
from torch import nn

import torchdevice_magic.moves as moves
from torchdevice_magic.moves import MoveError, move


def test_available_devices_and_best_device() -> None:
    devices = moves.available_devices(allow_meta=True)
    assert devices[0] == ("cpu", True, "")
    names = [d for d, _enabled, _reason in devices]
    if HAS_CUDA:
        assert [n for n in names if n.startswith("cuda")] == [
            f"cuda:{i}" for i in range(torch.cuda.device_count())
        ]
        assert moves.best_device().startswith("cuda:")
    else:
        assert any(n == "cuda" and not enabled for n, enabled, _r in devices)
        assert moves.best_device() == "cpu"
    assert ("meta", True, "") in devices
    meta = [d for d in moves.available_devices(allow_meta=False) if d[0] == "meta"]
    assert meta and meta[0][1] is False and meta[0][2]
    for _name, enabled, reason in devices:
        assert enabled or reason  # a disabled target always says why


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("cdua", "'cdua' is not a device: "),
        ("cuda:x", "'cuda:x' is not a device: "),
        ("", "'' is not a device: "),
        (5, "5 is not a device"),
        ("cpu:1", "cpu:1 does not exist; this kernel sees cpu"),
        ("hpu", "hpu is not available in this kernel"),
    ],
)
def test_bad_device_is_refused_with_one_line_and_nothing_changes(device: Any, message: str) -> None:
    ns = make_namespace()
    before = snapshot(ns)
    with pytest.raises(MoveError) as info:
        move(ns, device)
    text = str(info.value)
    assert message in text and "\n" not in text
    assert isinstance(info.value, ValueError)
    assert_same(before, snapshot(ns))


def test_missing_cuda_or_device_index_is_refused() -> None:
    ns = {"x": torch.ones(2)}
    if not HAS_CUDA:
        with pytest.raises(MoveError, match="^cuda is not available in this kernel"):
            move(ns, "cuda")
        with pytest.raises(MoveError, match="^cuda is not available in this kernel"):
            move(ns, "cuda:3")
    else:
        n = torch.cuda.device_count()
        seen = ", ".join(f"cuda:{i}" for i in range(n))
        with pytest.raises(MoveError, match=f"^cuda:{n} does not exist; this kernel sees {seen}$"):
            move(ns, f"cuda:{n}")
    assert ns["x"].device.type == "cpu"


def test_meta_is_refused_when_not_allowed() -> None:
    ns = make_namespace()
    before = snapshot(ns)
    with pytest.raises(MoveError, match="meta"):
        move(ns, "meta", allow_meta=False)
    assert_same(before, snapshot(ns))


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["nope"], "no variable named 'nope' in this namespace"),
        (["x", "nope"], "no variable named 'nope'"),
        (["model.enc"], "'model.enc' is not a top-level name"),
        (["batch['input']"], "is not a top-level name"),
        ([3], "names must be strings"),
        (["count"], "count is a int, not a tensor"),
    ],
)
def test_bad_names_are_refused_and_nothing_changes(names: list[Any], message: str) -> None:
    ns = make_namespace()
    before = snapshot(ns)
    with pytest.raises(MoveError) as info:
        move(ns, "meta", names=names)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert_same(before, snapshot(ns))


def test_ipython_bookkeeping_names_are_not_moved() -> None:
    t = torch.ones(2)
    ns = {
        "In": ["", "x = 1"],
        "Out": {1: t},
        "_": t,
        "__": t,
        "_1": t,
        "_i1": "x",
        "_oh": {1: t},
        "_private": t,
        "exit": object(),
        "x": t,
    }
    result = move(ns, "meta")
    # a user's `_private` is no IPython name: the table lists it, so "move all" moves it too
    assert [i.name for i in result.moved] == ["_private", "x"]
    assert ns["_private"] is ns["x"] and ns["x"].device.type == "meta"  # still one tensor
    for name in ("Out", "_", "__", "_1", "_oh"):
        value = ns[name]
        tensors = value.values() if isinstance(value, dict) else [value]
        assert all(v is t for v in tensors), name
    # Out still holds the old tensor: reported as still held on the old device.
    assert result.still_held_bytes == t.untyped_storage().nbytes()
    named = move(ns, "meta", names=["Out", "_1"])
    assert not named.moved and {n for n, _ in named.skipped} == {"Out", "_1"}


def test_ipython_names_named_explicitly_follow_the_one_names_rule() -> None:
    """names.py says what is IPython's: each of its names is refused even when named (rebinding
    it would break IPython's history); a user's dunder variable may be named and moved."""
    t = torch.ones(2)
    ipython = ["In", "Out", "_", "__", "___", "_7", "_i", "_ii", "_iii", "_i7", "_oh", "_ih"]
    ipython += ["_dh", "exit", "quit", "get_ipython", "_exit_code"]
    ns = {name: t for name in ipython} | {"__cache": torch.ones(3)}
    result = move(ns, "meta", names=ipython)
    assert not result.moved and [n for n, _ in result.skipped] == ipython
    assert all("IPython's history" in why for _n, why in result.skipped)
    mine = move(ns, "meta", names=["__cache"])
    assert [i.name for i in mine.moved] == ["__cache"] and ns["__cache"].device.type == "meta"


def test_meta_parameters_are_refused_with_advice() -> None:
    ns = {"model": nn.Linear(2, 2, device="meta"), "x": torch.ones(2)}
    with pytest.raises(MoveError) as info:
        move(ns, "cpu", names=["model"])
    assert "to_empty(device=...)" in str(info.value) and "load the weights again" in str(info.value)
    assert ns["model"].weight.device.type == "meta"
    result = move(ns, "cpu")  # everything: skipped with the same advice, not refused
    assert result.ok and not result.moved
    assert "to_empty" in dict(result.skipped)["model"]
    with pytest.raises(MoveError, match="has no data"):
        move({"t": torch.ones(2, device="meta")}, "cpu", names=["t"])


def test_accelerate_dispatched_models_are_refused_with_advice() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model[1].__dict__["_hf_hook"] = object()
    ns = {"model": model}
    with pytest.raises(MoveError, match="accelerate") as info:
        move(ns, "meta", names=["model"])
    assert "remove_hook_from_module" in str(info.value)
    assert model[0].weight.device.type == "cpu"
    spread = nn.Linear(2, 2)
    spread.hf_device_map = {"a": 0, "b": "cpu"}
    with pytest.raises(MoveError, match="dispatched by accelerate"):
        move({"spread": spread}, "meta", names=["spread"])
    single = nn.Linear(2, 2)
    single.hf_device_map = {"": "cpu"}  # loaded on one device, no hooks: a plain model
    assert move({"single": single}, "meta").ok


def test_accelerate_dispatched_models_are_refused_in_one_line_and_skipped_by_move_all() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model.__dict__["hf_device_map"] = {"0": "cpu", "1": "disk"}
    model[1].__dict__["_hf_hook"] = object()
    ns = {"model": model, "holder": {"m": model}, "x": torch.ones(2)}
    with pytest.raises(MoveError) as info:
        move(ns, "meta", names=["model"])
    assert "accelerate" in str(info.value) and "\n" not in str(info.value)
    result = move(ns, "meta")
    assert result.ok and [i.name for i in result.moved] == ["x"]
    reasons = dict(result.skipped)
    assert "accelerate" in reasons["model"] and "accelerate" in reasons["holder"]
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_torchscript_modules_are_all_or_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    before = [(p.device, p.detach().clone()) for p in scripted.parameters()]
    ns = {"scripted": scripted, "x": torch.ones(2)}
    with pytest.raises(MoveError, match="TorchScript") as info:
        move(ns, "meta", names=["scripted"])
    assert "\n" not in str(info.value)
    result = move(ns, "meta")
    assert result.ok and [i.name for i in result.moved] == ["x"]
    assert "TorchScript" in dict(result.skipped)["scripted"]
    after = [(p.device, p.detach()) for p in scripted.parameters()]
    assert all(a[0] == b[0] and torch.equal(a[1], b[1]) for a, b in zip(before, after, strict=True))


def test_dynamic_quantized_modules_are_not_said_to_be_already_on_the_target() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(
            nn.Sequential(nn.Linear(4, 4)), {nn.Linear}, dtype=torch.qint8
        )
    result = move({"q": quantized}, "meta")
    reason = dict(result.skipped)["q"]
    assert "already on" not in reason and "dynamic-quantized" in reason
    with pytest.raises(MoveError, match="dynamic-quantized"):
        move({"q": quantized}, "meta", names=["q"])


class Broken(nn.Module):
    """A module whose parameters() raises: planning it fails before anything is touched."""

    def parameters(self, recurse: bool = True) -> Any:  # type: ignore[override]
        raise RuntimeError("broken parameters")


def test_a_broken_object_is_skipped_or_refused_never_fatal() -> None:
    ns = {"broken": Broken(), "x": torch.ones(2)}
    result = move(ns, "meta")
    assert result.ok and [i.name for i in result.moved] == ["x"]
    assert dict(result.skipped)["broken"].startswith("broken could not be planned: RuntimeError")
    with pytest.raises(MoveError, match="broken could not be planned"):
        move(ns, "meta", names=["broken"])


def test_a_tensor_the_target_cannot_hold_fails_the_whole_move_with_a_short_reason() -> None:
    ns = make_namespace()
    with warnings.catch_warnings():  # quantized tensors are deprecated, still found in the wild
        warnings.simplefilter("ignore")
        ns["q"] = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8)  # no meta kernel
    before = snapshot(ns)
    result = move(ns, "meta")
    assert not result.ok and (result.failed or "").startswith("q: NotImplementedError: ")
    assert len(result.failed or "") < 300 and "\n" not in (result.failed or "")
    assert_same(before, snapshot(ns))


def test_summary_names_what_was_skipped_and_why() -> None:
    ns = {f"t{i}": torch.ones(1, device="meta") for i in range(5)}
    ns["x"] = torch.ones(2)
    text = move(ns, "meta").summary()
    assert (
        "; skipped t0 (already on meta), t1 (already on meta), t2 (already on meta), 2 more" in text
    )


def test_importing_every_submodule_keeps_the_move_function() -> None:
    """``torchdevice_magic.moves`` is a package: it must never replace the function
    ``torchdevice_magic.move``, whatever was imported before."""
    code = (
        "import importlib, pkgutil, torch, torchdevice_magic as tdm\n"
        "for info in pkgutil.walk_packages(tdm.__path__, 'torchdevice_magic.'):\n"
        "    importlib.import_module(info.name)\n"
        "import torchdevice_magic.moves, torchdevice_magic.moves.planner\n"
        "from torchdevice_magic import move\n"
        "ns = {'x': torch.ones(2)}\n"
        "first = tdm.move(ns, 'meta', ['x'])\n"
        "second = tdm.move(ns, 'meta')\n"
        "print(callable(tdm.move), move is tdm.move, first.ok, len(first.moved), second.skipped)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True True True 1 [('x', 'already on meta')]"


def test_move_all_leaves_only_the_unmovable_part_of_a_container() -> None:
    batch = {"x": torch.ones(2), "ghost": torch.ones(2, device="meta")}
    ns = {"batch": batch}
    result = move(ns, "cpu")
    assert result.ok and not result.moved  # x already on cpu; the meta part stays, said why
    assert "has no data" in dict(result.skipped)["batch"]
    with pytest.raises(MoveError, match="has no data"):
        move(ns, "cpu", names=["batch"])
