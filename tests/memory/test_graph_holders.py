"""The autograd-graph holders stay exact while the hook pays only for reading what a graph
saved: the storage keys read directly are the scan's, the walk's per-type skips never hide a
tensor, and the timeline sees a graph rebound to a larger one and forgets a released one."""

from __future__ import annotations

import pytest
import torch

from torchdevice_magic.memory.base import _keys_of
from torchdevice_magic.memory.graphs import graph_keys, graph_tensors
from torchdevice_magic.memory.timeline import Timeline
from torchdevice_magic.scan import Scanner


class Marked(torch.Tensor):
    """A subclass the scan reads the careful way."""


def saved_with_gradients(device: str) -> list[torch.Tensor]:
    """A graph's tensors of every kind the scan tells apart: leaves with and without a
    gradient, a non-leaf that retains its gradient, views, a subclass, a Parameter."""
    weight = torch.nn.Parameter(torch.randn(8, 4, device=device))
    bias = torch.randn(8, device=device, requires_grad=True)
    x = torch.randn(3, 4, device=device)
    if device == "cpu":  # the accelerator's tensors are a wrapper subclass already
        x = x.as_subclass(Marked)
    hidden = torch.nn.functional.linear(x, weight, bias)
    hidden.retain_grad()
    loss = (hidden.relu() * hidden.t().t()).sum()
    loss.backward(retain_graph=True)  # the leaves now have gradients; the graph is kept
    second = weight.t().exp().sum()  # weight has a gradient, bias has none in this graph
    tensors = graph_tensors([loss, second]) + [hidden, hidden.grad, torch.zeros(0, device=device)]
    assert any(t.grad is not None for t in tensors if t.is_leaf)
    return tensors


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_graph_keys_are_the_scans_keys(device: str) -> None:
    tensors = saved_with_gradients("cpu") if device == "cpu" else [torch.empty(5, device="meta")]
    tensors.append(torch.randn(4, 4).to_sparse())
    assert graph_keys(tensors) == _keys_of({"autograd graph": tensors})[1]


@pytest.mark.simulated
def test_graph_keys_are_the_scans_keys_on_an_accelerator(simulated_device: str) -> None:
    tensors = saved_with_gradients(simulated_device)
    assert {key[0] for key in graph_keys(tensors)} >= {simulated_device}
    assert graph_keys(tensors) == _keys_of({"autograd graph": tensors})[1]


def test_an_optional_saved_tensor_absent_from_one_node_is_found_in_the_next() -> None:
    x = torch.randn(4, 6, requires_grad=True)
    plain = torch.nn.LayerNorm(6, elementwise_affine=False)
    graph_tensors([plain(x).sum()])  # the same node type saved no weight here
    affine = torch.nn.LayerNorm(6).requires_grad_(False)  # no leaf node: only saved
    found = graph_tensors([affine(x).sum()])
    assert any(t is affine.weight for t in found)


def record(timeline: Timeline, scanner: Scanner, cell: int, namespace: dict, names: list[str]):
    inventory = scanner.scan(namespace, changed=names)
    timeline.record(cell, inventory, namespace, names)
    return {label: tracked.last_bytes for label, tracked in timeline._tracked.items()}


def test_the_timeline_sees_a_graph_rebound_to_a_larger_one_and_forgets_a_released_one() -> None:
    scanner, timeline = Scanner(), Timeline()
    x = torch.randn(16, 32, requires_grad=True)
    namespace: dict = {"x": x, "loss": x.exp().sum()}
    label = "name\x00loss\x00graph"
    held = record(timeline, scanner, 1, namespace, ["x", "loss"])
    assert held[label] == {"cpu": 16 * 32 * 4}  # exp saved its result
    # the same cell run on a larger input: a new, larger graph under the same name
    namespace["loss"] = x.exp().exp().sum()
    held = record(timeline, scanner, 2, namespace, ["loss"])
    assert held[label] == {"cpu": 2 * 16 * 32 * 4}
    # a cell that only mentions it: nothing changed, the same answer
    held = record(timeline, scanner, 3, namespace, ["loss"])
    assert held[label] == {"cpu": 2 * 16 * 32 * 4}
    # backward() frees what the graph saved: the same root now holds only the named leaf x
    # and its gradient (named under x)
    namespace["loss"].backward()
    held = record(timeline, scanner, 4, namespace, ["loss"])
    assert held.get(label, {}) == {}
    namespace["loss"] = x.exp().sum()
    held = record(timeline, scanner, 5, namespace, ["loss"])
    assert held[label] == {"cpu": 16 * 32 * 4}
    del namespace["loss"]
    held = record(timeline, scanner, 6, namespace, ["loss"])
    assert label not in held


def test_two_names_sharing_a_graph_in_one_cell_each_hold_all_it_saved() -> None:
    scanner, timeline = Scanner(), Timeline()
    weight = torch.randn(16, 32, requires_grad=True)  # a leaf no name holds: the graphs do
    out = weight.exp().exp()  # saves the inner, unnamed result (and out itself)
    namespace: dict = {"out": out, "loss": out.sum()}  # loss's graph holds out's
    held = record(timeline, scanner, 1, namespace, ["out", "loss"])
    assert held["name\x00out\x00graph"] == {"cpu": 2 * 16 * 32 * 4}
    assert held["name\x00loss\x00graph"] == {"cpu": 2 * 16 * 32 * 4}


class FreshNode:
    """A graph node as torch 2.11 hands it to Python: a new object at every
    ``next_functions`` read, freed once the walk moves on (its id then free for the next)."""

    def __init__(self, saved: list[torch.Tensor], index: int) -> None:
        self._all, self._index = saved, index

    @property
    def _saved_self(self) -> torch.Tensor:
        return self._all[self._index]

    @property
    def next_functions(self) -> tuple[tuple[FreshNode, int], ...]:
        following = self._index + 1
        return ((FreshNode(self._all, following), 0),) if following < len(self._all) else ()


class RootOf:
    def __init__(self, node: FreshNode) -> None:
        self.grad_fn = node


def test_a_graph_whose_nodes_python_makes_afresh_is_walked_whole():
    saved = [torch.zeros(1) for _ in range(20)]
    found = graph_tensors([RootOf(FreshNode(saved, 0))])
    assert [id(t) for t in found] == [id(t) for t in saved]
