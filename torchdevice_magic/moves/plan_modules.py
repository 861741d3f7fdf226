"""Planning modules and Parameters: they move in place (``module.to`` semantics), so
Parameters stay the same objects and optimizers holding them stay valid.

A module is refused up front where moving it by hand would break it: a model dispatched by
accelerate, a module sharded over a process group (FSDP2, DTensor), TorchScript where torch would have to swap Parameter objects, dynamic-quantized
layers (packed weights live in C++ objects that only run on the CPU), meta parameters (no data),
Parameters torch would have to swap while a live autograd graph saved them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import objects
from .jobs import (
    BufferRecord,
    ModuleJob,
    ParamRecord,
    Plan,
    PlannedItem,
    Refused,
    SubmoduleRecord,
    device_names,
    in_place_ok,
    storage_of,
)

META_ADVICE = (
    "parameters on meta have no data: use model.to_empty(device=...) and load the weights again"
)


def accelerate_reason(T: Any, name: str, module: Any) -> str | None:
    """Why a module dispatched by accelerate must not be moved by hand (objects reads the
    hooks and the device map, the scan shows the same reason), or None."""
    dispatch = objects.accelerate_dispatch(T, name, list(module.modules()))
    return None if dispatch is None else dispatch.reason


def script_reason(name: str, module: Any, T: Any) -> str | None:
    """TorchScript modules keep their parameters in C++ slots: ``param.data = ...`` works
    between devices with compatible tensor types (cpu <-> cuda), but where torch would have
    to swap Parameter objects (cpu <-> meta, out-of-tree backends) it cannot: refuse up
    front instead of failing half-way."""
    script = T.ScriptModule
    if script is None or not any(isinstance(m, script) for m in module.modules()):
        return None
    return (
        f"{name} is a TorchScript module: its parameters cannot be swapped to this device "
        "in place; script the model again after moving the original module"
    )


class SavedByAGraph(Refused):
    """A module torch cannot swap now (a live graph saved a Parameter): an undo that meets
    one undoes nothing, so the optimizer state that follows the module stays with it."""


def saved_by_a_graph(name: str, m: Any, dest: Any, dest_of: dict[int, Any] | None) -> str | None:
    """Why a module that must move by swapping Parameters cannot, or None: torch swaps a
    Parameter only if nothing but its own gradient node references it, and a live autograd
    graph that saved it (``y = model(x)`` before ``backward()``) does. Asked as
    ``torch.utils.swap_tensors`` asks, up front: a refusal here leaves the module whole,
    where ``Module._apply`` failing halfway could not put it back."""
    for key, p in m.named_parameters():
        want = dest if dest_of is None else dest_of.get(id(p), p.device)
        if p.device == want or not _swap_refused(p):
            continue
        return (
            f"{name}.{key} is saved by an autograd graph that is still alive (a result "
            "computed with it, not yet backward()-ed), so torch cannot swap it to another "
            "device: del that result or run backward() on it first"
        )
    return None


def _swap_refused(p: Any) -> bool:
    """``torch.utils.swap_tensors``' own use-count rule: one reference, or two where the
    second is the leaf's gradient accumulator."""
    import torch

    count = p._use_count()
    if count <= 1:
        return False
    if count > 2 or not p.is_leaf:
        return True
    # the second reference is the accumulator if asking for it did not make a new one (held
    # while counting: a new one would be gone again once the edge is dropped)
    edge = torch.autograd.graph.get_gradient_edge(p)
    refused = bool(p._use_count() != 2)
    del edge
    return refused


def module_tensors(m: Any) -> Iterable[Any]:
    for p in m.parameters():
        yield p
        if p.grad is not None:
            yield p.grad
    yield from m.buffers()


def module_bytes(m: Any) -> int:
    seen: set[Any] = set()
    total = 0
    for t in module_tensors(m):
        key, snb, _s = storage_of(t)
        if key not in seen:
            seen.add(key)
            total += snb
    return total


def module_layout(m: Any) -> dict[str, Any]:
    layout = {qual: p.device for qual, p in m.named_parameters()}
    layout.update((qual, b.device) for qual, b in m.named_buffers())
    return layout


def is_parameter(torch: Any, t: Any) -> bool:
    """A Parameter, also one of a device's tensor subclass (``nn.Parameter(subclass)`` keeps
    the subclass and sets ``_is_param``, which Parameter's isinstance check reads)."""
    tp = type(t)
    if tp is torch.Tensor:
        return False
    return tp is torch.nn.Parameter or isinstance(t, torch.nn.Parameter)


def add_parameter(plan: Plan, name: str, p: Any, dest: Any) -> None:
    """A Parameter bound to a top-level name: moved in place, so it stays its module's."""
    sharded = objects.sharded_reason(name, [p])
    if sharded is not None:
        raise Refused(sharded)
    devs = {p.device}
    grad = p.grad
    if grad is not None:
        devs.add(grad.device)
    if devs == {dest}:
        plan.skipped.append((name, f"already on {plan.device_label(dest)}"))
        return
    for d in devs:
        plan.check_meta_source(name, d, dest, "this Parameter")
    move_param_in_place(plan, name, p, dest)
    snb = storage_of(p)[1]
    to = plan.device_label(dest)
    plan.items.append(PlannedItem(name, "parameter", p, device_names(devs), snb, to, p.device))


def move_param_in_place(plan: Plan, name: str, p: Any, dest: Any) -> None:
    """A Parameter outside any module moved in this call (or a plain trainable leaf an
    optimizer updates): move it in place, through a holder module so it goes through exactly
    what ``module.to`` does."""
    if id(p) in plan.param_dest:  # moves with its module, or was named twice
        return
    holder = plan.torch.nn.Module()
    holder._parameters["p"] = p
    job = ModuleJob(name, holder, dest, None)
    record_module(plan, job, holder)
    plan.modules[id(holder)] = job


def _targets_by_name(m: Any, layout: dict[str, Any]) -> dict[int, Any]:
    """Undo of a module that spanned devices: id(tensor) -> its device, by qualified name."""
    dest_of: dict[int, Any] = {}
    for qual, p in m.named_parameters():
        d = layout.get(qual)
        if d is not None:
            dest_of[id(p)] = d
            if p.grad is not None:
                dest_of[id(p.grad)] = d
    for qual, b in m.named_buffers():
        d = layout.get(qual)
        if d is not None:
            dest_of[id(b)] = d
    return dest_of


def add_module(
    plan: Plan, name: str, m: Any, dest: Any, layout: Any, listed: bool = True
) -> PlannedItem | None:
    """Plan moving module ``m`` to ``dest`` (or, undo, each tensor to its device in
    ``layout``); None when nothing of it moves."""
    accelerate = accelerate_reason(plan.T, name, m)
    if accelerate is not None:
        raise Refused(accelerate)
    sharded = objects.sharded_reason(name, m.parameters())
    if sharded is not None:
        raise Refused(sharded)
    dest_of = _targets_by_name(m, layout) if dest is None else None
    devices: set[Any] = set()
    pending = False
    for t in module_tensors(m):
        dev = t.device
        devices.add(dev)
        want = dest if dest_of is None else dest_of.get(id(t), dev)
        if dev == want:
            continue
        if dev.type == "meta":
            raise Refused(f"{name}: {META_ADVICE}")
        pending = True
    packed = objects.module_parts(plan.T, m).extra
    if packed and any(str(dest_) != "cpu" for dest_ in ([dest] if dest_of is None else [])):
        raise Refused(
            f"{name} holds dynamic-quantized layers: their packed weights live in C++ "
            "objects that only run on the cpu; quantize the float model again after moving it"
        )
    left = _left_behind(plan, name, m, dest) if dest is not None else []
    plan.left_behind += left
    if not pending:
        if listed:
            plan.skipped.append((name, _nothing_to_move(plan, devices, dest, bool(left))))
        return None
    wants = {dest} if dest_of is None else set(dest_of.values())
    if any(not in_place_ok(a, b) for a in devices for b in wants if a != b):
        script = script_reason(name, m, plan.T)
        if script is not None:
            raise Refused(script)
        saved = saved_by_a_graph(name, m, dest, dest_of)
        if saved is not None:
            raise SavedByAGraph(saved)
    to_device = plan.device_label(dest) if dest is not None else ", ".join(device_names(wants))
    item = PlannedItem(
        name,
        "module",
        m,
        device_names(devices),
        module_bytes(m),
        to_device,
        module_layout(m),
        listed,
    )
    if id(m) not in plan.module_ids:  # else a submodule of a module moved in this call
        job = ModuleJob(name, m, dest, dest_of)
        record_module(plan, job, m)
        plan.modules[id(m)] = job
    plan.items.append(item)
    return item


def _left_behind(plan: Plan, name: str, m: Any, dest: Any) -> list[str]:
    """The module's plain tensor attributes that ``.to(dest)`` leaves on another device (0-dim
    cpu ones aside: they mix with any device)."""
    try:
        loose = objects.plain_tensor_attributes(plan.T, m, list(m.modules()))
    except Exception:
        return []
    return [
        f"{name}.{found.name} on {plan.device_label(found.tensor.device)}"
        for found in loose
        if found.tensor.device != dest and not objects.mixes_with_any_device(found.tensor)
    ]


def _nothing_to_move(plan: Plan, devices: set[Any], dest: Any, left_behind: bool = False) -> str:
    """Why a module with nothing to move is skipped, in words that are true: a module
    with no parameters or buffers (dynamic-quantized layers keep packed weights in C++
    objects) is not "already on" anything, nor is one whose plain tensor attributes are
    elsewhere."""
    if not devices:
        return "has no parameters or buffers to move"
    where = plan.device_label(dest) if dest is not None else "its original devices"
    if left_behind:
        return f"its parameters and buffers already on {where}"
    return f"already on {where}"


def record_module(plan: Plan, job: ModuleJob, m: Any) -> None:
    """Record every submodule's parameters and buffers as they are now, for rollback.

    Everything is read first and entered into the plan at the end, so a module that raises
    while being read leaves the plan as it was (it is then skipped or refused)."""
    subs: list[SubmoduleRecord] = []
    records: list[ParamRecord] = []
    buffers: list[BufferRecord] = []
    seen_subs: set[int] = set()
    seen_params: set[int] = set()
    for sub in m.modules():
        sid = id(sub)
        if sid in plan.module_ids or sid in seen_subs:
            continue
        seen_subs.add(sid)
        sub_params = list(sub._parameters.items())
        sub_buffers = list(sub._buffers.items())
        subs.append((sub, sub_params, sub_buffers))
        for _k, p in sub_params:
            if p is None or id(p) in plan.param_records or id(p) in seen_params:
                continue
            seen_params.add(id(p))
            records.append(ParamRecord(p))
        for k, b in sub_buffers:
            if b is not None:
                buffers.append(BufferRecord(storage_of(b)[0], b, sub, k))
    targets = [job.target_of(r.param) for r in records]
    plan.module_ids.update(seen_subs)
    job.subs.extend(subs)
    job.params.extend(records)
    job.buffers.extend(buffers)
    for record, target in zip(records, targets, strict=True):
        plan.param_records[id(record.param)] = record
        plan.param_dest[id(record.param)] = target
