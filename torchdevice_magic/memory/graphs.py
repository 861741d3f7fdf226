"""Autograd graphs: the tensors a graph kept alive by a live result saved (``loss``, a list
of losses), and their release (detach). Walks graph nodes (``next_functions``), not user
objects.

Pure core: no IPython, no ipywidgets, torch never imported here.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterable
from typing import Any

from .base import _is_tensor, _keys_of, _shallow_items, _Source

_SAVED_ATTRIBUTES: dict[type, tuple[str, ...]] = {}


def _saved_names(node: Any) -> tuple[str, ...]:
    kind = type(node)
    names = _SAVED_ATTRIBUTES.get(kind)
    if names is None:
        try:
            names = tuple(n for n in dir(node) if n.startswith("_saved_"))
        except Exception:
            names = ()
        _SAVED_ATTRIBUTES[kind] = names
    return names


def graph_tensors(roots: Iterable[Any], limit: int = 200_000) -> list[Any]:
    """The tensors the autograd graphs of ``roots`` (tensors) keep alive: every node's saved
    tensors (``_saved_*``; freed after ``backward()``), custom Functions' ``saved_tensors``, and
    the leaves ``AccumulateGrad`` nodes hold. Walks graph nodes, not user objects."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = []
    for tensor in roots:
        try:
            node = tensor.grad_fn
        except Exception:
            node = None
        if node is not None:
            stack.append(node)
    torch = sys.modules.get("torch")
    tensor_type = torch.Tensor if torch is not None else ()
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for name in _saved_names(node):
            try:
                value = getattr(node, name)
            except Exception:  # freed by backward()
                continue
            if isinstance(value, tensor_type):
                found.append(value)
            elif isinstance(value, (tuple, list)):
                found.extend(v for v in value if isinstance(v, tensor_type))
        try:
            variable = getattr(node, "variable", None)  # AccumulateGrad: the leaf
            if isinstance(variable, tensor_type):
                found.append(variable)
        except Exception:
            pass
        if hasattr(type(node), "saved_tensors"):  # a custom autograd.Function's context
            with contextlib.suppress(Exception):
                found.extend(v for v in node.saved_tensors if isinstance(v, tensor_type))
        with contextlib.suppress(Exception):
            stack.extend(child for child, _ in node.next_functions if child is not None)
    return found


def _graph_roots(value: Any) -> list[Any]:
    """Tensors with a graph in ``value`` (a tensor, or one level of a list/tuple/dict)."""
    if _is_tensor(value):
        return [value] if _has_graph(value) else []
    return [v for _, v in _shallow_items(value) if _is_tensor(v) and _has_graph(v)]


def _tensor_count(value: Any) -> int:
    if _is_tensor(value):
        return 1
    return sum(1 for _, v in _shallow_items(value) if _is_tensor(v))


def _has_graph(tensor: Any) -> bool:
    try:
        return tensor.grad_fn is not None
    except Exception:
        return False


def _detach_graphs(namespace: Any, name: str, expected_id: int) -> str:
    value = namespace.get(name)
    if value is None or id(value) != expected_id:
        return f"{name} was rebound since: nothing released"
    if _is_tensor(value):
        if not _detach_in_place(value):
            namespace[name] = value.detach()
        return f"{name} no longer keeps its autograd graph (it was detached)"
    released = 0
    for key, element in _shallow_items(value):
        if _is_tensor(element) and _has_graph(element):
            if not _detach_in_place(element):
                if isinstance(value, tuple):
                    continue  # immutable: cannot swap the element
                value[key] = element.detach()
            released += 1
    return f"{name}: {released} tensors detached from their autograd graphs"


def _detach_in_place(tensor: Any) -> bool:
    try:
        tensor.detach_()
        return True
    except Exception:  # a view cannot be detached in place
        return False


def _container_fix(name: str, value: Any, roots: list[Any]) -> str:
    """What to do about a container whose tensors keep graphs: a tuple of non-scalar tensors is
    a recurrent state (an LSTM's ``(h, c)``) carried from batch to batch, whose graph reaches
    back through every batch until it is detached; anything else collects results (losses),
    which the report needs as numbers."""
    if isinstance(value, tuple) and not any(_dimensions(r) == 0 for r in roots):
        return f"detach it between batches: {name} = tuple(h.detach() for h in {name})"
    return "append loss.item() or loss.detach()"


def _dimensions(tensor: Any) -> int | None:
    try:
        return int(tensor.dim())
    except Exception:
        return None


def _graph_source(namespace: Any, name: str, value: Any) -> _Source | None:
    roots = _graph_roots(value)
    if not roots:
        return None
    saved = graph_tensors(roots)
    if not saved:
        return None
    _, keys = _keys_of({f"{name} (autograd graph)": saved})
    if not keys:
        return None
    if _is_tensor(value):
        where, fix = f"{name} (autograd graph)", f"{name} = {name}.detach() once backward() ran"
        count = 1
    else:
        count = len(roots)
        plural = "graph" if count == 1 else "graphs"
        where = f"{name}: {count} autograd {plural}"
        fix = _container_fix(name, value, roots)
    return _Source(
        where,
        "autograd graph",
        keys,
        functools.partial(_detach_graphs, namespace, name, id(value)),
        fix,
        count,
        token=id(value),
        key="graph",
    )
