"""The move engine (torchdevice_magic.moves): cpu <-> meta here, cpu <-> cuda where a GPU is.

``meta`` runs the real move path but keeps no data; the simulated accelerator
(``torchdevice_magic.testing``, tests marked ``simulated``) is the second device that keeps data
where undo and per-parameter restores need one.
"""

from __future__ import annotations

import collections
import types
import warnings
from typing import Any

import pytest
import torch
from torch import nn

import torchdevice_magic.moves as moves
from torchdevice_magic import devices as device_discovery
from torchdevice_magic.moves import MovedItem, MoveError, MoveResult, move, transaction
from torchdevice_magic.units import format_bytes

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


# ------------------------------------------------------------------------------------------
# Snapshots: "exactly as before" = same objects, same storages, same devices, same values


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


# ------------------------------------------------------------------------------------------
# Devices


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


# ------------------------------------------------------------------------------------------
# Keeps what users rely on


@pytest.mark.parametrize("target", TARGETS)
def test_move_everything_keeps_what_users_rely_on(target: str) -> None:
    ns = make_namespace()
    model, opt = ns["model"], ns["opt"]
    params_before = {q: p for q, p in model.named_parameters()}
    values_before = {k: v.detach().clone() for k, v in ns.items() if isinstance(v, torch.Tensor)}
    param_values = {q: p.detach().clone() for q, p in model.named_parameters()}
    leaf_grad = ns["leaf"].grad.clone()
    batch_note = ns["batch"]["note"]

    result = move(ns, target)

    assert result.ok and result.failed is None, result.failed
    dev = torch.device(target)
    on_target = lambda t: t.device.type == dev.type  # noqa: E731
    # The module moved in place: same Parameter objects, same class, still the module's.
    assert ns["model"] is model
    for q, p in model.named_parameters():
        assert p is params_before[q] and type(p) is nn.Parameter and on_target(p)
        assert p.grad is not None and on_target(p.grad)
    assert model.dec.weight is model.enc.weight  # tied weights stay tied
    assert ns["w"] is model.enc.weight  # a name for a Parameter still names it
    assert ns["running"] is model.norm.running_mean and on_target(ns["running"])
    assert all(on_target(b) for b in model.buffers())
    # A leaf stays a leaf with requires_grad and its grad.
    leaf = ns["leaf"]
    assert leaf.is_leaf and leaf.requires_grad and on_target(leaf)
    assert leaf.grad is not None and on_target(leaf.grad) and not leaf.grad.requires_grad
    # Two names for one tensor still name one tensor.
    assert ns["alias"] is ns["x"] and on_target(ns["x"])
    # A view and its base share one storage on the target.
    assert ns["view"]._base is ns["base"]
    assert storage_id(ns["view"]) == storage_id(ns["base"])
    if dev.type == "cuda":
        assert ns["view"].untyped_storage().data_ptr() == ns["base"].untyped_storage().data_ptr()
    assert ns["view"].storage_offset() == 2 and ns["view"].shape == (2, 3)
    # dtypes unchanged
    assert ns["half"].dtype == torch.float16 and ns["ints"].dtype == torch.int64
    assert ns["mask"].dtype == torch.bool
    # containers rebuilt with their types; non-tensors kept as the same objects
    assert type(ns["batch"]) is dict and ns["batch"]["note"] is batch_note
    assert on_target(ns["batch"]["input"]) and on_target(ns["batch"]["label"])
    assert type(ns["pair"]) is Pair and ns["pair"].second == 7 and on_target(ns["pair"].first)
    assert type(ns["nested"][0]) is tuple and on_target(ns["nested"][0][1][0])
    assert ns["nested"][1] is ns["also_shared"][0]  # a shared sub-container stays shared
    assert on_target(ns["nested"][1]["k"])
    # state_dict() aliases still alias the module's (moved) storage; its metadata kept
    sd = ns["sd"]
    assert type(sd) is collections.OrderedDict and hasattr(sd, "_metadata")
    assert storage_id(sd["enc.weight"]) == storage_id(model.enc.weight)
    assert storage_id(sd["norm.running_var"]) == storage_id(model.norm.running_var)
    # optimizer state follows its parameters; step counters stay on the CPU
    for p in model.parameters():
        state = opt.state[p]
        assert state["exp_avg"].device == p.device and state["exp_avg_sq"].device == p.device
        assert state["step"].device.type == "cpu"
    assert opt.param_groups[0]["params"][0] is params_before["enc.weight"]
    assert ns["count"] == 3 and ns["text"] == "hello"
    # Values unchanged (a device with data only).
    if dev.type != "meta":
        for k, v in values_before.items():
            assert torch.equal(ns[k].detach().cpu(), v), k
        for q, p in model.named_parameters():
            assert torch.equal(p.detach().cpu(), param_values[q]), q
        assert torch.equal(leaf.grad.cpu(), leaf_grad)
    # The report
    kinds = {item.name: item.kind for item in result.moved}
    assert kinds["model"] == "module" and kinds["opt"] == "optimizer"
    assert kinds["w"] == "parameter" and kinds["x"] == "tensor" and kinds["batch"] == "container"
    assert "count" not in kinds and "text" not in kinds
    assert all(isinstance(i, MovedItem) and i.to_device == str(result.device) for i in result.moved)
    assert result.device == (target if target == "meta" else "cuda:0")
    assert result.bytes_moved > 0 and result.seconds >= 0


@pytest.mark.parametrize("target", TARGETS)
def test_optimizer_can_step_after_the_move(target: str) -> None:
    ns = make_namespace()
    model, opt = ns["model"], ns["opt"]
    move(ns, target)
    for p in model.parameters():
        for key, value in opt.state[p].items():
            expected = "cpu" if key == "step" else p.device.type
            assert value.device.type == expected, key
    if target == "meta":
        return  # meta keeps no data; the state's devices are what matter
    opt.zero_grad()
    model(torch.randn(8, 4, device=target)).sum().backward()
    opt.step()
    assert all(p.device.type == "cuda" for p in model.parameters())


def test_moving_a_module_by_name_moves_its_optimizer_state_along() -> None:
    ns = make_namespace()
    result = move(ns, "meta", names=["model"])
    assert result.ok
    assert {i.name for i in result.moved} == {"model", "opt"}
    for p in ns["model"].parameters():
        assert ns["opt"].state[p]["exp_avg"].device.type == "meta"
        assert ns["opt"].state[p]["step"].device.type == "cpu"
    assert ns["x"].device.type == "cpu"  # not named, not moved


def test_a_named_parameter_moves_in_place_and_stays_the_modules() -> None:
    ns = make_namespace()
    w = ns["w"]
    result = move(ns, "meta", names=["w"])
    assert result.ok and [i.kind for i in result.moved][0] == "parameter"
    assert ns["w"] is w is ns["model"].enc.weight and w.device.type == "meta"
    assert w.grad is not None and w.grad.device.type == "meta"
    assert ns["model"].enc.bias.device.type == "cpu"  # the rest stays


def test_moving_only_the_optimizer_puts_its_state_with_its_parameters() -> None:
    model = nn.Linear(3, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    # The model moved without its optimizer (as after loading a checkpoint by hand): the
    # state is left behind on the CPU.
    assert move({"model": model}, "meta").ok
    ns = {"model": model, "opt": opt}
    result = move(ns, "cpu", names=["opt"])  # the target is irrelevant: state follows params
    assert result.ok and [i.name for i in result.moved] == ["opt"]
    assert result.moved[0].to_device == "meta" and result.moved[0].from_devices == ("cpu",)
    assert all(opt.state[p]["momentum_buffer"].device.type == "meta" for p in model.parameters())
    again = move(ns, "cpu", names=["opt"])
    assert not again.moved and again.skipped == [
        ("opt", "optimizer state is already with its parameters")
    ]


def test_non_leaf_tensor_keeps_its_graph() -> None:
    x = torch.randn(3, requires_grad=True)
    ns = {"y": x * 2}
    move(ns, "meta")
    assert ns["y"].grad_fn is not None and ns["y"].requires_grad and ns["y"].device.type == "meta"


def test_tensors_sharing_a_storage_without_a_view_stay_shared() -> None:
    a = torch.randn(6)
    ns = {"a": a, "d": a.detach(), "tail": a[3:], "head": torch.randn(8)[:2]}
    result = move(ns, "meta")
    assert result.ok
    assert storage_id(ns["a"]) == storage_id(ns["d"]) == storage_id(ns["tail"])
    assert ns["tail"]._base is ns["a"] and ns["tail"].storage_offset() == 3
    # A view whose base is not moved is copied on its own (like view.to(device)).
    assert ns["head"].shape == (2,) and ns["head"]._base is None
    assert result.bytes_moved == 6 * 4 + 2 * 4


def test_containers_deeper_than_three_levels_are_left_alone() -> None:
    deep = [[[[torch.ones(1)]]]]
    shallow = [[[torch.ones(1)]]]
    ns = {"deep": deep, "shallow": shallow}
    result = move(ns, "meta")
    assert ns["deep"] is deep and deep[0][0][0][0].device.type == "cpu"
    # lists are changed in place: whoever else holds them sees the moved tensors
    assert ns["shallow"] is shallow and ns["shallow"][0][0][0].device.type == "meta"
    assert [i.name for i in result.moved] == ["shallow"]


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


def test_already_on_target_is_skipped() -> None:
    ns = {"m": torch.ones(2, device="meta"), "model": nn.Linear(2, 2, device="meta")}
    result = move(ns, "meta")
    assert not result.moved and result.ok
    assert ("m", "already on meta") in result.skipped and (
        "model",
        "already on meta",
    ) in result.skipped
    assert result.summary() in (
        "Nothing to move to meta; skipped m (already on meta), model (already on meta)",
        "Nothing to move to meta; skipped model (already on meta), m (already on meta)",
    )
    assert result.undo is not None and not result.can_undo


def test_modules_and_optimizers_inside_containers_move_with_them() -> None:
    layer = nn.Linear(2, 2)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    layer(torch.ones(1, 2)).sum().backward()
    opt.step()
    weight = layer.weight
    things = [layer, torch.ones(2)]
    ns = {"things": things, "setup": {"opt": opt}}
    result = move(ns, "meta")
    assert result.ok, result.failed
    assert ns["things"] is things and things[0] is layer and layer.weight is weight
    assert weight.device.type == "meta" and things[1].device.type == "meta"
    assert opt.state[weight]["momentum_buffer"].device.type == "meta"
    assert {i.name for i in result.moved} == {"things", "setup"}


def test_swap_flags_are_left_as_they_were() -> None:
    before = (
        torch.__future__.get_swap_module_params_on_conversion(),
        torch.__future__.get_overwrite_module_params_on_conversion(),
    )
    move(make_namespace(), "meta")
    after = (
        torch.__future__.get_swap_module_params_on_conversion(),
        torch.__future__.get_overwrite_module_params_on_conversion(),
    )
    assert before == after


def test_overwrite_flag_still_keeps_parameter_identity() -> None:
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        ns = make_namespace()
        w = ns["w"]
        assert move(ns, "meta").ok
        assert ns["model"].enc.weight is w and w.device.type == "meta"
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)


# ------------------------------------------------------------------------------------------
# All or nothing


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


def _fault_sweep(monkeypatch: pytest.MonkeyPatch, owner: Any, attr: str, target: str) -> int:
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
    calls = _fault_sweep(monkeypatch, torch.Tensor, "to", target)
    assert calls > 20 or target == "cuda"  # modules, tensors, containers, state
    if target == "cuda":  # most copies to CUDA are staged: pinned copy_ then device copy_
        assert _fault_sweep(monkeypatch, torch.Tensor, "copy_", target) > 20


@pytest.mark.parametrize("target", TARGETS)
def test_every_module_to_failure_leaves_the_namespace_as_it_was(
    monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    if target == "cuda":  # to CUDA modules go through Module._apply with the pinned copier
        assert _fault_sweep(monkeypatch, nn.Module, "_apply", target) >= 3
    else:
        assert _fault_sweep(monkeypatch, nn.Module, "to", target) == 3  # model, head, free's


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
    record = transaction.ParamRecord(p)
    p.data = torch.zeros(3)  # what module.to does for cpu <-> cuda
    p.grad.data = torch.zeros(3)
    record.restore()
    assert storage_id(p) == storage and p.grad is grad and storage_id(grad) == grad_storage
    assert torch.equal(grad, torch.ones(3)) and p.requires_grad and p.is_leaf


# ------------------------------------------------------------------------------------------
# Refusals


def test_not_enough_memory_is_refused_with_the_numbers() -> None:
    ns = {"big": torch.zeros(256, 1024), "small": torch.zeros(10)}
    ns["again"] = ns["big"]
    ns["part"] = ns["big"][:5]
    before = snapshot(ns)
    with pytest.raises(MoveError) as info:
        move(ns, "meta", free_bytes=1)
    assert str(info.value) == "needs 1.0 MiB, 1 B free on meta — nothing was moved"
    assert_same(before, snapshot(ns))
    with pytest.raises(MoveError, match=r"^needs 40 B, 39 B free on meta — nothing was moved$"):
        move(ns, "meta", names=["small"], free_bytes=39)
    assert move(ns, "meta", names=["small"], free_bytes=40).ok


def test_cpu_memory_is_checked_from_proc_meminfo() -> None:
    free = device_discovery.free_bytes(torch.device("cpu"))
    try:
        with open("/proc/meminfo") as f:
            has_meminfo = "MemAvailable:" in f.read()
    except OSError:
        has_meminfo = False
    assert (free is not None and free > 0) if has_meminfo else free is None


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


# ------------------------------------------------------------------------------------------
# Result, progress, still-held memory, undo


def test_summary_and_progress() -> None:
    ns = make_namespace()
    calls: list[tuple[int, int]] = []
    result = move(ns, "meta", progress=lambda d, t: calls.append((d, t)))
    assert calls[0] == (0, result.bytes_moved) and calls[-1] == (result.bytes_moved,) * 2
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:], strict=False))
    text = result.summary()
    assert text.startswith(f"Moved {len(result.moved)} objects (") and " to meta in " in text
    assert "\n" not in text
    assert MoveResult(device="meta", failed="x: boom").summary() == "Nothing was moved: x: boom"
    assert format_bytes(1023) == "1023 B" and format_bytes(3 * 2**30 + 2**29) == "3.5 GiB"


def test_still_held_bytes_counts_old_tensors_kept_elsewhere() -> None:
    class Holder:
        pass

    keep = Holder()
    x, y = torch.zeros(100), torch.zeros(50)
    keep.x = x  # an attribute: not part of the move
    ns = {"x": x, "y": y}
    del x, y
    result = move(ns, "meta")
    assert result.still_held_bytes == 400
    assert keep.x.device.type == "cpu"
    assert move({"z": torch.zeros(10)}, "meta").still_held_bytes == 0
    model = nn.Linear(4, 4)
    sd = model.state_dict()  # aliases of the parameters, not moved
    r = move({"model": model}, "meta")
    assert r.still_held_bytes == sum(v.untyped_storage().nbytes() for v in sd.values())


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


def test_bulk_tensors_name_the_one_that_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = {f"t{i}": torch.full((3,), float(i)) for i in range(50)}
    before = snapshot(ns)
    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "to", CountingFault(torch.Tensor.to, 17, RuntimeError("no room")))
        result = move(ns, "meta")
    assert result.failed == "t16: RuntimeError: no room"
    assert_same(before, snapshot(ns))


def test_progress_on_many_tensors_is_monotonic_and_complete() -> None:
    ns = {f"t{i}": torch.zeros(10) for i in range(1000)}
    calls: list[tuple[int, int]] = []
    result = move(ns, "meta", progress=lambda d, t: calls.append((d, t)))
    assert result.ok and len(result.moved) == 1000
    assert calls[0] == (0, 40_000) and calls[-1] == (40_000, 40_000)
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:], strict=False))
    assert 10 < len(calls) <= 110  # throttled to about one call per percent


@pytest.mark.parametrize("target", TARGETS)
def test_recurrent_modules_keep_their_parameters(target: str) -> None:
    """RNNs override _apply to re-point their flat weights; Parameters must stay the same."""
    lstm = nn.LSTM(3, 4, num_layers=2)
    opt = torch.optim.SGD(lstm.parameters(), lr=0.1, momentum=0.9)
    lstm(torch.randn(2, 1, 3))[0].sum().backward()
    opt.step()
    params = list(lstm.parameters())
    ns = {"lstm": lstm, "opt": opt}
    assert move(ns, target).ok
    assert all(a is b for a, b in zip(lstm.parameters(), params, strict=True))
    assert all(w is p for w, p in zip(lstm._flat_weights, params, strict=True))
    assert all(opt.state[p]["momentum_buffer"].device == p.device for p in params)
    if target != "meta":
        lstm(torch.randn(2, 1, 3, device=target))[0].sum().backward()
        opt.step()


def test_what_was_already_on_the_target_is_not_reported_as_still_held() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    model[1].to("meta")
    ns = {"model": model}
    result = move(ns, "meta")
    assert result.ok and result.still_held_bytes == 0
    assert result.bytes_moved == (8 * 8 + 8) * 4  # only the part that was on the cpu


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
