"""A move keeps what users rely on: identities, storage sharing, autograd leaves and graphs,
optimizer links; modules, optimizers and containers found anywhere under a name move with it."""

from __future__ import annotations

import collections

import pytest
import torch
from movekit import (
    TARGETS,
    Bag,
    Frozen,
    Pair,
    all_tensors,
    assert_links,
    identities,
    make_namespace,
    reach_namespace,
    storage_id,
)
from torch import nn

import torchdevice_magic
from torchdevice_magic import objects
from torchdevice_magic.moves import MovedItem, MoveError, move


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


def test_two_storages_over_the_same_memory_are_one_storage_as_the_scan_counts_it() -> None:
    """THE storage identity (objects/storage.py): two tensors made over one buffer have two
    StorageImpls but one memory; the scan counts it once, so the move copies it once and the
    two stay sharing on the target."""
    memory = bytearray(24)
    x = torch.frombuffer(memory, dtype=torch.float32)
    y = torch.frombuffer(memory, dtype=torch.float32)
    assert x.untyped_storage()._cdata != y.untyped_storage()._cdata
    counted: objects.Storages = {}
    T = objects.TorchTypes.current()
    assert T is not None
    scanned = objects.add_storages(T, x, "cpu", counted)
    objects.add_storages(T, y, "cpu", counted)
    assert len(counted) == 1
    ns = {"x": x, "y": y}
    result = move(ns, "meta")
    assert result.ok and result.bytes_moved == result.predicted_bytes == scanned == 24
    assert ns["x"].untyped_storage()._cdata == ns["y"].untyped_storage()._cdata


def test_containers_deeper_than_three_levels_are_left_alone() -> None:
    deep = [[[[torch.ones(1)]]]]
    shallow = [[[torch.ones(1)]]]
    ns = {"deep": deep, "shallow": shallow}
    result = move(ns, "meta")
    assert ns["deep"] is deep and deep[0][0][0][0].device.type == "cpu"
    # lists are changed in place: whoever else holds them sees the moved tensors
    assert ns["shallow"] is shallow and ns["shallow"][0][0][0].device.type == "meta"
    assert [i.name for i in result.moved] == ["shallow"]


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


def test_move_all_reaches_every_kind_the_scan_lists_as_movable() -> None:
    ns = reach_namespace()
    ids = identities(ns)
    movable = {r.root for r in torchdevice_magic.scan(ns).records if r.movable}
    result = move(ns, "meta")
    assert result.ok, result.failed
    assert {i.name for i in result.moved} == movable  # the rule: listed movable == moved
    # a DataLoader's data stays (its batches move in the loop), and the move says so
    assert result.skipped == [("loader", objects.LOADER_DATA_STAYS)], result.skipped
    # (Adam's step counters stay on the CPU, where torch keeps them; the loader's dataset is
    # also `subset`'s, which moved it)
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


def test_a_named_model_takes_an_optimizer_kept_in_an_attribute_along() -> None:
    ns = reach_namespace()
    trainer = ns["trainer"]
    ns["model"] = trainer.model
    result = move(ns, "meta", names=["model"])
    assert result.ok and {i.name for i in result.moved} == {"model", "trainer.optimizer"}
    for p in trainer.model.parameters():
        assert trainer.optimizer.state[p]["exp_avg"].device.type == "meta"
    assert trainer.mask.device.type == "cpu"  # not named, not moved


def test_a_tuple_held_twice_in_one_name_is_rebuilt_once_for_both_places() -> None:
    batch = (torch.ones(2), torch.zeros(3))
    data = {"train": batch, "val": batch, "log": [batch]}
    old = id(batch)
    del batch
    result = move({"data": data}, "meta")
    assert result.ok and result.still_held_bytes == 0  # no place kept the old tuple
    assert data["train"] is data["val"] is data["log"][0] and id(data["train"]) != old
    assert all(t.device.type == "meta" for t in data["val"])


def test_a_dataloaders_data_stays_where_it_is_when_what_holds_it_moves() -> None:
    """Moving a trainer (or everything) moves its model, never its DataLoader's dataset: the
    batches move in the loop, and a dataset on an accelerator breaks pin_memory and forked
    workers. The table marks those rows, the result names each loader, and naming the
    loader itself is refused with the reason."""
    from torch.utils.data import DataLoader, TensorDataset

    class Trainer:
        def __init__(self) -> None:
            self.model = nn.Linear(4, 2)
            data = TensorDataset(torch.randn(8, 4), torch.zeros(8))
            self.loader = DataLoader(data, batch_size=4, pin_memory=True)

    ns = {"trainer": Trainer(), "dl": DataLoader(TensorDataset(torch.randn(6, 3)), batch_size=3)}
    rows = {r.name: r for r in torchdevice_magic.scan(ns).records}
    for name in ("trainer.loader.dataset.tensors[0]", "dl.dataset.tensors[0]"):
        assert not rows[name].movable and rows[name].movable_reason == objects.LOADER_DATA_STAYS
    assert rows["trainer.model"].movable
    result = move(ns, "meta")
    assert result.ok and [i.name for i in result.moved] == ["trainer"], result.summary()
    assert result.skipped == [
        ("trainer.loader", objects.LOADER_DATA_STAYS),
        ("dl", objects.LOADER_DATA_STAYS),
    ]
    trainer = ns["trainer"]
    assert trainer.model.weight.device.type == "meta"
    assert all(t.device.type == "cpu" for t in trainer.loader.dataset.tensors)
    assert next(iter(trainer.loader))[0].shape == (4, 4)  # it still loads its batches
    with pytest.raises(MoveError, match="a DataLoader's data stays where it is"):
        move(ns, "meta", ["dl"])
    assert ns["dl"].dataset.tensors[0].device.type == "cpu"


class _LeavesAMaskBehind(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.lin.mask = torch.ones(4)  # a plain attribute: module.to() does not move it


@pytest.mark.parametrize("target", TARGETS)
def test_a_moved_module_says_which_plain_tensor_attributes_it_left(target: str) -> None:
    """The move is ``module.to()``'s, which leaves plain tensor attributes where they are;
    the summary names them and the fix, so a forward that fails next is no surprise."""
    namespace = {"net": _LeavesAMaskBehind(), "fine": nn.Linear(2, 2)}
    result = move(namespace, target)
    assert result.ok
    assert result.left_behind == ["net.lin.mask on cpu"]
    assert namespace["net"].lin.mask.device.type == "cpu"  # as module.to() leaves it
    assert result.summary().endswith(
        "; left net.lin.mask on cpu: a plain tensor attribute, which .to() does not move "
        "(register_buffer in its class makes it move with the module)"
    )
    # moved again (the row of a module that spans devices offers it): nothing moves, and the
    # summary says why the module still spans two devices
    again = move(namespace, target, names=["net"])
    assert not again.moved and again.left_behind == ["net.lin.mask on cpu"]
    assert "skipped net (its parameters and buffers already on" in again.summary()
    assert again.summary().endswith("(register_buffer in its class makes it move with the module)")


def _regression_by_hand() -> dict[str, object]:
    """Linear regression the tutorial way: trainable leaf tensors and an optimizer on them."""
    torch.manual_seed(0)
    w = torch.randn(3, 1, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([w, b], lr=0.1)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    ((x @ w + b - y) ** 2).mean().backward()
    opt.step()
    return {"w": w, "b": b, "opt": opt, "x": x, "y": y, "params": [w, b]}


@pytest.mark.parametrize("target", TARGETS)
def test_trainable_leaves_an_optimizer_updates_move_in_place(target: str) -> None:
    """A copy of ``w`` bound to the name would leave the optimizer updating the old tensor
    (training then silently changes nothing): the leaves move in place like Parameters, stay
    plain tensors and leaves, and the optimizer's state follows them."""
    namespace = _regression_by_hand()
    w, b, opt = namespace["w"], namespace["b"], namespace["opt"]
    result = move(namespace, target)
    assert result.ok, result.failed
    assert namespace["w"] is w and namespace["b"] is b and namespace["params"][0] is w
    assert opt.param_groups[0]["params"] == [w, b]
    kind = torch.device(target).type
    assert w.device.type == kind and w.grad is not None and w.grad.device.type == kind
    assert type(w) is torch.Tensor and not isinstance(w, nn.Parameter)
    assert w.is_leaf and w.requires_grad
    assert {s["exp_avg"].device.type for s in opt.state.values()} == {kind}


@pytest.mark.simulated
def test_training_after_moving_trainable_leaves_updates_them(simulated_device: str) -> None:
    namespace = _regression_by_hand()
    w, opt = namespace["w"], namespace["opt"]
    result = move(namespace, simulated_device)
    assert result.ok, result.failed
    assert not isinstance(w, nn.Parameter) and w.is_leaf
    # the device's tensor subclass under its name is what the optimizer updates: no orphan
    names_only = {k: v for k, v in namespace.items() if k != "params"}  # (the list reaches w)
    assert torchdevice_magic.scan(names_only).orphaned_optimizers() == []
    x, y, b = namespace["x"], namespace["y"], namespace["b"]
    before = w.detach().cpu().clone()
    opt.zero_grad()
    ((x @ w + b - y) ** 2).mean().backward()
    opt.step()  # the optimizer updates the very tensor the name holds
    assert not torch.equal(w.detach().cpu(), before)
    back = result.undo()
    assert back.ok, back.failed
    assert namespace["w"] is w and w.device.type == "cpu" and type(w) is torch.Tensor
    assert {s["exp_avg"].device.type for s in opt.state.values()} == {"cpu"}


class _HandWritten:
    """Linear regression as a class: its leaves and its optimizer in attributes."""

    def __init__(self) -> None:
        self.w = torch.randn(3, 1, requires_grad=True)
        self.b = torch.zeros(1, requires_grad=True)
        self.opt = torch.optim.Adam([self.w, self.b], lr=0.1)


@pytest.mark.parametrize("target", TARGETS)
def test_leaves_an_optimizer_in_an_object_updates_move_in_place_too(target: str) -> None:
    model = _HandWritten()
    (model.w.sum() + model.b.sum()).backward()
    model.opt.step()
    w = model.w
    result = move({"model": model}, target)
    assert result.ok, result.failed
    assert model.w is w and model.opt.param_groups[0]["params"][0] is w
    kind = torch.device(target).type
    assert w.device.type == kind and type(w) is torch.Tensor and w.is_leaf
    assert {s["exp_avg"].device.type for s in model.opt.state.values()} == {kind}
