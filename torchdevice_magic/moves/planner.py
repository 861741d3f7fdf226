"""The planner: which names a move takes, and which planner plans each (tensor, Parameter,
module, optimizer, container or object). The result is a :class:`~.jobs.Plan`: what moves
where, what follows, what is skipped and why, before anything is touched.

Order matters: modules first (Parameters named on their own then see they move with them),
then the rest; optimizers last, because their state follows wherever their parameters end up;
then every optimizer whose parameters move follows along.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

from .. import objects
from ..names import IPYTHON_NAMES, is_ipython_bookkeeping
from .jobs import Plan
from .plan_containers import add_container
from .plan_modules import add_module, add_parameter, is_parameter
from .plan_optimizers import add_followers, add_optimizer
from .plan_tensors import add_tensor, queue_bulk
from .result import MoveError


def is_history_name(name: str) -> bool:
    """IPython's own names (THE rule: names.py), refused even when named explicitly: rebinding
    them would break IPython's history. Dunder names other than ``__`` and ``___`` are left
    out: "Move all" passes over them, but a user may name a variable ``__cache`` and move it."""
    if name.startswith("__") and name not in IPYTHON_NAMES:
        return False
    return is_ipython_bookkeeping(name)


def add(plan: Plan, name: str, obj: Any, dest: Any, layout: Any = None) -> None:
    """Plan one top-level name. ``dest`` None: per-tensor devices from ``layout`` (undo)."""
    plan.guarded(name, _add_by_kind, plan, name, obj, dest, layout)


def _add_by_kind(plan: Plan, name: str, obj: Any, dest: Any, layout: Any) -> None:
    tensor_type, module_type, optim_type = plan.types
    tp = type(obj)
    if issubclass(tp, tensor_type):
        if is_parameter(plan.torch, obj):
            add_parameter(plan, name, obj, dest if dest is not None else layout)
        else:
            add_tensor(plan, name, obj, dest if dest is not None else layout)
    elif issubclass(tp, module_type):
        add_module(plan, name, obj, dest, layout)
    elif issubclass(tp, optim_type):
        add_optimizer(plan, name, obj, layout)
    elif objects.kind_of(plan.T, obj) in objects.COMPOSITES:
        add_container(plan, name, obj, dest, layout)
    else:
        plan.skip_or_refuse(
            name,
            f"{name} is a {tp.__name__}, not a tensor, module, optimizer or container of tensors",
        )


def _named(plan: Plan, namespace: MutableMapping[str, Any], names: Iterable[str]) -> list[Any]:
    """The (name, value) pairs ``names`` picks, checked: MoveError for a name that is not
    there; IPython's history is skipped with why."""
    if isinstance(names, str):
        names = [names]
    wanted: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise MoveError(f"names must be strings, got {type(name).__name__}")
        if name not in namespace:
            if "." in name or "[" in name:
                top = name.split(".")[0].split("[")[0]
                raise MoveError(
                    f"{name!r} is not a top-level name: move() takes variable names such as {top!r}"
                )
            raise MoveError(f"no variable named {name!r} in this namespace")
        if name not in wanted:
            wanted.append(name)
    selected: list[tuple[str, Any]] = []
    for name in wanted:
        if is_history_name(name):
            plan.skipped.append((name, f"{name} is IPython's history, not a variable"))
        else:
            selected.append((name, namespace[name]))
    return selected


def _movable(plan: Plan, namespace: MutableMapping[str, Any], dest: Any) -> list[Any]:
    """Everything the scan lists as movable: tensors, modules, optimizers, and composites the
    one walker finds any of them in. Plain tensors (the bulk of a big namespace) are picked
    out with comprehensions and queued for the bulk path here."""
    tensor_type = plan.types[0]
    items = namespace.items()
    bulk_names = [n for n, v in items if type(v) is tensor_type and type(n) is str]
    # (IPython's names start with "_" or are a few fixed ones: checked only for those)
    odd = [n for n in bulk_names if n[:1] == "_" or n in IPYTHON_NAMES]
    if odd:
        hidden = {n for n in odd if is_ipython_bookkeeping(n)}
        bulk_names = [n for n in bulk_names if n not in hidden]
    selected: list[tuple[str, Any]] = []
    if bulk_names:
        tensors = list(map(namespace.__getitem__, bulk_names))
        trained = plan.optimized_ids()
        if not trained.isdisjoint(map(id, tensors)):  # an optimizer's plain trainable leaves
            keep = [id(t) not in trained for t in tensors]
            selected += [(n, t) for n, t, k in zip(bulk_names, tensors, keep, strict=True) if not k]
            bulk_names = [n for n, k in zip(bulk_names, keep, strict=True) if k]
            tensors = [t for t, k in zip(tensors, keep, strict=True) if k]
        plan.bulk_queue[dest] = (bulk_names, tensors)
    for name, value in [(n, v) for n, v in items if type(v) is not tensor_type]:
        if not isinstance(name, str) or is_ipython_bookkeeping(name):
            continue
        kind = objects.kind_of(plan.T, value)
        if kind in objects.LEAVES or (kind in objects.COMPOSITES and plan.reach(name, value)[0]):
            selected.append((name, value))
    return selected


def plan_move(namespace: MutableMapping[str, Any], dest: Any, names: Iterable[str] | None) -> Plan:
    """The plan for moving ``names`` (all movable names when None) of ``namespace`` to ``dest``."""
    plan = Plan(namespace, str(dest), explicit=names is not None)
    plan.dest = dest
    tensor_type, module_type, optim_type = plan.types
    if names is not None:
        selected = _named(plan, namespace, names)
    else:
        selected = _movable(plan, namespace, dest)
    for name, value in selected:
        if issubclass(type(value), module_type):
            add(plan, name, value, dest)
    for name, value in selected:
        tp = type(value)
        if tp is tensor_type and not plan.trained_in_place(value):
            queue_bulk(plan, name, value, dest)
        elif not issubclass(tp, (module_type, optim_type)):
            add(plan, name, value, dest)
    for name, value in selected:
        if issubclass(type(value), optim_type):
            add(plan, name, value, dest)
    add_followers(plan)
    return plan
