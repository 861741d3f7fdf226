"""Where an accelerate-offloaded model's weights really are, read from its hooks' instance
dicts (``objects.accelerate_dispatch``) on models the real accelerate package offloaded."""

from __future__ import annotations

from pathlib import Path

import torch
from offloadmodels import LINEAR_BYTES, cpu_offloaded, disk_offloaded, dispatched

from torchdevice_magic import objects as O

T = O.TorchTypes.current()
assert T is not None


def _dispatch(model: torch.nn.Module) -> O.Dispatch:
    dispatch = O.accelerate_dispatch(T, "model", O.module_parts(T, model).submodules)
    assert dispatch is not None
    return dispatch


def test_cpu_offload_weights_are_held_in_memory_for_every_meta_parameter() -> None:
    model = cpu_offloaded()
    dispatch = _dispatch(model)
    meta = [p for p in model.parameters() if p.device.type == "meta"]
    assert len(meta) == 4 and {id(t) for t in dispatch.held} == set(map(id, meta))
    assert {name for name, _ in dispatch.weights} == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert all(t.device.type == "cpu" for _, t in dispatch.weights)
    assert dispatch.disk == {} and dispatch.on_disk == 0
    assert "accelerate's hooks own its weights' placement" in dispatch.reason


def test_disk_offload_weights_are_counted_on_disk_by_their_size(tmp_path: Path) -> None:
    model = disk_offloaded(tmp_path)
    dispatch = _dispatch(model)
    assert dispatch.weights == [] and dispatch.on_disk == 4 and len(dispatch.held) == 4
    assert sum(dispatch.disk.values()) == 2 * LINEAR_BYTES
    assert {key[2] for key in dispatch.disk} == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert {key[1] for key in dispatch.disk} == {str(tmp_path)}  # the folder is the identity


def test_device_map_dispatch_holds_only_the_offloaded_module(tmp_path: Path) -> None:
    model = dispatched(tmp_path)
    dispatch = _dispatch(model)
    assert {id(t) for t in dispatch.held} == {id(model[2].weight), id(model[2].bias)}
    assert sum(dispatch.disk.values()) == LINEAR_BYTES
    assert "device_map: cpu, disk" in dispatch.reason


def test_meta_parameters_no_hook_holds_are_not_counted_as_held(tmp_path: Path) -> None:
    model = disk_offloaded(tmp_path)
    model[2].__dict__["_parameters"]["extra"] = torch.nn.Parameter(torch.empty(3, device="meta"))
    dispatch = _dispatch(model)
    assert len(dispatch.held) == 4 and id(model[2].extra) not in set(map(id, dispatch.held))
