"""An accelerate-dispatched model (``cpu_offload``, ``disk_offload``, a ``device_map``): where its
real weights live (the hooks' ``weights_map``) and why not to move it by hand, read from instance
dicts only: accelerate's code never runs.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .kinds import TorchTypes, instance_dict


class Dispatch(NamedTuple):
    """An accelerate-dispatched model: where its real weights live, and why not to move it."""

    reason: str
    weights: list[tuple[str, Any]]  # (name, tensor) held by the hooks' weights_map
    on_disk: int  # weights offloaded to disk (not in memory)


def accelerate_dispatch(T: TorchTypes, name: str, submodules: list[Any]) -> Dispatch | None:
    """Reads ``hf_device_map`` and ``_hf_hook`` (AlignDevicesHook.weights_map, PrefixedDataset,
    OffloadedWeightsLoader) from instance dicts only: never runs accelerate's code."""
    root = instance_dict(submodules[0]) or {}
    device_map = root.get("hf_device_map")
    hooks = []
    for sub in submodules:
        own = instance_dict(sub)
        if own and "_hf_hook" in own:
            hooks.append(own["_hf_hook"])
    spread = isinstance(device_map, dict) and len({str(v) for v in dict.values(device_map)}) > 1
    if not hooks and not spread:
        return None  # device_map on one device and no hooks: an ordinary model
    weights: dict[int, tuple[str, Any]] = {}
    on_disk: set[str] = set()
    maps: dict[int, Any] = {}
    for hook in hooks:
        own = instance_dict(hook) or {}
        inner = own.get("hooks")
        for each in inner if isinstance(inner, (list, tuple)) else (hook,):
            weights_map = (instance_dict(each) or {}).get("weights_map")
            prefix = ""
            for _ in range(4):  # PrefixedDataset(PrefixedDataset(...)) unwrapped
                wm = instance_dict(weights_map) if weights_map is not None else None
                if not wm or "dataset" not in wm:
                    break
                prefix = wm.get("prefix", "") or prefix
                weights_map = wm["dataset"]
            if weights_map is not None:
                maps[id(weights_map)] = weights_map
    for weights_map in maps.values():
        if isinstance(weights_map, dict):
            state = weights_map
        else:
            own = instance_dict(weights_map) or {}
            found = own.get("state_dict")
            state = found if isinstance(found, dict) else {}
            keys = own.get("all_keys")
            if isinstance(keys, list):
                on_disk.update(k for k in keys if isinstance(k, str) and k not in state)
        for key, tensor in dict.items(state):
            if isinstance(tensor, T.Tensor):
                weights.setdefault(id(tensor), (str(key), tensor))
    if isinstance(device_map, dict):
        places = sorted({str(v) for v in dict.values(device_map)})
        how = f"dispatched by accelerate (device_map: {', '.join(places)})"
    else:
        how = "has accelerate hooks that place its weights"
    reason = (
        f"{name} {how}: moving it by hand breaks its hooks; load it again with the device_map "
        f"you want (or accelerate.hooks.remove_hook_from_module({name}, recurse=True) first)"
    )
    return Dispatch(reason, list(weights.values()), len(on_disk))
