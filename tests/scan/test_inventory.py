"""The inventory core: what scan() finds, how it counts memory, and that it never breaks."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import weakref

import pytest
import torch

import torchdevice_magic as tdm
from torchdevice_magic import protocol
from torchdevice_magic.names import is_ipython_bookkeeping
from torchdevice_magic.scan import AGGREGATE_ABOVE, CONTAINER_ELEMENT_CAP


def by_name(inventory):
    return {record.name: record for record in inventory.records}


# -- what is found ----------------------------------------------------------------------------


def test_finds_tensors_parameters_modules_optimizers_and_skips_the_rest():
    model = torch.nn.Linear(4, 3)
    namespace = {
        "x": torch.zeros(2, 4),
        "w": torch.nn.Parameter(torch.ones(3)),
        "model": model,
        "opt": torch.optim.SGD(model.parameters(), lr=0.1),
        "number": 3,
        "text": "hello",
        "function": len,
        "klass": torch.nn.Linear,
        "module": collections,
    }
    records = by_name(tdm.scan(namespace))
    assert set(records) == {"x", "w", "model", "opt"}
    assert records["x"].kind == "tensor" and records["x"].shape == (2, 4)
    assert records["x"].dtype == "float32" and records["x"].bytes == 32
    assert records["w"].kind == "parameter" and records["w"].requires_grad
    assert records["model"].kind == "module" and records["model"].param_count == 15
    assert records["model"].param_bytes == {"cpu": 60}
    assert records["opt"].kind == "optimizer" and records["opt"].type == "SGD"


def test_tensor_subclass_is_a_tensor():
    class Tagged(torch.Tensor):
        pass

    tagged = torch.ones(4).as_subclass(Tagged)
    record = by_name(tdm.scan({"tagged": tagged}))["tagged"]
    assert record.type == "Tagged" and record.bytes == 16 and record.devices == ("cpu",)


@pytest.mark.parametrize(
    "name", ["In", "Out", "_", "__", "___", "_1", "_42", "_i", "_ii", "_iii", "_i7", "exit"]
)
def test_ipython_bookkeeping_is_skipped(name):
    assert is_ipython_bookkeeping(name)
    assert tdm.scan({name: torch.ones(3)}).records == []


@pytest.mark.parametrize("name", ["x", "_private", "_input", "i", "Out2"])
def test_user_names_are_not_bookkeeping(name):
    assert not is_ipython_bookkeeping(name)
    assert [r.name for r in tdm.scan({name: torch.ones(3)}).records] == [name]


def test_small_containers_give_one_record_per_tensor_with_its_path():
    Batch = collections.namedtuple("Batch", "x y")
    namespace = {
        "batch": {"x": torch.ones(2, 3), "y": torch.zeros(2, dtype=torch.long)},
        "batches": [torch.ones(1), torch.ones(2), torch.ones(3), torch.ones(4)],
        "pair": Batch(torch.ones(5), torch.ones(6)),
        "nested": {"inner": [{"deep": torch.ones(7)}]},
    }
    records = by_name(tdm.scan(namespace))
    assert {"batch['x']", "batch['y']", "batches[3]", "pair.x", "pair.y"} <= set(records)
    assert "nested['inner'][0]['deep']" in records
    assert records["batch['y']"].dtype == "int64" and records["batch['y']"].root == "batch"
    assert records["batches[3]"].shape == (4,)


def test_containers_nested_deeper_than_three_levels_are_not_walked():
    namespace = {"deep": [[[[torch.ones(3)]]]]}
    assert tdm.scan(namespace).records == []


def test_big_container_is_one_aggregated_record_whose_bytes_all_count():
    tensors = [torch.ones(8) for _ in range(10_000)]
    inventory = tdm.scan({"batches": tensors})
    (record,) = inventory.records
    assert record.kind == "container" and record.element_count == 10_000
    assert record.bytes == 10_000 * 32
    assert inventory.totals() == {"cpu": 10_000 * 32}
    assert record.type == "list[Tensor]" and not record.truncated


def test_container_past_the_safety_cap_says_so():
    tensors = [torch.ones(1)] * 5 + [0] * CONTAINER_ELEMENT_CAP
    (record,) = tdm.scan({"huge": tensors}).records
    assert record.truncated
    assert f"stopped after {CONTAINER_ELEMENT_CAP:,} elements" in record.note
    assert "stopped after" in repr(tdm.scan({"huge": tensors}))


def test_aggregation_threshold():
    small = [torch.ones(1) for _ in range(AGGREGATE_ABOVE)]
    large = [torch.ones(1) for _ in range(AGGREGATE_ABOVE + 1)]
    assert len(tdm.scan({"small": small}).records) == AGGREGATE_ABOVE
    assert len(tdm.scan({"large": large}).records) == 1


# -- memory counted once per storage ------------------------------------------------------------


def test_view_and_base_count_once():
    base = torch.zeros(100)
    view = base[10:20]
    inventory = tdm.scan({"base": base, "view": view})
    assert inventory.totals() == {"cpu": 400}
    assert by_name(inventory)["view"].shares_with == ("base",)


def test_two_names_for_one_tensor_count_once_and_are_listed_as_sharing():
    tensor = torch.zeros(10)
    inventory = tdm.scan({"a": tensor, "b": tensor})
    assert inventory.totals() == {"cpu": 40}
    records = by_name(inventory)
    assert records["a"].shares_with == ("b",) and records["b"].shares_with == ("a",)


def test_tied_weights_count_once():
    encoder = torch.nn.Embedding(100, 16)
    decoder = torch.nn.Linear(16, 100, bias=False)
    decoder.weight = encoder.weight
    model = torch.nn.Sequential(encoder, decoder)
    inventory = tdm.scan({"model": model})
    record = inventory.records[0]
    assert record.param_count == 1600
    assert record.bytes == 1600 * 4 == inventory.totals()["cpu"]


def test_name_bound_to_a_module_parameter_counts_once():
    model = torch.nn.Linear(10, 10)
    inventory = tdm.scan({"model": model, "w": model.weight})
    assert inventory.totals()["cpu"] == (100 + 10) * 4
    assert by_name(inventory)["w"].shares_with == ("model",)


def test_gradients_and_optimizer_state_are_in_the_totals():
    model = torch.nn.Linear(10, 10)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 10)).sum().backward()
    optimizer.step()
    inventory = tdm.scan({"model": model, "optimizer": optimizer})
    params = 110 * 4
    records = by_name(inventory)
    assert records["model"].grad_bytes == params
    # Adam: exp_avg and exp_avg_sq per parameter, plus a 4-byte step counter each
    assert records["optimizer"].state_bytes == {"cpu": 2 * params + 2 * 4}
    assert inventory.totals()["cpu"] == params + params + 2 * params + 2 * 4


# -- devices ------------------------------------------------------------------------------------


def test_meta_tensors_report_zero_bytes_and_what_they_would_need():
    inventory = tdm.scan({"m": torch.empty(1000, device="meta")})
    (record,) = inventory.records
    assert record.devices == ("meta",) and record.bytes == 0
    assert record.would_need_bytes == 4000
    assert inventory.totals() == {"meta": 0}
    assert inventory.would_need() == {"meta": 4000}
    assert "needs 3.9 KiB" in repr(inventory)


def test_distinct_meta_tensors_are_not_merged():
    inventory = tdm.scan({"a": torch.empty(10, device="meta"), "b": torch.empty(20, device="meta")})
    assert inventory.would_need() == {"meta": 120}
    assert all(r.shares_with == () for r in inventory.records)


def test_module_split_across_cpu_and_meta_is_flagged_with_per_device_bytes():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    model[1].to("meta")
    record = tdm.scan({"model": model}).records[0]
    assert record.mixed and record.devices == ("cpu", "meta")
    assert record.param_bytes == {"cpu": (16 + 4) * 4, "meta": 0}
    assert record.would_need_bytes == (16 + 4 + 8 + 2) * 4
    assert "spans cpu, meta" in record.note
    assert tdm.scan({"model": model}).mixed_warnings() == ["model spans cpu, meta"]


def test_buffers_are_counted_per_device():
    model = torch.nn.BatchNorm1d(8)
    record = tdm.scan({"bn": model}).records[0]
    # running_mean, running_var (8 floats each) and num_batches_tracked (one int64)
    assert record.buffer_bytes == {"cpu": 8 * 4 * 2 + 8}


def test_adam_state_after_one_step_is_attributed_to_the_right_device():
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(1, 4)).sum().backward()
    optimizer.step()
    record = tdm.scan({"opt": optimizer}).records[0]
    assert record.state_bytes == {"cpu": 2 * 20 * 4 + 2 * 4}
    assert record.param_devices == ("cpu",) and not record.mixed

    # the checkpoint story: state left on one device, parameters on another
    for state in optimizer.state.values():
        state["exp_avg"] = state["exp_avg"].to("meta")
    record = tdm.scan({"opt": optimizer}).records[0]
    assert record.mixed
    assert record.state_bytes["meta"] == 0 and record.devices == ("cpu", "meta")
    assert "parameters on cpu" in record.note


def test_step_counters_on_cpu_are_not_a_mismatch():
    model = torch.nn.Linear(2, 2).to("meta")
    optimizer = torch.optim.Adam(model.parameters())
    for p in model.parameters():
        optimizer.state[p] = {
            "step": torch.tensor(1.0),
            "exp_avg": torch.zeros_like(p),
        }
    record = tdm.scan({"opt": optimizer}).records[0]
    assert not record.mixed
    # the row shows where the real state is, not the step counters' cpu
    assert record.devices == ("meta",) and record.state_bytes == {"cpu": 8, "meta": 0}


def test_unusual_tensors_do_not_crash_the_scan():
    from torch._subclasses.fake_tensor import FakeTensorMode

    sparse = torch.sparse_coo_tensor([[0, 1], [1, 0]], [1.0, 2.0], (2, 2))
    csr = torch.eye(3).to_sparse_csr()
    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    quantized = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8)
    with FakeTensorMode():
        fake = torch.empty(1000)
    namespace = {"sparse": sparse, "csr": csr, "nested": nested, "q": quantized, "fake": fake}
    records = by_name(tdm.scan(namespace))
    assert set(records) == set(namespace)
    assert records["sparse"].note == "sparse_coo" and records["sparse"].bytes > 0
    assert records["csr"].note == "sparse_csr" and records["csr"].bytes > 0
    assert records["nested"].bytes == 20
    assert records["q"].dtype == "qint8" and records["q"].bytes == 4
    assert records["fake"].note == "fake tensor (no data)" and records["fake"].bytes == 0
    assert records["fake"].would_need_bytes == 4000


def test_dtensor_reports_local_shard_and_placements():
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed not available")
    import os

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    started = False
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=0, world_size=1)
        started = True
    try:
        mesh = init_device_mesh("cpu", (1,))
        dtensor = distribute_tensor(torch.ones(8, 4), mesh, [Shard(0)])
        record = tdm.scan({"d": dtensor}).records[0]
        assert record.type == "DTensor" and record.bytes == 128
        assert record.note == "DTensor shard 0 of 1 (Shard(0)); global 8×4, 128 B"
    finally:
        if started:
            dist.destroy_process_group()


# -- output history -------------------------------------------------------------------------------


def test_include_hidden_reports_tensors_held_only_by_output_history():
    kept = torch.ones(100)
    forgotten = torch.ones(50)
    namespace = {"kept": kept, "Out": {3: kept, 4: forgotten}, "_": forgotten}
    assert [r.name for r in tdm.scan(namespace).records] == ["kept"]
    inventory = tdm.scan(namespace, include_hidden=True)
    hidden = [r for r in inventory.records if r.hidden]
    assert [r.name for r in hidden] == ["Out[4]"]
    assert hidden[0].bytes == 200 and "output history" in hidden[0].note
    assert not hidden[0].movable
    assert "Out[4]" in repr(inventory) and "held by output history" in repr(inventory)


# -- exports ----------------------------------------------------------------------------------


def test_frame_json_repr_and_html():
    namespace = {"x": torch.ones(3), "model": torch.nn.Linear(2, 2)}
    inventory = tdm.scan(namespace)
    frame = inventory.to_frame()
    assert {"name", "kind", "type", "device", "dtype", "shape", "bytes"} <= set(frame.columns)
    assert sorted(frame["name"]) == ["model", "x"]
    snapshot = inventory.to_json()
    protocol.check_message(snapshot)
    json.dumps(snapshot)
    assert snapshot["window"]["total"] == 2 and snapshot["header"]["bars"][0]["device"] == "cpu"
    text = repr(inventory)
    assert text.startswith("Devices — cpu: 36 B") and "model" in text and "Linear" in text
    assert "<table" in inventory._repr_html_()
    assert inventory.devices == ["cpu"]


def test_html_is_escaped():
    class Evil(torch.nn.Module):
        pass

    Evil.__name__ = "<script>alert(1)</script>"
    evil = Evil()
    evil.register_buffer("b", torch.ones(1))
    page = tdm.scan({"evil": evil})._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_device_strings_are_general():
    from torchdevice_magic.units import device_sort_key

    devices = ["meta", "cuda:1", "cpu", "xpu:0", "cuda:0", "mps", "privateuseone:0"]
    assert sorted(devices, key=device_sort_key) == [
        "cpu", "cuda:0", "cuda:1", "mps", "privateuseone:0", "xpu:0", "meta",
    ]  # fmt: skip


# -- incremental rescan -------------------------------------------------------------------------


def test_incremental_rescan_sees_rebinding_new_and_deleted_names():
    namespace = {"a": torch.ones(1), "b": torch.ones(2), "c": torch.ones(3)}
    first = tdm.scan(namespace)
    namespace["b"] = torch.ones(20)
    namespace["d"] = torch.ones(4)
    del namespace["a"]
    second = tdm.scan(namespace, previous=first)
    fresh = tdm.scan(namespace)
    assert [(r.name, r.shape) for r in second.records] == [(r.name, r.shape) for r in fresh.records]
    assert second.totals() == fresh.totals() == {"cpu": (20 + 3 + 4) * 4}


def test_incremental_rescan_reuses_untouched_names():
    namespace = {f"t{i}": torch.ones(i + 1) for i in range(50)}
    first = tdm.scan(namespace)
    first_records = by_name(first)
    namespace["t3"] = torch.zeros(99)
    second = tdm.scan(namespace, previous=first)
    records = by_name(second)
    assert records["t3"].shape == (99,)
    assert records["t7"] is first_records["t7"]  # not inspected again


def test_incremental_rescan_forced_names_catch_a_reused_id():
    # An object freed and another allocated at the same address has the same id: the hook
    # passes the names a cell assigned, so such a name is looked at again.
    namespace = {"x": torch.ones(3)}
    first = tdm.scan(namespace)
    namespace["x"].resize_(10)  # same object, different facts
    stale = tdm.scan(namespace, previous=first)
    assert stale["x"].shape == (3,)
    forced = tdm.scan(namespace, previous=first, changed=["x"])
    assert forced["x"].shape == (10,)


def test_incremental_rescan_sees_a_module_moved_in_place_and_new_gradients():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    namespace = {"model": model}
    first = tdm.scan(namespace)
    assert first["model"].grad_bytes == 0
    model(torch.randn(1, 4)).sum().backward()
    second = tdm.scan(namespace, previous=first)
    assert second["model"].grad_bytes == 40 * 4
    model[1].to("meta")
    third = tdm.scan(namespace, previous=second)
    assert third["model"].mixed and third["model"].devices == ("cpu", "meta")
    model[0] = torch.nn.Linear(4, 8)  # a child replaced
    fourth = tdm.scan(namespace, previous=third)
    assert fourth["model"].param_count == 40 + 20


def test_incremental_rescan_sees_optimizer_state_appear_and_move():
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.Adam(model.parameters())
    namespace = {"opt": optimizer}
    first = tdm.scan(namespace)
    assert first["opt"].state_bytes == {}
    model(torch.randn(1, 4)).sum().backward()
    optimizer.step()
    second = tdm.scan(namespace, previous=first)
    assert second["opt"].state_bytes == {"cpu": 2 * 20 * 4 + 2 * 4}
    optimizer.load_state_dict(optimizer.state_dict())
    third = tdm.scan(namespace, previous=second)
    assert third["opt"].state_bytes == second["opt"].state_bytes


def test_incremental_rescan_sees_new_grad_on_a_leaf_tensor():
    w = torch.ones(5, requires_grad=True)
    namespace = {"w": w}
    first = tdm.scan(namespace)
    (w * 2).sum().backward()
    second = tdm.scan(namespace, previous=first)
    assert first["w"].grad_bytes == 0 and second["w"].grad_bytes == 20
    assert second.totals() == {"cpu": 40}


# -- rules ------------------------------------------------------------------------------------


def test_scan_holds_no_reference_to_tensors():
    tensor = torch.ones(1000)
    ref = weakref.ref(tensor)
    namespace = {"t": tensor, "batch": [tensor], "model": torch.nn.Linear(2, 2)}
    inventory = tdm.scan(namespace)
    inventory.records  # noqa: B018 - build records too
    del tensor, namespace
    assert ref() is None


def test_scan_leaves_no_weakref_on_parameters():
    model = torch.nn.Linear(3, 3)
    inventory = tdm.scan({"model": model, "w": model.weight})
    assert all(weakref.getweakrefcount(p) == 0 for p in model.parameters())
    # torch's swap-based conversion refuses parameters with weak references
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to(torch.float64)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    assert model.weight.dtype == torch.float64
    assert inventory is not None


def test_import_and_empty_scan_do_not_import_torch():
    code = (
        "import sys, torchdevice_magic as t; inv = t.scan({}); repr(inv); inv.to_json(); "
        "print('torch' in sys.modules, inv.torch_imported)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "False"]


def test_a_namespace_without_torch_gives_an_empty_inventory_that_renders():
    inventory = tdm.Inventory({}, [], [], set(), torch_imported=False)
    assert inventory.records == [] and inventory.totals() == {}
    assert "torch is not imported" in repr(inventory)
    protocol.check_message(inventory.to_json())


def test_records_follow_the_namespace_order():
    namespace = {
        "model": torch.nn.Linear(2, 2),
        "a": torch.ones(1),
        "batch": {"x": torch.ones(2)},
        "b": torch.ones(3),
    }
    assert [r.name for r in tdm.scan(namespace).records] == ["model", "a", "batch['x']", "b"]


def test_optimizer_whose_parameters_no_name_holds_is_reported():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    namespace = {"model": model, "opt": optimizer}
    assert tdm.scan(namespace).orphaned_optimizers() == []
    namespace["model"] = torch.nn.Linear(3, 2)  # the model's cell re-run, not the optimizer's
    inventory = tdm.scan(namespace)
    assert inventory.orphaned_optimizers() == [("opt", 2, 2)]
    assert inventory.mixed_warnings()[0].startswith("opt updates all 2 parameters that no")


def test_optimizers_over_reachable_tensors_are_not_orphans():
    w = torch.randn(3, requires_grad=True)
    layers = [torch.nn.Linear(2, 2)]
    namespace = {
        "w": w,
        "layers": layers,
        "opt_w": torch.optim.SGD([w], lr=0.1),
        "opt_layers": torch.optim.SGD(layers[0].parameters(), lr=0.1),
    }
    assert tdm.scan(namespace).orphaned_optimizers() == []


def test_moving_a_model_to_meta_orphans_an_optimizer_made_before():
    # torch 2.13: Module.to("meta") makes new Parameter objects (cpu -> meta cannot swap data)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    namespace = {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.1)}
    model[1].to("meta")
    assert tdm.scan(namespace).orphaned_optimizers() == [("opt", 2, 4)]


@pytest.mark.parametrize("copies", [1, 40])  # a few storages (a loop), many (column sums)
def test_bytes_per_device_counts_meta_as_nothing_on_every_path(copies: int):
    from torchdevice_magic.scan import bytes_by_device

    storages = {}
    for i in range(copies):
        storages[("cpu", 1000 + i)] = ("cpu", 8)
        storages[("meta", "impl", i)] = ("meta", 64)
        storages[("cuda:1", 5000 + i)] = ("cuda:1", 4)
    assert bytes_by_device(storages) == {"cpu": 8 * copies, "meta": 0, "cuda:1": 4 * copies}
    assert bytes_by_device(storages, list_meta=False) == {"cpu": 8 * copies, "cuda:1": 4 * copies}
    only_meta = {key: value for key, value in storages.items() if value[0] == "meta"}
    assert bytes_by_device(only_meta) == {"meta": 0}
    assert bytes_by_device(only_meta, list_meta=False) == {}
