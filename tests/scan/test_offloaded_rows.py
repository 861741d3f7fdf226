"""Rows and totals of models the real accelerate package offloaded: the weights are counted
where its hooks keep them (cpu memory, or memory-mapped files on disk apart from RAM), never as
missing meta data, and the model is not movable by hand."""

from __future__ import annotations

from pathlib import Path

import offloadmodels
import pytest
import torch
from offloadmodels import LINEAR_BYTES, accelerate, cpu_offloaded, disk_offloaded, dispatched

import torchdevice_magic as tdm
from torchdevice_magic.scan import bytes_by_device


def _only(namespace: dict) -> tdm.Inventory:
    inventory = tdm.scan(namespace)
    assert len(inventory.records) == 1
    return inventory


def test_cpu_offloaded_weights_count_on_the_cpu_and_nothing_on_meta() -> None:
    inventory = _only({"model": cpu_offloaded()})
    (record,) = inventory.records
    assert record.devices == ("cpu",) and record.bytes_by_device == {"cpu": 2 * LINEAR_BYTES}
    assert record.bytes == record.would_need_bytes == 2 * LINEAR_BYTES
    assert record.note == ("offloaded: cpu 32.5 KiB; accelerate's hooks own its placement")
    assert not record.mixed and not record.movable
    assert "accelerate's hooks own" in record.movable_reason
    assert inventory.totals() == {"cpu": 2 * LINEAR_BYTES}
    assert inventory.mixed_warnings() == []


def test_disk_offloaded_weights_are_a_disk_total_apart_from_memory(tmp_path: Path) -> None:
    inventory = tdm.scan({"model": disk_offloaded(tmp_path), "x": torch.ones(10)})
    record = next(r for r in inventory.records if r.name == "model")
    assert record.devices == ("disk",) and record.bytes == 2 * LINEAR_BYTES
    assert record.would_need_bytes == record.bytes  # nothing missing: no "needs" on meta
    assert record.note == (
        "offloaded: disk 32.5 KiB (memory-mapped); accelerate's hooks own its placement"
    )
    assert inventory.totals() == {"cpu": 40, "disk": 2 * LINEAR_BYTES}
    # an account of memory in use (holders, timelines) leaves the files out
    assert bytes_by_device(inventory.storages(), list_meta=False) == {"cpu": 40}


def test_a_device_map_dispatch_shows_each_place(tmp_path: Path) -> None:
    inventory = _only({"model": dispatched(tmp_path)})
    (record,) = inventory.records
    assert record.devices == ("cpu", "disk") and not record.mixed
    assert record.bytes_by_device == {"cpu": LINEAR_BYTES, "disk": LINEAR_BYTES}
    assert record.note == (
        "offloaded: disk 16.2 KiB (memory-mapped); accelerate's hooks own its placement"
    )
    assert inventory.totals() == {"cpu": LINEAR_BYTES, "disk": LINEAR_BYTES}


def test_two_models_reading_one_offload_folder_count_it_once(tmp_path: Path) -> None:
    first = disk_offloaded(tmp_path)
    inventory = tdm.scan({"a": first, "b": {"again": first}})
    assert inventory.totals() == {"disk": 2 * LINEAR_BYTES}


def test_a_rescan_keeps_the_offloaded_figures(tmp_path: Path) -> None:
    namespace = {"model": disk_offloaded(tmp_path)}
    first = tdm.scan(namespace)
    namespace["x"] = torch.ones(4)
    second = tdm.scan(namespace, previous=first, changed={"x"})
    assert second.totals() == {"cpu": 16, "disk": 2 * LINEAR_BYTES}


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_a_device_map_offloads_a_module_to_the_cpu() -> None:
    """With an accelerator, a device map's "cpu" modules are offloaded: meta parameters on
    the model, their weights in the hooks' OffloadedWeightsLoader in CPU memory."""
    model = accelerate.dispatch_model(
        offloadmodels.model(), device_map={"0": 0, "1": 0, "2": "cpu"}
    )
    assert model[2].weight.device.type == "meta"
    inventory = tdm.scan({"model": model})
    (record,) = inventory.records
    assert record.devices == ("cpu", "cuda:0") and not record.mixed
    assert record.bytes_by_device == {"cpu": LINEAR_BYTES, "cuda:0": LINEAR_BYTES}
    assert record.note.startswith("offloaded: cpu 16.2 KiB;")
    assert inventory.totals() == {"cpu": LINEAR_BYTES, "cuda:0": LINEAR_BYTES}
    assert model(torch.ones(1, 64, device="cuda:0")).device.type == "cuda"  # hooks intact
