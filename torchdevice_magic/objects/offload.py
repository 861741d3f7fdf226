"""Weights whose placement something else owns, and why not to move them by hand: an
accelerate-dispatched model (``cpu_offload``, ``disk_offload``, a ``device_map``: where its real
weights live, the hooks' ``weights_map``, read from instance dicts only: accelerate's code never
runs), and DTensors sharded over a process group (FSDP2), placed by their device mesh.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, NamedTuple

from .kinds import TorchTypes, instance_dict


class Dispatch(NamedTuple):
    """An accelerate-dispatched model: where its real weights live, and why not to move it."""

    reason: str
    weights: list[tuple[str, Any]]  # (name, tensor) held in memory by the hooks' weights_map
    on_disk: int  # weights offloaded to disk (memory-mapped files), by key
    #: the meta tensors whose weights a hook holds (in ``weights`` or on disk): they are not
    #: missing data, and their would-need bytes are counted where the weights are
    held: list[Any]
    #: the disk-offloaded weights: ``{("disk", folder, key): nbytes}``, one per weight whatever
    #: the number of models reading the folder (the figure is the meta tensor's size)
    disk: dict[tuple[str, str, str], int]


class _WeightsMap(NamedTuple):
    """One hook's ``weights_map`` unwrapped: the key prefix and the place the keys lead to."""

    prefix: str
    state: dict[Any, Any]  # key -> tensor held in memory
    files: dict[Any, Any]  # key -> how the weight is stored on disk (the loader's index)
    folder: str  # the offload folder (or the loader's id): the disk weights' identity


def accelerate_dispatch(T: TorchTypes, name: str, submodules: list[Any]) -> Dispatch | None:
    """Reads ``hf_device_map`` and ``_hf_hook`` (AlignDevicesHook.weights_map, PrefixedDataset,
    OffloadedWeightsLoader) from instance dicts only: never runs accelerate's code."""
    root = instance_dict(submodules[0]) or {}
    device_map = root.get("hf_device_map")
    hooked = []
    for sub in submodules:
        own = instance_dict(sub)
        if own and "_hf_hook" in own:
            hooked.append((sub, own["_hf_hook"]))
    spread = isinstance(device_map, dict) and len({str(v) for v in dict.values(device_map)}) > 1
    if not hooked and not spread:
        return None  # device_map on one device and no hooks: an ordinary model
    weights: dict[int, tuple[str, Any]] = {}
    on_disk: set[str] = set()
    held: dict[int, Any] = {}
    disk: dict[tuple[str, str, str], int] = {}
    maps: dict[int, _WeightsMap] = {}
    for module, hook in hooked:
        for each, found in _weights_maps(hook):
            maps[id(found.state)] = found
            recurse = (instance_dict(each) or {}).get("place_submodules") is True
            for local, tensor in _own_tensors(T, module, recurse):
                if T.device_name(tensor.device) != "meta":
                    continue
                key = found.prefix + local
                if key in found.state:
                    held[id(tensor)] = tensor
                elif key in found.files:
                    held[id(tensor)] = tensor
                    disk[("disk", found.folder, key)] = tensor.numel() * tensor.element_size()
    for found in maps.values():
        on_disk.update(k for k in found.files if isinstance(k, str) and k not in found.state)
        for key, tensor in dict.items(found.state):
            if isinstance(tensor, T.Tensor):
                weights.setdefault(id(tensor), (str(key), tensor))
    if isinstance(device_map, dict):
        places = sorted({str(v) for v in dict.values(device_map)})
        how = f"is dispatched by accelerate (device_map: {', '.join(places)})"
    else:
        how = "has accelerate hooks"
    reason = (
        f"{name} {how}, and accelerate's hooks own its weights' placement: moving it by hand "
        f"breaks them; load it again with the device_map you want (or "
        f"accelerate.hooks.remove_hook_from_module({name}, recurse=True) first)"
    )
    return Dispatch(reason, list(weights.values()), len(on_disk), list(held.values()), disk)


def _weights_maps(hook: Any) -> list[tuple[Any, _WeightsMap]]:
    """(hook, its weights map unwrapped) for a hook and the hooks a SequentialHook chains."""
    inner = (instance_dict(hook) or {}).get("hooks")
    found = []
    for each in inner if isinstance(inner, (list, tuple)) else (hook,):
        weights_map = (instance_dict(each) or {}).get("weights_map")
        prefix = ""
        for _ in range(4):  # PrefixedDataset(PrefixedDataset(...)) unwrapped
            wm = instance_dict(weights_map) if weights_map is not None else None
            if not wm or "dataset" not in wm:
                break
            prefix = f"{wm.get('prefix', '') or ''}{prefix}"
            weights_map = wm["dataset"]
        if weights_map is None:
            continue
        if isinstance(weights_map, dict):
            found.append((each, _WeightsMap(prefix, weights_map, {}, str(id(weights_map)))))
            continue
        own = instance_dict(weights_map) or {}
        state, index = own.get("state_dict"), own.get("index")
        folder = own.get("save_folder")
        found.append(
            (
                each,
                _WeightsMap(
                    prefix,
                    state if isinstance(state, dict) else {},
                    index if isinstance(index, dict) else {},
                    str(folder) if folder is not None else str(id(weights_map)),
                ),
            )
        )
    return found


def _own_tensors(T: TorchTypes, module: Any, recurse: bool) -> list[tuple[str, Any]]:
    """(name relative to ``module``, tensor) of its own parameters and buffers, and of its
    submodules' when the hook places them too (``place_submodules``)."""
    found = []
    stack = [("", module)]
    while stack:
        prefix, current = stack.pop()
        own = instance_dict(current) or {}
        for slot in ("_parameters", "_buffers"):
            tensors = own.get(slot)
            if isinstance(tensors, dict):
                for local, tensor in dict.items(tensors):
                    if isinstance(tensor, T.Tensor):
                        found.append((f"{prefix}{local}", tensor))
        children = own.get("_modules")
        if recurse and isinstance(children, dict):
            for local, child in dict.items(children):
                if child is not None:
                    stack.append((f"{prefix}{local}.", child))
    return found


def sharded_reason(name: str, tensors: Iterable[Any]) -> str | None:
    """Why ``name`` must not be moved by hand when it holds DTensors (every parameter FSDP2's
    ``fully_shard`` leaves, ``distribute_tensor``, ``distribute_module``), or None: the process
    group's device mesh places each rank's shard, and one rank moving its shard alone breaks
    the next collective. No cost while ``torch.distributed.tensor`` was never imported."""
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    if dtensor is None or not any(isinstance(t, dtensor) for t in tensors):
        return None
    return (
        f"{name} is sharded over the process group (DTensor): its device mesh places each "
        "rank's shard, and moving one rank's shard by hand breaks the next collective; build "
        "the mesh on the device you want (init_device_mesh) and shard the model there"
    )
