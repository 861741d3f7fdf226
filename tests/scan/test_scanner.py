"""Issue 11, scan side: reach (tensors where real code keeps them) and the correctness
regressions, each listed with the right device and bytes."""

from __future__ import annotations

import collections
import dataclasses
import time
import warnings
from typing import Any

import pytest
import torch

import torchdevice_magic as tdm
from torchdevice_magic.records import Record
from torchdevice_magic.scan import Scanner


def by_name(inventory):
    return {record.name: record for record in inventory.records}


class Trainer:
    def __init__(self) -> None:
        self.model = torch.nn.Linear(4, 3)  # 15 params, 60 B
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.scaler = torch.amp.GradScaler("cpu")
        self.scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))  # what scale() does
        self.epochs = 3


class Config:
    def __init__(self) -> None:
        self.mask = torch.ones(8, dtype=torch.bool)
        self.name = "cfg"


class BatchEncoding(collections.UserDict):
    """What Hugging Face's BatchEncoding is: a UserDict with extra attributes."""

    def __init__(self, data) -> None:
        super().__init__(data)
        self._n_sequences = 1

    def __getattr__(self, item):
        raise AssertionError("__getattr__ must not run")


class ModelOutput(collections.OrderedDict):
    """transformers.ModelOutput: an OrderedDict that is also a dataclass."""


@dataclasses.dataclass
class CausalLMOutput(ModelOutput):
    logits: torch.Tensor | None = None
    loss: torch.Tensor | None = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                self[field.name] = value


@dataclasses.dataclass(frozen=True)
class Sample:
    image: torch.Tensor
    label: int


Batch = collections.namedtuple("Batch", "x y")


# -- reach ----------------------------------------------------------------------------------


def test_attributes_of_plain_objects_model_optimizer_scaler():
    trainer = Trainer()
    records = by_name(tdm.scan({"trainer": trainer, "config": Config()}))
    assert records["trainer.model"].kind == "module"
    assert records["trainer.model"].bytes == 60 and records["trainer.model"].root == "trainer"
    assert records["trainer.optimizer"].kind == "optimizer"
    assert records["trainer.scaler._scale"].devices == ("cpu",)
    assert records["trainer.scaler._scale"].bytes == 4
    assert records["config.mask"].bytes == 8 and records["config.mask"].root == "config"


def test_non_dict_mappings_and_model_outputs():
    encoding = BatchEncoding({"input_ids": torch.ones(2, 5, dtype=torch.long)})
    output = CausalLMOutput(logits=torch.ones(2, 5, 7), loss=torch.tensor(1.0))
    inventory = tdm.scan({"enc": encoding, "out": output})
    records = by_name(inventory)
    assert records["enc['input_ids']"].bytes == 80
    assert records["out['logits']"].bytes == 2 * 5 * 7 * 4
    assert inventory.totals() == {"cpu": 80 + 280 + 4}


def test_namedtuples_and_dataclasses():
    inventory = tdm.scan(
        {"batch": Batch(torch.ones(3), torch.zeros(2)), "sample": Sample(torch.ones(4), 1)}
    )
    records = by_name(inventory)
    assert records["batch.x"].bytes == 12 and records["batch.y"].bytes == 8
    assert records["sample.image"].bytes == 16
    assert inventory.totals() == {"cpu": 36}


def test_dataloader_dataset_tensors_and_subset():
    dataset = torch.utils.data.TensorDataset(torch.ones(10, 3), torch.zeros(10, dtype=torch.long))
    loader = torch.utils.data.DataLoader(dataset, batch_size=2)
    subset_loader = torch.utils.data.DataLoader(torch.utils.data.Subset(dataset, [0, 1]))
    inventory = tdm.scan({"loader": loader, "sub": subset_loader})
    records = by_name(inventory)
    assert records["loader.dataset.tensors[0]"].bytes == 120
    assert records["loader.dataset.tensors[1]"].bytes == 80
    assert records["sub.dataset.dataset.tensors[0]"].shares_with == ("loader.dataset.tensors[0]",)
    assert inventory.totals() == {"cpu": 200}  # the subset's tensors are the same storages


def test_grad_scaler_state_and_distribution_parameters():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))
    normal = torch.distributions.Normal(torch.zeros(5), torch.ones(5))
    records = by_name(tdm.scan({"scaler": scaler, "dist": normal}))
    assert records["scaler._scale"].bytes == 4
    assert records["scaler._growth_tracker"].dtype == "int32"
    assert records["dist.loc"].bytes == 20 and records["dist.scale"].bytes == 20


def test_optimizer_and_model_inside_a_dict():
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    records = by_name(tdm.scan({"state": {"model": model, "opt": optimizer}}))
    assert records["state['model']"].kind == "module"
    assert records["state['model']"].grad_bytes == 60
    assert records["state['opt']"].kind == "optimizer"
    assert records["state['opt']"].state_bytes == {"cpu": 2 * 60 + 2 * 4}  # + step counters


class AlignDevicesHook:
    """The attributes accelerate's AlignDevicesHook keeps (accelerate is not installed here)."""

    def __init__(self, weights_map) -> None:
        self.execution_device = "cpu"
        self.offload = True
        self.weights_map = weights_map


class PrefixedDataset:
    def __init__(self, dataset, prefix) -> None:
        self.dataset = dataset
        self.prefix = prefix


def _offloaded_model():
    """What accelerate.cpu_offload leaves: parameters on meta, the real weights in a cpu
    state dict reached through each submodule's _hf_hook.weights_map."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    weights = {name: t.detach().clone() for name, t in model.state_dict().items()}
    model.to("meta")
    for index, sub in enumerate(model):
        sub._hf_hook = AlignDevicesHook(PrefixedDataset(weights, f"{index}."))
    model._hf_hook = AlignDevicesHook(PrefixedDataset(weights, ""))
    return model, weights


def test_accelerate_offloaded_model_shows_real_weights_and_is_not_movable():
    model, weights = _offloaded_model()
    inventory = tdm.scan({"model": model})
    (record,) = inventory.records
    real = sum(t.nbytes for t in weights.values())
    assert record.bytes_by_device == {"cpu": real}  # the meta stand-ins are not missing data
    assert record.bytes == record.would_need_bytes == real and record.devices == ("cpu",)
    assert not record.movable and "accelerate" in record.movable_reason
    assert "remove_hook_from_module(model" in record.movable_reason
    assert inventory.totals()["cpu"] == real


def test_accelerate_device_map_across_devices_is_not_movable():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model.hf_device_map = {"0": "cpu", "1": "disk"}
    (record,) = tdm.scan({"model": model}).records
    assert not record.movable and "device_map: cpu, disk" in record.movable_reason
    model.hf_device_map = {"": "cpu"}  # one device and no hooks: an ordinary model
    (record,) = tdm.scan({"model": model}).records
    assert record.movable and record.movable_reason == ""


# -- correctness regressions -----------------------------------------------------------------


def test_rescan_sees_tensors_appended_to_a_list_that_was_empty():
    namespace = {"losses": []}
    first = tdm.scan(namespace)
    assert first.records == []
    namespace["losses"].append(torch.ones(3))  # a later cell; "losses" not in changed
    second = tdm.scan(namespace, previous=first)
    assert [r.name for r in second.records] == ["losses[0]"]
    assert second.totals() == {"cpu": 12}


def test_rescan_sees_tensors_appended_inside_a_function_the_cell_calls():
    namespace: dict = {"history": {"loss": [torch.ones(1)]}}

    def train_step():  # what the cell calls: the cell itself names only train_step
        namespace["history"]["loss"].append(torch.ones(2))

    namespace["train_step"] = train_step
    scanner = Scanner()
    first = scanner.scan(namespace)
    assert [r.name for r in first.records] == ["history['loss'][0]"]
    train_step()
    second = scanner.scan(namespace, changed=["train_step"])
    assert {r.name for r in second.records} == {"history['loss'][0]", "history['loss'][1]"}
    assert second.totals() == {"cpu": 12}


def test_rescan_sees_a_replaced_attribute_of_a_plain_object():
    trainer = Trainer()
    namespace = {"trainer": trainer}
    first = tdm.scan(namespace)
    trainer.model = torch.nn.Linear(10, 10)
    second = tdm.scan(namespace, previous=first)
    assert by_name(second)["trainer.model"].bytes == 110 * 4


def test_one_uninitialised_lazy_linear_does_not_make_the_model_unreadable():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LazyLinear(3))
    (record,) = tdm.scan({"model": model}).records
    assert record.kind == "module" and record.bytes == 20 * 4
    assert "uninitialized lazy parameters: 1.weight, 1.bias" in record.note
    model(torch.ones(1, 4))  # materialises the lazy parameters
    (record,) = tdm.scan({"model": model}).records
    assert record.bytes == (20 + 15) * 4 and "uninitialized" not in record.note


def test_an_uninitialised_parameter_alone_is_listed_as_uninitialised():
    lazy = torch.nn.LazyLinear(3)
    (record,) = tdm.scan({"w": lazy.weight}).records
    assert record.kind == "parameter" and record.devices == ()
    assert "uninitialized" in record.note and not record.movable


def test_lbfgs_state_lists_are_counted():
    param = torch.nn.Parameter(torch.randn(10))
    optimizer = torch.optim.LBFGS([param], history_size=5, max_iter=2)

    def closure():
        optimizer.zero_grad()
        loss = (param**4).sum()
        loss.backward()
        return loss

    namespace = {"opt": optimizer}
    optimizer.step(closure)
    first = tdm.scan(namespace)
    state = optimizer.state[param]
    expected = sum(
        t.untyped_storage().nbytes()
        for value in state.values()
        for t in (value if isinstance(value, list) else [value])
        if isinstance(t, torch.Tensor)
    )
    assert first["opt"].bytes == expected > 0
    optimizer.step(closure)  # the history lists grow in place
    second = tdm.scan(namespace, previous=first)
    assert second["opt"].bytes > first["opt"].bytes


def test_a_big_list_of_floats_gives_no_row_and_costs_nothing_on_rescans():
    namespace = {"values": [float(i) for i in range(200_000)], "x": torch.ones(2)}
    scanner = Scanner()
    first = scanner.scan(namespace)
    assert [r.name for r in first.records] == ["x"]
    start = time.perf_counter()
    for _ in range(20):
        again = scanner.scan(namespace)
    per_rescan = (time.perf_counter() - start) / 20
    assert [r.name for r in again.records] == ["x"]
    assert per_rescan < 0.005  # O(1) for the list (its walk alone takes several ms)


def test_dynamic_quantized_packed_weights_are_counted():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = torch.ao.quantization.quantize_dynamic(
            torch.nn.Sequential(torch.nn.Linear(64, 32)), {torch.nn.Linear}, dtype=torch.qint8
        )
    (record,) = tdm.scan({"q": model}).records
    assert record.bytes == 64 * 32 + 32 * 4  # int8 weight + float32 bias
    assert record.devices == ("cpu",) and record.param_count == 64 * 32 + 32


def test_param_and_buffer_bytes_count_each_storage_once():
    model = torch.nn.Sequential(torch.nn.Embedding(100, 8), torch.nn.Linear(8, 100, bias=False))
    model[1].weight = model[0].weight  # tied
    shared = torch.zeros(10)
    holder = torch.nn.Module()
    holder.a = torch.nn.Parameter(shared[:5])
    holder.b = torch.nn.Parameter(shared[5:])  # two Parameters, one storage
    records = by_name(tdm.scan({"tied": model, "views": holder}))
    assert records["tied"].param_bytes == {"cpu": 800 * 4}
    assert records["views"].param_bytes == {"cpu": 40} == records["views"].bytes_by_device


def test_torchscript_module_real_sizes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU()))
    inventory = tdm.scan({"scripted": scripted})
    (record,) = inventory.records
    assert record.kind == "module" and record.bytes == (32 + 4) * 4
    assert record.param_count == 36 and record.movable
    # the rescan's signature works on TorchScript's wrapper dicts too
    assert tdm.scan({"scripted": scripted}, previous=inventory)["scripted"].bytes == 144


def test_records_are_frozen_and_typed():
    record = tdm.scan({"x": torch.ones(2)}).records[0]
    assert isinstance(record, Record)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.name = "y"  # type: ignore[misc]


def test_scanner_is_incremental_and_its_inventories_immutable():
    namespace = {"a": torch.ones(1)}
    scanner = Scanner()
    first = scanner.scan(namespace)
    namespace["b"] = torch.ones(2)
    second = scanner.scan(namespace, changed=["b"])
    assert [r.name for r in first.records] == ["a"]  # the earlier result did not change
    assert [r.name for r in second.records] == ["a", "b"]
    assert scanner.last is second


# -- a second device that keeps data (the simulated accelerator) --------------------------------


@pytest.mark.simulated
def test_simulated_device_tensors_are_keyed_by_their_host_values(simulated_device: str):
    x = torch.zeros(4, 5, device=simulated_device)
    view = x[1:]
    model = torch.nn.Linear(3, 2).to(simulated_device)
    inventory = tdm.scan({"x": x, "view": view, "model": model, "cpu": torch.ones(2)})
    records = by_name(inventory)
    assert records["x"].devices == (simulated_device,) and records["x"].bytes == 80
    assert records["view"].shares_with == ("x",)  # data_ptr is 0: keyed by the host storage
    assert records["model"].devices == (simulated_device,)
    assert records["model"].param_bytes == {simulated_device: 32}
    assert inventory.totals() == {"cpu": 8, simulated_device: 80 + 32}
    (total,) = [t for t in inventory.device_totals() if t.device == simulated_device]
    assert total.bytes == 112 and total.allocated is None  # no allocator figures on it


@pytest.mark.simulated
def test_simulated_device_reach_and_optimizer_state(simulated_device: str):
    model = torch.nn.Linear(4, 4).to(simulated_device)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 4, device=simulated_device)).sum().backward()
    optimizer.step()
    trainer = {"model": model, "opt": optimizer}
    records = by_name(tdm.scan({"trainer": trainer}))
    assert records["trainer['model']"].grad_bytes == 80
    state = records["trainer['opt']"]
    assert state.devices == (simulated_device,) and not state.mixed
    assert state.state_bytes.get(simulated_device) == 2 * 80


def test_rescan_sees_a_model_inside_an_object_change_and_reuses_it_otherwise():
    trainer = Trainer()
    scanner = Scanner()
    first = scanner.scan({"trainer": trainer})
    again = scanner.scan({"trainer": trainer})
    assert again["trainer.model"] is first["trainer.model"]  # nothing changed: not re-walked
    assert not again.objects_changed
    trainer.model(torch.ones(1, 4)).sum().backward()  # gradients appear inside the object
    after = scanner.scan({"trainer": trainer})
    assert after["trainer.model"].grad_bytes == 60 and after.objects_changed
    trainer.model.to("meta")
    assert scanner.scan({"trainer": trainer})["trainer.model"].devices == ("meta",)


def test_a_training_cells_loss_changes_no_object_but_rebinding_a_trained_tensor_does():
    """Rebinding ``out``/``loss`` (grad-carrying, looked at again every scan) changes no
    module, optimizer or parameter: the orphan check and the optimizers' holders stay as they
    were. Rebinding a tensor the optimizer updates is a change (it may orphan it)."""
    model = torch.nn.Linear(4, 2)
    weight = torch.ones(3, requires_grad=True)
    namespace: dict[str, Any] = {"model": model, "weight": weight}
    namespace["opt"] = torch.optim.SGD([*model.parameters(), weight], lr=0.1)
    scanner = Scanner()
    scanner.scan(namespace)
    for _ in range(2):  # first bound, then rebound
        namespace["out"] = model(torch.ones(1, 4))
        namespace["loss"] = namespace["out"].sum()
        assert not scanner.scan(namespace, changed=["out", "loss"]).objects_changed
    namespace["weight"] = torch.ones(3, requires_grad=True)
    rebound = scanner.scan(namespace, changed=["weight"])
    assert rebound.objects_changed
    assert rebound.orphaned_optimizers() == [("opt", 1, 3)]


def test_scan_keeps_no_user_class_alive():
    import gc
    import weakref

    class Holder:
        mask = torch.ones(1000)  # a class attribute: alive as long as the class is

    namespace = {"holder": Holder()}
    tdm.scan(namespace)
    ref = weakref.ref(Holder)
    del Holder, namespace
    gc.collect()
    assert ref() is None


def test_full_scan_leaves_out_ipython_names_that_hold_tensors():
    """The columns drop IPython's own names (`_`, `_5`, `__`, `exit`) found by one search of
    the joined names, and keep a user's `_private`; the same for a non-dict mapping."""
    tensors = {f"t{i}": torch.zeros(2) for i in range(300)}
    namespace = dict(tensors)
    namespace.update(
        {"_": tensors["t0"], "_5": torch.ones(3), "__": torch.ones(4), "exit": torch.ones(5)}
    )
    namespace["_private"] = torch.ones(6)
    namespace["n"] = 3
    for mapping in (namespace, collections.ChainMap(namespace)):
        names = {record.name for record in tdm.scan(mapping).records}
        assert names == set(tensors) | {"_private"}
    # without any such name the search finds nothing to drop
    assert {r.name for r in tdm.scan(tensors).records} == set(tensors)


def test_columns_with_unusual_tensors_among_hundreds():
    """A batch whose storage cannot be read (sparse) goes the careful way one by one; meta,
    grad-carrying tensors and Parameters too; the plain rest stays in the columns."""
    namespace = {f"t{i}": torch.zeros(4) for i in range(700)}  # 16 B each
    namespace["t300"] = torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (4,))
    namespace["meta"] = torch.zeros(10, device="meta")
    weight = torch.ones(3, requires_grad=True)
    weight.grad = torch.ones(3)
    namespace["weight"] = weight
    namespace["param"] = torch.nn.Parameter(torch.ones(5))
    records = by_name(tdm.scan(namespace))
    assert len(records) == 703
    assert records["t299"].bytes == 16 and records["t301"].devices == ("cpu",)
    assert records["t300"].note == "sparse_coo" and records["t300"].bytes > 0
    assert records["meta"].devices == ("meta",) and records["meta"].would_need_bytes == 40
    assert records["weight"].requires_grad and records["weight"].grad_bytes == 12
    assert records["param"].kind == "parameter" and records["param"].bytes == 20
    totals = tdm.scan(namespace).totals()
    assert totals["cpu"] == 699 * 16 + records["t300"].bytes + 12 + 12 + 20


def test_module_with_a_none_child_and_a_shared_submodule():
    """Submodules are collected level by level; a None child and a submodule held twice
    (which sends the module down the careful walk) give the same counts, and a rescan
    after nothing changed reuses the module while a new grad is seen."""
    shared = torch.nn.Linear(4, 4)  # 20 params
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    model.register_module("gone", None)
    twice = torch.nn.Sequential(shared, shared)
    namespace = {"model": model, "twice": twice}
    scanner = Scanner()
    first = by_name(scanner.scan(namespace))
    assert first["model"].param_count == 20 and first["model"].bytes == 80
    assert first["twice"].param_count == 20 and first["twice"].bytes == 80
    again = scanner.scan(namespace)
    assert not again.objects_changed
    model[0].weight.grad = torch.ones(4, 4)
    shared.bias.grad = torch.ones(4)
    after = by_name(scanner.scan(namespace))
    assert after["model"].grad_bytes == 64 and after["twice"].grad_bytes == 16


def test_optimizer_state_storages_keyed_when_asked_are_the_same():
    """Adam's state is summed per device at scan time and keyed only when asked: the keys,
    sizes and totals are those of every state tensor's storage, each counted once."""
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    state = [t for s in optimizer.state.values() for t in s.values()]
    expected = {
        ("cpu", t.untyped_storage().data_ptr()): ("cpu", t.untyped_storage().nbytes())
        for t in state
    }
    inventory = tdm.scan({"optimizer": optimizer})
    record = inventory["optimizer"]
    assert inventory.storages() == expected
    assert record.bytes == sum(n for _, n in expected.values()) == record.state_bytes["cpu"]
    # state on two devices, a storage two state tensors share: each device apart, once
    shared = torch.ones(4)
    optimizer.state[model.weight]["alias"] = shared
    optimizer.state[model.weight]["view"] = shared[1:]
    optimizer.state[model.bias]["meta"] = torch.ones(8, device="meta")
    record = tdm.scan({"optimizer": optimizer})["optimizer"]
    cpu_bytes = sum(n for _, n in expected.values()) + 16
    assert record.state_bytes == {"cpu": cpu_bytes, "meta": 0}
    assert record.bytes == cpu_bytes


def test_module_storages_keyed_when_asked_are_the_same():
    """A one-device model's parameter, buffer and grad storages are summed at scan time and
    keyed when asked: tied weights and a buffer viewing a parameter count once."""
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight  # tied
    model.register_buffer("view", model[0].weight.detach()[:2])  # shares the storage
    model.register_buffer("scale", torch.ones(3))
    model(torch.tensor([1, 2])).sum().backward()
    tensors = [model[0].weight, model[0].weight.grad, model.scale]
    expected = {
        ("cpu", t.untyped_storage().data_ptr()): ("cpu", t.untyped_storage().nbytes())
        for t in tensors
    }
    inventory = tdm.scan({"model": model})
    record = inventory["model"]
    assert inventory.storages() == expected
    assert record.param_bytes == {"cpu": 160} and record.buffer_bytes == {"cpu": 12}
    assert record.grad_bytes == 160 and record.bytes == 160 + 160 + 12


def test_what_the_scan_keeps_of_a_tensor_is_left_alone_by_the_garbage_collector():
    """Shapes are kept as plain tuples of ints (a torch.Size, a tuple subclass, stays tracked
    by the collector: one object per tensor for every full collection to walk)."""
    import gc

    namespace: dict = {f"t{i}": torch.zeros(i % 3 + 1, 2) for i in range(50)}
    scanner = Scanner()
    first = scanner.scan(namespace, full=True)
    namespace["later"] = torch.ones(3, 1)
    later = scanner.scan(namespace, changed=["later"])
    shapes = [*first._state.columns.shapes, later._state.entries["later"].shape]
    assert shapes[:2] == [(1, 2), (2, 2)] and shapes[-1] == (3, 1)
    gc.collect()
    assert not any(map(gc.is_tracked, shapes))


def test_a_modules_dtype_is_its_precision_not_its_integer_buffers():
    """BatchNorm's ``num_batches_tracked`` and a transformer's ``position_ids`` are int64
    buffers: the model is float32. Half the layers in float16, or a float16 running mean, is
    mixed precision, and says so."""
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    half = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    half[0].half()
    norm = torch.nn.BatchNorm1d(3)
    norm.running_mean = norm.running_mean.half()
    counter = torch.nn.Module()
    counter.register_buffer("steps", torch.zeros((), dtype=torch.long))
    records = by_name(tdm.scan({"cnn": cnn, "half": half, "norm": norm, "counter": counter}))
    assert records["cnn"].dtype == "float32"
    assert records["half"].dtype == records["norm"].dtype == "mixed"
    assert records["counter"].dtype == "int64"  # nothing but integers: those it is


@pytest.mark.simulated
def test_a_0_dim_cpu_buffer_beside_an_accelerator_model_is_not_a_mix(simulated_device: str):
    """``AveragedModel`` keeps its ``n_averaged`` counter on the cpu however the model it
    copies is placed; a 0-dim cpu tensor mixes with any device in torch's ops, so the row says
    so instead of warning. A buffer with dimensions on the cpu is a real mix."""
    model = torch.nn.Linear(4, 4).to(simulated_device)
    ema = torch.optim.swa_utils.AveragedModel(model)
    half_moved = torch.nn.Linear(4, 4).to(simulated_device)
    half_moved.register_buffer("mask", torch.ones(4))
    inventory = tdm.scan({"ema": ema, "half_moved": half_moved})
    records = by_name(inventory)
    assert records["ema"].devices == ("cpu", simulated_device)
    assert not records["ema"].mixed
    assert records["ema"].note == "its 0-dim buffers on the cpu mix with any device"
    assert records["half_moved"].mixed
    assert [r.name for r in inventory.mixed_records()] == ["half_moved"]
