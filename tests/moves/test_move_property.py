"""One property: on random namespaces, what the scan lists as movable is what a move moves, and
undo is exact."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import pytest
import torch
from movekit import (
    Bag,
    Holder,
    Output,
    all_tensors,
)
from torch import nn

import torchdevice_magic
from torchdevice_magic import objects
from torchdevice_magic.moves import move


@dataclasses.dataclass
class Box:
    a: Any
    b: Any = None
    c: Any = None


Triple = collections.namedtuple("Triple", "a b c", defaults=(None, None))


def _specs() -> Any:
    from hypothesis import strategies as st

    leaf = st.one_of(
        st.tuples(
            st.just("tensor"),
            st.lists(st.integers(1, 4), min_size=0, max_size=2),
            st.sampled_from(["float32", "int64", "bool", "float16"]),
        ),
        st.tuples(st.just("shared"), st.integers(0, 5)),
        st.tuples(st.just("view"), st.integers(0, 5)),
        st.tuples(st.just("module"), st.integers(1, 3), st.sampled_from(["none", "sgd", "adam"])),
        st.tuples(st.just("number"), st.integers()),
    )
    kinds = ["list", "tuple", "dict", "pair", "userdict", "dataclass", "object", "bag", "output"]

    def extend(children: Any) -> Any:
        return st.tuples(st.sampled_from(kinds), st.lists(children, min_size=1, max_size=3))

    def depth(spec: Any) -> int:
        if spec[0] in kinds:
            return 1 + max(depth(child) for child in spec[1])
        return 0

    # within the walker's depth (what it does not reach, neither the scan nor a move sees)
    value = st.recursive(leaf, extend, max_leaves=6).filter(lambda s: depth(s) <= objects.MAX_DEPTH)
    return st.dictionaries(
        st.from_regex(r"[a-z]{1,4}", fullmatch=True), value, min_size=1, max_size=5
    )


def _build(spec: Any, made: list[torch.Tensor], extra: dict[str, Any]) -> Any:
    """Objects from a spec; modules' optimizers (after one step) go to ``extra``."""
    kind = spec[0]
    if kind == "tensor":
        t = torch.randn(spec[1]) * 10
        t = t.to(getattr(torch, spec[2]))
        made.append(t)
        return t
    if kind == "shared":
        return made[spec[1] % len(made)] if made else torch.ones(1)
    if kind == "view":  # of a tensor in the namespace (a view of an unseen base is copied
        # alone, like view.to(): fewer bytes than the storage the scan counted)
        base = made[spec[1] % len(made)] if made else None
        if base is None:
            base = torch.ones(3)
            made.append(base)
            return base
        return base.view(-1)[:1] if base.numel() else base
    if kind == "module":
        module = nn.Linear(spec[1], 2)
        if spec[2] != "none":
            opt_type = torch.optim.SGD if spec[2] == "sgd" else torch.optim.Adam
            opt = opt_type(
                module.parameters(), lr=0.1, **({"momentum": 0.9} if spec[2] == "sgd" else {})
            )
            module(torch.randn(2, spec[1])).sum().backward()
            opt.step()
            extra[f"opt{len(extra)}"] = opt
        return module
    if kind == "number":
        return spec[1]
    children = [_build(child, made, extra) for child in spec[1]]
    if kind == "list":
        return children
    if kind == "tuple":
        return tuple(children)
    if kind == "dict":
        return {f"k{i}": c for i, c in enumerate(children)}
    if kind == "pair":
        return Triple(*children)
    if kind == "userdict":
        return collections.UserDict({f"k{i}": c for i, c in enumerate(children)})
    if kind == "dataclass":
        return Box(*children)
    if kind == "object":
        holder = Holder()
        for i, c in enumerate(children):
            setattr(holder, f"a{i}", c)
        return holder
    if kind == "bag":
        return Bag({f"k{i}": c for i, c in enumerate(children)})
    return Output(*children)


def _state(ns: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(ids of every composite, module, Parameter and optimizer; device and values of every
    tensor), by path."""
    T = objects.TorchTypes.current()
    ids: dict[str, Any] = {}
    tensors: dict[str, Any] = {}
    for name, value in ns.items():
        walked = objects.walk(T, value, name)
        for node in walked.nodes:
            if objects.is_mutable(node.value, node.kind):  # tuples are rebuilt, by necessity
                ids[node.path] = id(node.value)
        for leaf in walked.leaves:
            v = leaf.value
            if isinstance(v, (nn.Module, torch.optim.Optimizer, nn.Parameter)):
                ids[leaf.path] = id(v)
    for path, t in all_tensors(ns):
        if isinstance(t, nn.Parameter):
            ids[path] = id(t)
        tensors[path] = (t.device, t.dtype, t.detach().cpu().clone())
    return ids, tensors


@pytest.mark.simulated
def test_property_scan_and_move_agree_and_undo_is_exact(simulated_device: str) -> None:
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
    @given(_specs())
    def check(spec: dict[str, Any]) -> None:
        torch.manual_seed(0)
        made: list[torch.Tensor] = []
        extra: dict[str, Any] = {}
        ns = {name: _build(s, made, extra) for name, s in spec.items()}
        ns.update(extra)
        inventory = torchdevice_magic.scan(ns)
        movable = {r.root for r in inventory.records if r.movable}
        totals = inventory.totals()
        ids, tensors = _state(ns)
        steps = sum(
            4 for opt in extra.values() for s in opt.state.values() if "step" in s
        )  # Adam's step counters stay on the CPU

        result = move(ns, simulated_device)
        assert result.ok, result.failed
        assert {i.name for i in result.moved} == movable
        moved_ids, moved_tensors = _state(ns)
        assert moved_ids == ids
        for path, (device, dtype, values) in moved_tensors.items():
            expected = "cpu" if path.endswith(".step") else "simdev"
            assert device.type == expected and dtype == tensors[path][1], path
            assert torch.equal(values, tensors[path][2]), path
        after = torchdevice_magic.scan(ns).totals()
        assert sum(after.values()) == sum(totals.values())
        assert after.get("cpu", 0) == steps and set(after) <= {"cpu", simulated_device}

        if not result.moved:
            return
        back = result.undo()
        assert back.ok, back.failed
        undone_ids, undone = _state(ns)
        assert undone_ids == ids
        assert undone.keys() == tensors.keys()
        for path, (device, dtype, values) in undone.items():
            assert device == tensors[path][0] and dtype == tensors[path][1], path
            assert torch.equal(values, tensors[path][2]), path
        assert torchdevice_magic.scan(ns).totals() == totals

    check()
