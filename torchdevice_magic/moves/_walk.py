"""Stand-in for torchdevice_magic.objects (the one walker) while it is being written: the
functions the planner and the transaction need, with the container rules moving.py had."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 3


class Attr(str):
    """A path step that is an attribute name (not a mapping key)."""

    __slots__ = ()


def static_attr(obj: Any, name: str) -> Any:
    try:
        return inspect.getattr_static(obj, name, None)
    except Exception:
        return None


def step_text(step: Any) -> str:
    return f".{step}" if isinstance(step, Attr) else f"[{step!r}]"


def is_ipython_name(name: str) -> bool:
    from ..inventory import is_ipython_bookkeeping

    return is_ipython_bookkeeping(name)


def _is_namedtuple(obj: Any) -> bool:
    tp = type(obj)
    return issubclass(tp, tuple) and hasattr(tp, "_fields") and hasattr(tp, "_make")


def is_container(obj: Any) -> bool:
    return isinstance(obj, (list, tuple, dict))


def enterable(obj: Any) -> bool:
    return is_container(obj)


def is_immutable(obj: Any) -> bool:
    return isinstance(obj, tuple)


def children(obj: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(obj, dict):
        return list(obj.items())
    return list(enumerate(obj))


def put_back(holder: Any, key: Any, value: Any) -> None:
    if isinstance(key, Attr):
        setattr(holder, key, value)
    else:
        holder[key] = value


def rebuild(obj: Any, changes: dict[Any, Any]) -> Any:
    items = [changes.get(i, v) for i, v in enumerate(obj)]
    if _is_namedtuple(obj):
        return type(obj)._make(items)
    return type(obj)(items)


def packed_weights_note(module: Any) -> str | None:
    for sub in module.modules():
        packed = sub.__dict__.get("_packed_params")
        if packed is not None and not hasattr(packed, "device"):
            return (
                "dynamic-quantized: its packed weights live in C++ objects on the cpu and "
                "cannot be moved; quantize the float model again on the target"
            )
    return None


def state_tensors(entry: dict[Any, Any]) -> Iterable[tuple[tuple[Any, ...], Any, Any, Any]]:
    """(path, holder, key, tensor) of an optimizer state entry, lists entered (LBFGS)."""
    import torch

    for key, value in list(entry.items()):
        if isinstance(value, torch.Tensor):
            yield (key,), entry, key, value
        elif type(value) is list:
            for i, v in enumerate(list(value)):
                if isinstance(v, torch.Tensor):
                    yield (key, i), value, i, v


@dataclass
class Found:
    tensors: list[tuple[tuple[Any, ...], tuple[Any, ...], Any]] = field(default_factory=list)
    modules: list[tuple[tuple[Any, ...], Any]] = field(default_factory=list)
    optimizers: list[tuple[tuple[Any, ...], Any]] = field(default_factory=list)
    refused: str | None = None


def walk_for_move(obj: Any, types: tuple[type, type, type]) -> Found:
    tensor_type, module_type, optim_type = types
    found = Found()
    seen: set[int] = set()

    def visit(node: Any, path: tuple[Any, ...], holders: tuple[Any, ...], depth: int) -> None:
        if not is_immutable(node):
            if id(node) in seen:
                return
            seen.add(id(node))
        holders = (*holders, node)
        for key, child in children(node):
            p = (*path, key)
            if isinstance(child, tensor_type):
                found.tensors.append((p, holders, child))
            elif isinstance(child, module_type):
                found.modules.append((p, child))
            elif isinstance(child, optim_type):
                found.optimizers.append((p, child))
            elif depth < MAX_DEPTH and enterable(child):
                visit(child, p, holders, depth + 1)

    visit(obj, (), (), 1)
    return found


def movable(value: Any) -> bool:
    import torch

    if isinstance(value, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)):
        return True
    if not enterable(value):
        return False
    found = walk_for_move(value, (torch.Tensor, torch.nn.Module, torch.optim.Optimizer))
    return bool(found.tensors or found.modules or found.optimizers)
