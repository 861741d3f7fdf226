"""What the move tests share: namespaces that hold everything users rely on, snapshots
("exactly as before": same objects, storages, devices and values) and a fault injector.

``meta`` runs the real move path but keeps no data; the simulated accelerator (tests marked
``simulated``) is the second device that keeps data where undo needs one; CUDA tests are marked
``cuda`` and skip without a GPU.
"""

from __future__ import annotations

import collections
import dataclasses
import types
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

from torchdevice_magic import objects

HAS_CUDA = torch.cuda.is_available()


cuda_only = [pytest.mark.cuda, pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")]


TARGETS = ["meta", pytest.param("cuda", marks=cuda_only)]


Pair = collections.namedtuple("Pair", "first second")


class Tied(nn.Module):
    """Encoder/decoder with a tied weight, a BatchNorm (buffers) in between."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.dec = nn.Linear(4, 4)
        self.dec.weight = self.enc.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.norm(self.enc(x)))


def make_namespace() -> dict[str, Any]:
    """Everything users rely on, in one namespace: ids and storages are checked after moves."""
    torch.manual_seed(0)
    model = Tied()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    leaf = torch.randn(5, requires_grad=True)
    leaf.grad = torch.full((5,), 0.5)
    base = torch.arange(12.0)
    shared = {"k": torch.ones(2)}
    ns: dict[str, Any] = {
        "model": model,
        "opt": opt,
        "w": model.enc.weight,  # a name bound to a module's Parameter
        "running": model.norm.running_mean,  # a name bound to a buffer
        "leaf": leaf,
        "x": torch.randn(3, 3),
        "half": torch.randn(4).half(),
        "ints": torch.arange(5),
        "mask": torch.tensor([True, False]),
        "base": base,
        "view": base[2:8].view(2, 3),
        "batch": {"input": torch.randn(2, 2), "label": torch.tensor([1, 0]), "note": "keep"},
        "pair": Pair(torch.zeros(3), 7),
        "nested": [(torch.ones(1), [torch.ones(2)]), shared],
        "also_shared": [shared],
        "sd": model.state_dict(),
        "head": nn.Linear(4, 2),
        "free": nn.Parameter(torch.randn(2)),  # a Parameter outside any module
        "count": 3,
        "text": "hello",
    }
    ns["alias"] = ns["x"]  # two names, one tensor
    return ns


# Facts that differ after a correct round trip (new memory, rebound objects); everything else
# must come back exactly.
IDENTITY_KEYS = ("id", "storage", "grad_id", "grad_storage")


def _tensor_facts(t: torch.Tensor) -> dict[str, Any]:
    facts = {
        "id": id(t),
        "type": type(t),
        "device": t.device,
        "dtype": t.dtype,
        "shape": tuple(t.shape),
        "stride": t.stride(),
        "offset": t.storage_offset(),
        "requires_grad": t.requires_grad,
        "is_leaf": t.is_leaf,
        "storage": t.untyped_storage()._cdata,
    }
    if t.is_leaf and t.grad is not None:
        facts.update(
            grad_id=id(t.grad),
            grad_device=t.grad.device,
            grad_storage=t.grad.untyped_storage()._cdata,
        )
    return facts


def _values(t: torch.Tensor) -> torch.Tensor | None:
    return None if t.device.type == "meta" else t.detach().cpu().clone()


def snapshot(ns: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in ns.items():
        out[name] = (id(value), _describe(value, 0))
    return out


def _describe(value: Any, depth: int) -> Any:
    if isinstance(value, torch.Tensor):
        grad = value.grad if value.is_leaf else None
        return (
            "tensor",
            _tensor_facts(value),
            _values(value),
            None if grad is None else _values(grad),
        )
    if isinstance(value, nn.Module):
        params = [
            (q, _tensor_facts(p), _values(p), None if p.grad is None else _values(p.grad))
            for q, p in value.named_parameters()
        ]
        buffers = [(q, _tensor_facts(b), _values(b)) for q, b in value.named_buffers()]
        return ("module", params, buffers)
    if isinstance(value, torch.optim.Optimizer):
        state = []
        for group in value.param_groups:
            for p in group["params"]:
                entry = value.state.get(p, {})
                state.append(
                    (
                        id(p),
                        id(entry),
                        [(k, _tensor_facts(v), _values(v)) for k, v in entry.items()],
                    )
                )
        return ("optimizer", state)
    if isinstance(value, (list, tuple)) and depth < 4:
        return (type(value), id(value), [_describe(v, depth + 1) for v in value])
    if isinstance(value, dict) and depth < 4:
        return (type(value), id(value), [(k, _describe(v, depth + 1)) for k, v in value.items()])
    return ("object", id(value))


def assert_same(before: Any, after: Any, path: str = "") -> None:
    if isinstance(before, torch.Tensor) or isinstance(after, torch.Tensor):
        assert isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor), path
        assert torch.equal(before, after), f"values differ at {path}"
        return
    if isinstance(before, dict):
        assert isinstance(after, dict) and before.keys() == after.keys(), path
        for k in before:
            assert_same(before[k], after[k], f"{path}.{k}")
        return
    if isinstance(before, (list, tuple)):
        assert type(before) is type(after) and len(before) == len(after), path
        for i, (a, b) in enumerate(zip(before, after, strict=True)):
            assert_same(a, b, f"{path}[{i}]")
        return
    assert before == after, f"{path}: {before!r} != {after!r}"


def storage_id(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


class CountingFault:
    """Replaces a method; the k-th call raises ``exc`` (the others run the real method)."""

    def __init__(self, real: Any, k: int, exc: BaseException) -> None:
        self.real, self.k, self.exc, self.calls = real, k, exc, 0

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        # installed on a class, it must bind like the method it replaces
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, obj: Any, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.k:
            raise self.exc
        return self.real(obj, *args, **kwargs)


class Trainer:
    """What training scripts keep: a plain object holding the model, optimizer and scaler."""


@dataclasses.dataclass
class Config:
    mask: torch.Tensor
    name: str = "cfg"


@dataclasses.dataclass(frozen=True)
class Frozen:
    weight: torch.Tensor


@dataclasses.dataclass
class Output(collections.OrderedDict):
    """Like transformers' ModelOutput: an OrderedDict that is also a dataclass."""

    logits: Any = None
    hidden: Any = None
    attentions: Any = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                self[f.name] = value


class Bag(dict):
    """A dict subclass holding tensors and a list of modules: the scan lists it as movable, so
    "Move all" must move it."""


class Holder:
    """A plain object holding things in attributes."""


def reach_namespace() -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    scaler = torch.amp.GradScaler("cpu")
    scaler.scale(torch.ones(()))  # creates its _scale and _growth_tracker tensors
    shared = torch.randn(4)
    trainer = Trainer()
    trainer.model = model
    trainer.optimizer = opt
    trainer.scaler = scaler
    trainer.mask = shared
    dataset = TensorDataset(torch.randn(6, 4), torch.arange(6))
    inner = nn.Linear(2, 2)
    inner_opt = torch.optim.SGD(inner.parameters(), lr=0.1, momentum=0.9)
    inner(torch.randn(1, 2)).sum().backward()
    inner_opt.step()
    return {
        "trainer": trainer,
        "encoding": collections.UserDict({"input_ids": torch.arange(5), "mask": shared}),
        "out": Output(logits=torch.randn(2, 3), hidden=(torch.randn(2), torch.randn(2))),
        "pair": Pair(torch.zeros(3), 7),
        "cfg": Config(torch.ones(2, dtype=torch.bool)),
        "frozen": Frozen(torch.randn(3)),
        "loader": DataLoader(dataset, batch_size=2),
        "subset": Subset(dataset, [0, 1]),
        "dist": torch.distributions.Normal(torch.zeros(2), torch.ones(2)),
        "setup": {"model": inner, "opt": inner_opt},
        "bag": Bag(t=torch.randn(2), layers=[nn.Linear(2, 2), nn.Linear(2, 1)]),
        "count": 3,
    }


def all_tensors(ns: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """Every tensor the one walker reaches (module parameters/buffers, optimizer state too)."""
    T = objects.TorchTypes.current()
    out: list[tuple[str, torch.Tensor]] = []
    for name, value in ns.items():
        for leaf in objects.walk(T, value, name).leaves:
            v = leaf.value
            if isinstance(v, torch.Tensor):
                out.append((leaf.path, v))
            elif isinstance(v, nn.Module):
                out.extend((f"{leaf.path}.{q}", p) for q, p in v.named_parameters())
                out.extend((f"{leaf.path}.{q}", b) for q, b in v.named_buffers())
            elif isinstance(v, torch.optim.Optimizer):
                out.extend(
                    (f"{leaf.path}.state[{i}].{path}", t)
                    for i, (_p, path, t) in enumerate(objects.optimizer_state_tensors(T, v))
                )
    return out


def identities(ns: dict[str, Any]) -> dict[str, int]:
    tr = ns["trainer"]
    return {
        "trainer": id(tr),
        "model": id(tr.model),
        "weight": id(tr.model[0].weight),
        "opt": id(tr.optimizer),
        "scaler": id(tr.scaler),
        "encoding": id(ns["encoding"]),
        "out": id(ns["out"]),
        "cfg": id(ns["cfg"]),
        "loader": id(ns["loader"]),
        "dataset": id(ns["loader"].dataset),
        "dist": id(ns["dist"]),
        "setup": id(ns["setup"]),
        "inner": id(ns["setup"]["model"]),
        "bag": id(ns["bag"]),
        "layers": id(ns["bag"]["layers"]),
    }


def assert_links(ns: dict[str, Any]) -> None:
    """Aliasing and optimizer links users rely on."""
    tr = ns["trainer"]
    assert tr.mask is ns["encoding"]["mask"]  # one tensor in two places stays one
    assert ns["out"].logits is ns["out"]["logits"]  # ModelOutput item and attribute agree
    assert ns["loader"].dataset is ns["subset"].dataset
    params = list(tr.model.parameters())
    assert tr.optimizer.param_groups[0]["params"] == params
    assert all(p in tr.optimizer.state for p in params)
    inner = ns["setup"]["model"]
    assert ns["setup"]["opt"].param_groups[0]["params"][0] is inner.weight


def exactly(ns: dict[str, Any]) -> list[tuple[str, int, Any]]:
    """(path, id, device) of every composite and tensor the walker reaches: 'exactly as
    before' for containers changed in place."""
    T = objects.TorchTypes.current()
    out: list[tuple[str, int, Any]] = []
    for name, value in ns.items():
        walked = objects.walk(T, value, name)
        out.extend((node.path, id(node.value), None) for node in walked.nodes)
        out.extend(
            (leaf.path, id(leaf.value), getattr(leaf.value, "device", None))
            for leaf in walked.leaves
        )
    out.extend((path, id(t), t.device) for path, t in all_tensors(ns))
    return out
