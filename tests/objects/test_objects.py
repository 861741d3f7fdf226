"""The one walker (torchdevice_magic.objects): kinds, edges, putting children back, signatures,
storage keys, module and optimizer parts. Read-only and bounded on every kind it knows."""

from __future__ import annotations

import collections
import dataclasses
import time

import pytest
import torch

from torchdevice_magic import objects as O
from torchdevice_magic.objects import Kind

T = O.TorchTypes.current()


class Trainer:
    def __init__(self) -> None:
        self.model = torch.nn.Linear(2, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.scaler = torch.amp.GradScaler("cpu")
        self.scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))
        self.lr = 0.1


class Slotted:
    __slots__ = ("mask", "unset")

    def __init__(self) -> None:
        self.mask = torch.ones(3)


class Exploding:
    """A property and a __getattr__ that must never run."""

    def __init__(self) -> None:
        self.t = torch.ones(1)

    @property
    def boom(self):
        raise AssertionError("property called")

    def __getattr__(self, name):
        raise AssertionError("__getattr__ called")


@dataclasses.dataclass(frozen=True)
class FrozenOut:
    logits: torch.Tensor
    loss: float = 0.0


@dataclasses.dataclass
class Config:
    mask: torch.Tensor
    name: str = "x"


Pair = collections.namedtuple("Pair", "x y")


def leaves(value, name="v"):
    return {leaf.path: leaf.kind for leaf in O.walk(T, value, name).leaves}


def test_kinds_of_everything_the_scan_knows():
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.ones(2)))
    expected = {
        Kind.TENSOR: torch.ones(1),
        Kind.PARAMETER: torch.nn.Parameter(torch.ones(1)),
        Kind.MODULE: torch.nn.Linear(1, 1),
        Kind.OPTIMIZER: torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1),
        Kind.MAPPING: collections.OrderedDict(),
        Kind.USERDICT: collections.UserDict(),
        Kind.SEQUENCE: (1,),
        Kind.NAMEDTUPLE: Pair(1, 2),
        Kind.DATACLASS: Config(torch.ones(1)),
        Kind.OBJECT: Trainer(),
        Kind.DATALOADER: loader,
        Kind.DATASET: loader.dataset,
        Kind.GRADSCALER: torch.amp.GradScaler("cpu"),
        Kind.DISTRIBUTION: torch.distributions.Normal(torch.zeros(1), torch.ones(1)),
    }
    every_kind = {v for k, v in vars(Kind).items() if k.isupper()} - {Kind.NONE}
    assert set(expected) == every_kind, "give each kind an example here"
    for kind, value in expected.items():
        assert O.kind_of(T, value) == kind, kind
    for value in (
        1,
        2.0,
        "s",
        None,
        torch.Size([2]),
        len,
        torch,
        Trainer,
        iter([]),
        (x for x in []),
    ):
        assert O.kind_of(T, value) == Kind.NONE


def test_plain_object_attributes_and_slots_are_reached_without_properties():
    assert leaves(Trainer(), "trainer") == {
        "trainer.model": Kind.MODULE,
        "trainer.optimizer": Kind.OPTIMIZER,
        "trainer.scaler._scale": Kind.TENSOR,
        "trainer.scaler._growth_tracker": Kind.TENSOR,
    }
    assert leaves(Slotted(), "s") == {"s.mask": Kind.TENSOR}
    assert leaves(Exploding(), "e") == {"e.t": Kind.TENSOR}


def test_mappings_namedtuples_dataclasses_loaders_distributions():
    assert leaves(collections.UserDict({"ids": torch.ones(1)}), "enc") == {"enc['ids']": "tensor"}
    assert set(leaves(Pair(torch.ones(1), 3), "p")) == {"p.x"}
    assert set(leaves(FrozenOut(torch.ones(2)), "out")) == {"out.logits"}
    dataset = torch.utils.data.TensorDataset(torch.ones(4, 2), torch.zeros(4))
    loader = torch.utils.data.DataLoader(torch.utils.data.Subset(dataset, [0, 1]))
    assert set(leaves(loader, "loader")) == {
        "loader.dataset.dataset.tensors[0]",
        "loader.dataset.dataset.tensors[1]",
    }
    normal = torch.distributions.Normal(torch.zeros(3), torch.ones(3))
    assert set(leaves(normal, "dist")) == {"dist.loc", "dist.scale"}


def test_walk_is_bounded_and_survives_cycles():
    assert leaves([[[[torch.ones(1)]]]]) == {}
    loop: list = [torch.ones(1)]
    loop.append(loop)
    assert set(leaves(loop)) == {"v[0]"}
    walked = O.walk(T, [torch.ones(1)] + [0] * 10, "v", cap=5)
    assert walked.truncated


def test_big_container_of_numbers_is_cheap_and_empty():
    floats = [0.5] * 200_000
    start = time.perf_counter()
    walked = O.walk(T, floats, "floats")
    assert walked.leaves == [] and not walked.truncated
    key = O.signature(T, floats, O.structure(walked))
    assert key == O.signature(T, floats, O.structure(walked))
    assert time.perf_counter() - start < 1.0  # generous: this is about not being O(n) Python


def test_signature_sees_appends_at_any_depth_and_replaced_attributes():
    losses: list = []
    walked = O.walk(T, losses, "losses")
    before = O.signature(T, losses, O.structure(walked))
    losses.append(torch.ones(1))
    assert O.signature(T, losses, O.structure(walked)) != before
    history = {"loss": []}
    walked = O.walk(T, history, "history")
    before = O.signature(T, history, O.structure(walked))
    history["loss"].append(1.0)
    assert O.signature(T, history, O.structure(walked)) != before
    trainer = Trainer()
    walked = O.walk(T, trainer, "trainer")
    before = O.signature(T, trainer, O.structure(walked))
    trainer.model = torch.nn.Linear(2, 2)
    assert O.signature(T, trainer, O.structure(walked)) != before


def test_children_go_back_in_place_or_rebuilt():
    items = [torch.ones(1), 2]
    old = O.set_child(items, Kind.SEQUENCE, 0, "moved")
    assert items == ["moved", 2] and isinstance(old, torch.Tensor)
    enc = collections.UserDict({"ids": 1})
    O.set_child(enc, Kind.USERDICT, "ids", 2)
    assert enc.data == {"ids": 2}
    trainer = Trainer()
    O.set_child(trainer, Kind.OBJECT, "lr", 0.5)
    assert trainer.lr == 0.5
    slotted = Slotted()
    O.set_child(slotted, Kind.OBJECT, "mask", None)
    assert slotted.mask is None
    frozen = FrozenOut(torch.ones(1))
    assert not O.is_mutable(frozen, Kind.DATACLASS) and O.is_mutable(Config(1), Kind.DATACLASS)
    new = O.rebuilt(frozen, Kind.DATACLASS, {"logits": "moved"})
    assert new.logits == "moved" and isinstance(frozen.logits, torch.Tensor)
    assert O.rebuilt(Pair(1, 2), Kind.NAMEDTUPLE, {1: 3}) == Pair(1, 3)
    assert O.rebuilt((1, 2), Kind.SEQUENCE, {0: 0}) == (0, 2)


def test_storage_keys_count_views_once_and_meta_by_its_storage():
    base = torch.zeros(10)
    into: dict = {}
    O.add_storages(T, base, "cpu", into)
    O.add_storages(T, base[2:], "cpu", into)
    assert list(into.values()) == [("cpu", 40)]
    meta: dict = {}
    first, second = torch.empty(5, device="meta"), torch.empty(5, device="meta")
    assert O.add_storages(T, first, "meta", meta) == 20
    O.add_storages(T, second, "meta", meta)
    assert len(meta) == 2  # distinct meta storages are not merged


def test_module_parts_torchscript_quantized_and_lazy():
    scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(3, 3)))
    assert len(O.module_parts(T, scripted).params) == 2
    with pytest.warns(Warning):
        quantized = torch.ao.quantization.quantize_dynamic(
            torch.nn.Sequential(torch.nn.Linear(64, 64)), {torch.nn.Linear}, dtype=torch.qint8
        )
    parts = O.module_parts(T, quantized)
    weight = dict(parts.extra)["0._packed_params.weight"]
    assert weight.dtype == torch.qint8 and weight.untyped_storage().nbytes() == 64 * 64
    lazy = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LazyLinear(3))
    parts = O.module_parts(T, lazy)
    assert len(parts.params) == 2 and parts.uninitialized == ["1.weight", "1.bias"]


def test_module_parts_count_tied_weights_once():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    assert len(O.module_parts(T, model).params) == 1


def test_lbfgs_state_lists_are_reached():
    param = torch.nn.Parameter(torch.randn(10))
    optimizer = torch.optim.LBFGS([param])

    def closure():
        optimizer.zero_grad()
        loss = (param**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    keys = {key for _, key, _ in O.optimizer_state_tensors(T, optimizer)}
    assert {"d", "H_diag", "prev_flat_grad", "old_dirs[0]", "ro[0]"} <= keys


class AlignDevicesHook:  # the attributes accelerate's hook keeps, nothing more
    def __init__(self, weights_map) -> None:
        self.weights_map = weights_map
        self.offload = True


class PrefixedDataset:
    def __init__(self, dataset, prefix) -> None:
        self.dataset = dataset
        self.prefix = prefix


def test_accelerate_dispatch_reads_the_real_weights_from_the_hooks():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    weights = {name: t.detach().clone() for name, t in model.state_dict().items()}
    model.to("meta")
    model[0]._hf_hook = AlignDevicesHook(PrefixedDataset(weights, "0."))
    parts = O.module_parts(T, model)
    dispatch = O.accelerate_dispatch(T, "model", parts.submodules)
    assert dispatch is not None and "accelerate" in dispatch.reason
    assert {name for name, _ in dispatch.weights} == {"0.weight", "0.bias"}
    assert O.accelerate_dispatch(T, "plain", [torch.nn.Linear(1, 1)]) is None


def test_paths_with_braces_and_odd_keys():
    value = {"{a}": [torch.ones(1)], ("t",): torch.ones(1)}
    assert set(leaves(value, "d")) == {"d['{a}'][0]", "d[<tuple>]"}


# -- property: the walk finds exactly the tensors a structure holds, each path leads back -----

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def _build(shape, made):
    kind, content = shape
    if kind == "tensor":
        tensor = torch.ones(content + 1)
        made.append(tensor)
        return tensor
    if kind == "atom":
        return content
    items = [_build(child, made) for child in content]
    if kind == "list":
        return items
    if kind == "tuple":
        return tuple(items)
    if kind == "dict":
        return {f"k{i}": item for i, item in enumerate(items)}
    if kind == "userdict":
        return collections.UserDict({f"k{i}": item for i, item in enumerate(items)})
    holder = Config(None)  # a dataclass; attributes a0, a1... hold the children
    for i, item in enumerate(items):
        setattr(holder, f"a{i}", item)
    return holder


shapes = st.recursive(
    st.one_of(
        st.tuples(st.just("tensor"), st.integers(0, 3)),
        st.tuples(st.just("atom"), st.one_of(st.integers(), st.text(max_size=3))),
    ),
    lambda children: st.tuples(
        st.sampled_from(["list", "tuple", "dict", "userdict", "object"]),
        st.lists(children, max_size=4),
    ),
    max_leaves=12,
)


def _depth_ok(shape, depth=0):
    """Tensors the walk must reach: those under at most MAX_DEPTH composites."""
    kind, content = shape
    if kind == "tensor":
        return 1
    if kind == "atom" or depth >= O.MAX_DEPTH:
        return 0
    return sum(_depth_ok(child, depth + 1) for child in content)


@settings(max_examples=150, deadline=None)
@given(shapes)
def test_walk_finds_every_reachable_tensor_and_paths_resolve(shape):
    made: list = []
    value = _build(shape, made)
    walked = O.walk(T, value, "v")
    assert len(walked.leaves) == _depth_ok(shape)
    ids = {id(t) for t in made}
    for leaf in walked.leaves:
        assert id(leaf.value) in ids
        if leaf.node >= 0:  # the key leads back to the leaf through the base-class getters
            node = walked.nodes[leaf.node]
            assert O.child_at(node.kind, node.value, leaf.key) is leaf.value
    spec = O.structure(walked)
    assert O.signature(T, value, spec) == O.signature(T, value, spec)
