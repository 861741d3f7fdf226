"""Planning optimizers: an optimizer's *state* follows its parameters (the target for
parameters moved in the same call, their current device otherwise); the parameters themselves
belong to their module. ``step`` counters stay where torch keeps them, like
``Optimizer.load_state_dict``. Optimizers whose parameters move in a call follow along
(:func:`add_followers`), so ``opt.step()`` keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import objects
from ..names import is_ipython_bookkeeping
from ..objects import Kind
from .jobs import Plan, PlannedItem, Refused, device_names
from .places import Link, reach


def add_optimizer(plan: Plan, name: str, opt: Any, layout: Any, listed: bool = True) -> None:
    """Queue the optimizer's state to follow its parameters.

    ``layout`` (undo): ``{(param index, *path): device}`` of the state as it was before
    the move; state the optimizer created since (a step after the move) has no entry and
    follows its parameter back like the rest."""
    if id(opt) in plan.optimizers:
        return
    state = getattr(opt, "state", None)
    groups = getattr(opt, "param_groups", None)
    if not isinstance(state, dict) or not isinstance(groups, list):
        raise Refused(f"{name}: this optimizer keeps no state dict that can be moved")
    plan.optimizers.add(id(opt))
    devices: set[Any] = set()
    wants: set[Any] = set()
    original: dict[tuple[Any, ...], Any] = {}
    planned: list[tuple[tuple[Link, ...], Any, Any]] = []  # (chain, tensor, want)
    index = 0
    for group in groups:
        # Like Optimizer.load_state_dict: step counters stay where they are (the CPU)
        # unless the group is capturable or fused, where they live with the parameters.
        step_follows = bool(group.get("capturable", False) or group.get("fused", False))
        for p in group.get("params", []):
            entry = state.get(p)
            if isinstance(entry, dict):
                follow = plan.param_dest.get(id(p))
                if follow is None:
                    follow = p.device
                for path, chain, value in _state_tensors(plan, entry):
                    dev = value.device
                    original[(index,) + tuple(path)] = dev
                    want = None if layout is None else layout.get((index,) + tuple(path))
                    if want is None:
                        if path == ("step",) and not step_follows:
                            continue
                        want = follow
                    if dev == want:
                        continue
                    plan.check_meta_source(name, dev, want, "its state")
                    devices.add(dev)
                    wants.add(want)
                    planned.append((chain, value, want))
            index += 1
    if not planned:
        if listed:
            plan.skipped.append((name, "optimizer state is already with its parameters"))
        return
    nbytes = 0
    for chain, value, want in planned:
        nbytes += plan.add_plain(value, name, want)
        plan.put_back_chain(chain, value)
    to_device = ", ".join(device_names(wants))
    plan.items.append(
        PlannedItem(
            name, "optimizer", opt, device_names(devices), nbytes, to_device, original, listed
        )
    )


def _state_tensors(
    plan: Plan, entry: dict[Any, Any]
) -> Iterable[tuple[tuple[Any, ...], tuple[Link, ...], Any]]:
    """(path, chain, tensor) of one parameter's optimizer state: tensors, and tensors in
    lists and other containers (LBFGS keeps ``old_dirs``, ``old_stps``, ``ro``, ``al``)."""
    T = plan.T
    for key, value in list(dict.items(entry)):
        kind = objects.kind_of(T, value)
        if kind == Kind.TENSOR:
            yield (key,), ((entry, Kind.MAPPING, key),), value
        elif kind in objects.CONTAINERS:
            holder = {key: value}  # the state entry seen as a namespace of one name
            found, _walked = reach(T, holder, key, value)
            for r in found:
                if r.kind == Kind.TENSOR:
                    chain = (*r.chain[:-1], (entry, Kind.MAPPING, key))
                    yield (key, *r.path), chain, r.value


def add_followers(plan: Plan, extra: Iterable[tuple[str, Any]] = ()) -> None:
    """Optimizers bound to top-level names (and ``extra`` ones) whose parameters move in
    this call move along, so ``opt.step()`` keeps working."""
    if not plan.param_dest:
        return
    optim_type = plan.types[2]
    candidates = []
    for name, value in list(plan.ns.items()):
        if not isinstance(name, str) or is_ipython_bookkeeping(name):
            continue
        if issubclass(type(value), optim_type):
            candidates.append((name, value))
        elif objects.kind_of(plan.T, value) in objects.COMPOSITES:
            # an optimizer kept in an attribute or a container (trainer.optimizer)
            found, _walked = plan.reach(name, value)
            candidates.extend((r.label, r.value) for r in found if r.kind == Kind.OPTIMIZER)
    candidates.extend(extra)
    for name, value in candidates:
        if id(value) in plan.optimizers:
            continue
        state = getattr(value, "state", None)
        if isinstance(state, dict) and any(id(p) in plan.param_dest for p in list(state)):
            try:
                add_optimizer(plan, name, value, None)
            except Refused as e:
                plan.skip_or_refuse(name, str(e))
