"""The move engine on real code's objects (issue 11): "Move all" reaches every kind the scan
lists, keeps identities, aliasing and optimizer links, and undo puts everything back.

Tests marked ``simulated`` run on the simulated accelerator (a second device that keeps data,
in one child process); the others use ``meta`` (same code path, no data). CUDA-only checks
(pinned staging, one synchronisation, the memory prediction) skip with "no CUDA device".
"""

from __future__ import annotations

import collections
import dataclasses
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

import torchdevice_magic
from torchdevice_magic import objects
from torchdevice_magic.moves import MoveError, move

HAS_CUDA = torch.cuda.is_available()


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
    """A dict subclass holding tensors and a list of modules (listed as movable by the scan,
    skipped by "Move all" before issue 11)."""


Pair = collections.namedtuple("Pair", "first second")


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


def test_move_all_reaches_every_kind_the_scan_lists_as_movable() -> None:
    ns = reach_namespace()
    ids = identities(ns)
    movable = {r.root for r in torchdevice_magic.scan(ns).records if r.movable}
    result = move(ns, "meta")
    assert result.ok, result.failed
    assert {i.name for i in result.moved} == movable  # the rule: listed movable == moved
    assert not result.skipped, result.skipped
    # (Adam's step counters stay on the CPU, where torch keeps them)
    left = [p for p, t in all_tensors(ns) if t.device.type != "meta" and not p.endswith(".step")]
    assert not left, left
    assert identities(ns) == ids
    assert_links(ns)
    assert ns["pair"].second == 7 and type(ns["pair"]) is Pair
    assert type(ns["frozen"]) is Frozen and ns["frozen"].weight.device.type == "meta"
    assert ns["cfg"].name == "cfg" and ns["count"] == 3
    kinds = {i.name: i.kind for i in result.moved}
    assert kinds["trainer"] == "object" and kinds["encoding"] == "container"


def test_a_dict_subclass_with_tensors_and_modules_is_moved() -> None:
    layers = [nn.Linear(2, 2), nn.Linear(2, 1)]
    bag = Bag(t=torch.randn(2), layers=layers)
    ns = {"bag": bag}
    assert [r.movable for r in torchdevice_magic.scan(ns).records] == [True] * 3
    result = move(ns, "meta")
    assert result.ok and [i.name for i in result.moved] == ["bag"]
    assert ns["bag"] is bag and bag["layers"] is layers
    assert bag["t"].device.type == "meta"
    assert all(p.device.type == "meta" for m in layers for p in m.parameters())


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


def test_lbfgs_state_lists_are_moved() -> None:
    model = nn.Linear(3, 1)
    opt = torch.optim.LBFGS(model.parameters(), history_size=3, max_iter=4)
    x, y = torch.randn(8, 3), torch.randn(8, 1)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    opt.step(closure)
    state = opt.state[next(iter(model.parameters()))]
    assert state["old_dirs"] and isinstance(state["old_dirs"], list)
    ns = {"model": model, "opt": opt}
    result = move(ns, "meta")
    assert result.ok, result.failed
    for _path, t in all_tensors(ns):
        assert t.device.type == "meta", _path
    assert all(t.device.type == "meta" for t in state["old_dirs"] + state["old_stps"])


def test_containers_are_changed_in_place_and_rolled_back_in_place() -> None:
    t = torch.ones(2)
    box = [t, {"k": t}]
    ns = {"box": box, "again": box}
    result = move(ns, "meta")
    assert result.ok and ns["box"] is box is ns["again"]
    assert box[0] is box[1]["k"] and box[0].device.type == "meta"


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


# ------------------------------------------------------------------------------------------
# On a device that keeps data


@pytest.mark.simulated
def test_move_all_and_undo_on_a_device_with_data(simulated_device: str) -> None:
    ns = reach_namespace()
    ids = identities(ns)
    values = {path: t.detach().cpu().clone() for path, t in all_tensors(ns)}
    devices = {path: t.device for path, t in all_tensors(ns)}
    result = move(ns, simulated_device)
    assert result.ok and not result.skipped, (result.failed, result.skipped)
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


# ------------------------------------------------------------------------------------------
# CUDA: pinned staging, one synchronisation, the memory prediction


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_bulk_move_to_cuda_is_staged_pinned_with_one_synchronisation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torchdevice_magic.moves import staging

    ns = {f"t{i}": torch.randn(1000 + i) for i in range(300)}
    ns["model"] = nn.Linear(64, 64)
    values = {k: v.detach().clone() for k, v in ns.items() if isinstance(v, torch.Tensor)}
    syncs: list[Any] = []
    real_sync = torch.cuda.synchronize
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: (syncs.append(d), real_sync(d)))
    staged: list[int] = []
    real_to = staging.PinnedStager.to
    monkeypatch.setattr(
        staging.PinnedStager, "to", lambda s, t: (staged.append(1), real_to(s, t))[1]
    )
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    result = move(ns, "cuda")
    allocated = torch.cuda.memory_allocated() - before
    assert result.ok, result.failed
    assert len(syncs) == 1
    assert len(staged) >= 300 + 2  # every bulk tensor and the module's parameters
    for k, v in values.items():
        assert ns[k].device.type == "cuda" and torch.equal(ns[k].cpu(), v), k
    assert abs(allocated - result.predicted_bytes) <= 0.02 * result.predicted_bytes
    assert result.bytes_moved <= result.predicted_bytes


# ------------------------------------------------------------------------------------------
# One property: scan and move agree on random namespaces


class Holder:
    """A plain object holding things in attributes."""


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


def test_a_named_model_takes_an_optimizer_kept_in_an_attribute_along() -> None:
    ns = reach_namespace()
    trainer = ns["trainer"]
    ns["model"] = trainer.model
    result = move(ns, "meta", names=["model"])
    assert result.ok and {i.name for i in result.moved} == {"model", "trainer.optimizer"}
    for p in trainer.model.parameters():
        assert trainer.optimizer.state[p]["exp_avg"].device.type == "meta"
    assert trainer.mask.device.type == "cpu"  # not named, not moved


def test_move_all_leaves_only_the_unmovable_part_of_a_container() -> None:
    batch = {"x": torch.ones(2), "ghost": torch.ones(2, device="meta")}
    ns = {"batch": batch}
    result = move(ns, "cpu")
    assert result.ok and not result.moved  # x already on cpu; the meta part stays, said why
    assert "has no data" in dict(result.skipped)["batch"]
    with pytest.raises(MoveError, match="has no data"):
        move(ns, "cpu", names=["batch"])


class _FakeEvent:
    log: list[str] = []

    def record(self, stream: Any) -> None:
        self.log.append("record")

    def synchronize(self) -> None:
        self.log.append("synchronize")


def test_pinned_staging_packs_tensors_through_a_ring_of_buffers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The staging arithmetic (alignment, buffer switches, waits, dtype views), run on the CPU
    with pageable buffers and fake events; the real thing is checked on CUDA below."""
    from torchdevice_magic.moves import staging

    class CpuStager(staging.PinnedStager):
        CHUNK = 1024

    real_empty = torch.empty

    def empty(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        return real_empty(*args, **kwargs)  # pageable stands in for pinned

    monkeypatch.setattr(torch, "empty", empty)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    _FakeEvent.log = []
    stager = CpuStager(torch, torch.device("cpu"))
    sources = [
        torch.randn(7),
        torch.arange(30, dtype=torch.int64),
        torch.tensor([True, False, True]),
        torch.randn(2, 3).half(),
        torch.tensor(3.5),
        torch.randn(100),
        torch.randn(60),
        torch.randn(200),
        torch.randn(200),
    ]
    assert all(stager.eligible(t) for t in sources)
    assert not stager.eligible(torch.randn(300))  # bigger than a buffer: copied directly
    assert not stager.eligible(torch.randn(4, 4).t())  # not contiguous
    copies = [stager.to(t) for t in sources]
    for source, copy in zip(sources, copies, strict=True):
        assert copy.dtype == source.dtype and copy.shape == source.shape
        assert torch.equal(copy, source) and copy.untyped_storage() is not None
        assert copy.data_ptr() != source.data_ptr()
    assert len(stager.buffers) == 2  # the ring, reused
    assert _FakeEvent.log.count("record") >= 2 and "synchronize" in _FakeEvent.log


def test_staging_falls_back_to_plain_copies_without_pinned_memory() -> None:
    from torchdevice_magic.moves import staging

    copier = staging.Copier(torch)
    stager = staging.PinnedStager(torch, torch.device("cpu"))
    copier.stagers[torch.device("cpu")] = stager
    if torch.cuda.is_available():
        pytest.skip("pinned memory exists here")
    with pytest.raises(staging.NoPinnedMemory):
        stager.to(torch.ones(3))  # a CPU-only build has no pinned memory
    assert not stager.usable and not stager.eligible(torch.ones(3))


def test_still_held_counts_only_what_others_keep_of_moved_container_tensors() -> None:
    kept = torch.zeros(100)
    elsewhere = [kept]  # not part of the move
    ns = {"batch": {"x": kept, "y": torch.zeros(50)}, "obj": Holder()}
    ns["obj"].t = torch.zeros(25)
    result = move(ns, "meta")
    assert result.ok and result.still_held_bytes == 400
    assert elsewhere[0].device.type == "cpu" and ns["batch"]["x"].device.type == "meta"


def test_a_tuple_held_twice_in_one_name_is_rebuilt_once_for_both_places() -> None:
    batch = (torch.ones(2), torch.zeros(3))
    data = {"train": batch, "val": batch, "log": [batch]}
    old = id(batch)
    del batch
    result = move({"data": data}, "meta")
    assert result.ok and result.still_held_bytes == 0  # no place kept the old tuple
    assert data["train"] is data["val"] is data["log"][0] and id(data["train"]) != old
    assert all(t.device.type == "meta" for t in data["val"])


def test_torchscript_in_place_moves_are_checked_and_rolled_back() -> None:
    """Where Parameters move in place (``param.data = ...``: cpu <-> cuda), a TorchScript
    module's tables (no ``.get``) are read, checked and restored like an eager module's;
    before, the check raised after the parameters moved and the rollback failed too."""
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


def _exact(ns: dict[str, Any]) -> list[tuple[str, int, Any]]:
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


@pytest.mark.parametrize("where", ["set_child", "to"])
def test_a_failure_part_way_leaves_every_container_exactly_as_before(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Every k-th put-back (the commit) or copy fails in turn: the namespace, the containers
    changed in place and the objects' attributes are exactly as before each time."""
    from test_moving import CountingFault

    owner: Any = objects if where == "set_child" else torch.Tensor
    real = getattr(owner, where)
    k = 0
    while True:
        k += 1
        assert k < 200, "the move never completed"
        ns = reach_namespace()
        before = _exact(ns)
        fault = CountingFault(real, k, RuntimeError(f"fault #{k}"))
        with monkeypatch.context() as m:
            m.setattr(owner, where, fault)
            result = move(ns, "meta")
        if fault.calls < k:
            assert result.ok
            break
        assert not result.ok and f"fault #{k}" in (result.failed or ""), result.failed
        assert _exact(ns) == before, f"fault #{k}"
    assert k > 5
