"""Autograd graphs: the tensors a graph kept alive by a live result saved (``loss``, a list
of losses), and their release (detach). Walks graph nodes (``next_functions``), not user
objects.

Pure core: no IPython, no ipywidgets, torch never imported here.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

from ..objects import TorchTypes, add_storages, instance_dict, is_fake, is_uninitialized
from .base import Keys, _is_tensor, _keys_of, _shallow_items, _Source

#: per node type: the ``_saved_*`` attributes that can hold tensors (in a node torch generated,
#: an attribute that once held sizes, a scalar or a string is typed so: never a tensor; a
#: custom Function's context is the user's, and keeps all its names)
_SAVED_ATTRIBUTES: dict[type, list[str]] = {}
#: per node type: (it has ``variable``: an AccumulateGrad; it has ``saved_tensors``: a custom
#: Function's context)
_NODE_PARTS: dict[type, tuple[bool, bool]] = {}


def _saved_names(node: Any) -> list[str]:
    kind = type(node)
    names = _SAVED_ATTRIBUTES.get(kind)
    if names is None:
        try:
            names = [n for n in dir(node) if n.startswith("_saved_")]
        except Exception:
            names = []
        _SAVED_ATTRIBUTES[kind] = names
        _NODE_PARTS[kind] = (hasattr(kind, "variable"), hasattr(kind, "saved_tensors"))
    return names


def graph_tensors(roots: Iterable[Any], limit: int = 200_000) -> list[Any]:
    """The tensors the autograd graphs of ``roots`` (tensors) keep alive: every node's saved
    tensors (``_saved_*``; freed after ``backward()``), custom Functions' ``saved_tensors``, and
    the leaves ``AccumulateGrad`` nodes hold. Walks graph nodes, not user objects."""
    found: list[Any] = []
    # each node walked, kept until the walk ends: a torch that makes a node's Python object
    # afresh at every ``next_functions`` read (2.11) frees it once the walk moves on, and a
    # later node's object may take its id
    seen: dict[int, Any] = {}
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
        if id(node) in seen:
            continue
        seen[id(node)] = node
        names = _saved_names(node)
        has_variable, has_context = _NODE_PARTS[type(node)]
        for name in names:
            try:
                value = getattr(node, name)
            except Exception:  # freed by backward()
                continue
            if isinstance(value, tensor_type):
                found.append(value)
            elif isinstance(value, (tuple, list)) and value:
                tensors = [v for v in value if isinstance(v, tensor_type)]
                if tensors:
                    found.extend(tensors)
                elif value[0] is not None and not has_context:
                    _not_a_tensor(node, name)  # sizes or strides
            elif value is not None and not has_context:
                _not_a_tensor(node, name)  # a scalar, a string, a flag
        if has_variable:  # AccumulateGrad: the leaf
            with contextlib.suppress(Exception):
                variable = node.variable
                if isinstance(variable, tensor_type):
                    found.append(variable)
        if has_context:  # a custom autograd.Function's context
            with contextlib.suppress(Exception):
                found.extend(v for v in node.saved_tensors if isinstance(v, tensor_type))
        with contextlib.suppress(Exception):
            stack.extend(child for child, _ in node.next_functions if child is not None)
    return found


def _not_a_tensor(node: Any, name: str) -> None:
    """The walk skips ``name`` on every later node of this type."""
    names = _SAVED_ATTRIBUTES[type(node)]
    if name in names:
        _SAVED_ATTRIBUTES[type(node)] = [n for n in names if n != name]


#: id(tensor) -> (the tensor, its keys): what one measurement's graph holders already read.
#: Graphs share leaves (a model's parameters; ``loss = out.sum()`` keeps all of ``out``'s
#: graph), which keep their Python object (a saved result is a new one at every read). It
#: holds the tensors: it lives no longer than the measurement that made it.
KeyMemo = dict[int, tuple[Any, Keys]]


def graph_keys(
    tensors: list[Any], label: str = "autograd graph", memo: KeyMemo | None = None
) -> Keys:
    """``{storage key: (device, nbytes)}`` of ``tensors`` (a graph's saved tensors and leaves)
    and their gradients: what ``scan({label: tensors}).storages()`` gives, read directly with
    the scan's own keys (``add_storages``), and by the scan for the subclasses it reads another
    way (fake, DTensor, lazy). A graph's tensors are new after every forward pass: the scan's
    records and its reuse would be built for nothing."""
    T = TorchTypes.current()
    if T is None:
        return {}
    keys: Keys = {}
    others: list[Any] = []
    memo = {} if memo is None else memo
    for tensor in tensors:
        known = memo.get(id(tensor))
        if known is not None and known[0] is tensor:
            keys.update(known[1])
            continue
        if not _keyed_directly(T, tensor):
            others.append(tensor)
            continue
        try:
            found: Keys = {}
            add_storages(T, tensor, T.device_name(tensor.device), found)
            grad = _leaf_grad(tensor)
            if grad is not None:
                grad_keys: Keys = {}
                add_storages(T, grad, T.device_name(grad.device), grad_keys)
                key = next(iter(grad_keys))  # the scan counts a gradient by its first storage
                found[key] = grad_keys[key]
        except Exception:
            others.append(tensor)
            continue
        memo[id(tensor)] = (tensor, found)
        keys.update(found)
    if others:
        keys.update(_keys_of({label: others})[1])
    return keys


def _keyed_directly(T: TorchTypes, tensor: Any) -> bool:
    """Whether the scan keys ``tensor`` by ``add_storages`` of the tensor itself: every type but
    fake tensors (no data; a functional wrapper of one too), DTensor (its local shard) and a lazy module's
    uninitialized parameters (nothing yet)."""
    tp = type(tensor)
    if tp is T.Tensor or tp is T.Parameter:
        return True
    if tp.__name__ == "DTensor" or is_fake(T, tensor):
        return False
    return not is_uninitialized(T, tensor)


def _leaf_grad(tensor: Any) -> Any:
    """A tensor's ``.grad`` where it can have one (a leaf, or ``retain_grad()``): reading it on
    any other tensor makes torch warn."""
    if not tensor.requires_grad or not (tensor.is_leaf or tensor.retains_grad):
        return None
    return tensor.grad


#: a container's elements looked at for graphs after a cell, at most: its last ones, where a
#: list of losses grows. A trainer's history of 100,000 floats, mentioned by every cell that
#: calls ``trainer.step()``, must not cost a Python loop over all of it each time.
GRAPH_ELEMENTS_LOOKED_AT = 4096


def _graph_roots(value: Any) -> list[Any]:
    """Tensors with a graph in ``value`` (a tensor, or one level of a list/tuple/dict: its
    last :data:`GRAPH_ELEMENTS_LOOKED_AT` elements)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    tensor_type = torch.Tensor
    if isinstance(value, tensor_type):
        return [value] if _has_graph(value) else []
    elements = _last_elements(value, GRAPH_ELEMENTS_LOOKED_AT)
    # the element types first, in C: most containers hold no tensor at all
    if not any(issubclass(kind, tensor_type) for kind in set(map(type, elements))):
        return []
    return [v for v in elements if isinstance(v, tensor_type) and _has_graph(v)]


def _last_elements(value: Any, count: int) -> list[Any]:
    """The last ``count`` elements of a list or tuple, or values of a dict, read with the base
    classes' own methods (never a subclass's override); anything else: none."""
    try:
        if isinstance(value, dict):
            values = dict.values(value)
            if len(values) <= count:
                return list(values)
            return list(islice(reversed(values), count))[::-1]
        if isinstance(value, list):
            return list.__getitem__(value, slice(-count, None))
        if isinstance(value, tuple):
            return list(tuple.__getitem__(value, slice(-count, None)))
    except Exception:
        pass
    return []


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
    return _detach_held(namespace, name, name, expected_id)


def _detach_attribute_graphs(
    namespace: Any, name: str, attribute: str, owner_id: int, expected_id: int
) -> str:
    """Detach what ``name.attribute`` holds, if ``name`` and its attribute are still the
    objects measured (found again by name: a holder must not keep the object alive)."""
    owner = namespace.get(name)
    attributes = instance_dict(owner) if owner is not None and id(owner) == owner_id else None
    return _detach_held(attributes or {}, attribute, f"{name}.{attribute}", expected_id)


def _detach_held(holder: Any, key: str, label: str, expected_id: int) -> str:
    """Detach from their graphs the tensors ``holder[key]`` holds (a namespace's name, an
    object's attribute: a tensor, or one level of a container), if it is still the object
    measured; a tensor that cannot be detached in place is replaced by its detached copy."""
    value = holder.get(key)
    if value is None or id(value) != expected_id:
        return f"{label} was rebound since: nothing released"
    if _is_tensor(value):
        if not _detach_in_place(value):
            holder[key] = value.detach()
        return f"{label} no longer keeps its autograd graph (it was detached)"
    released = 0
    for index, element in _shallow_items(value):
        if _is_tensor(element) and _has_graph(element):
            if not _detach_in_place(element):
                if isinstance(value, tuple):
                    continue  # immutable: cannot swap the element
                value[index] = element.detach()
            released += 1
    return f"detached {released} tensors of {label} from their autograd graphs (the values stay)"


def _detach_in_place(tensor: Any) -> bool:
    try:
        tensor.detach_()
        return True
    except Exception:  # a view cannot be detached in place
        return False


def _container_fix(name: str, value: Any, roots: list[Any]) -> str:
    """What to do about a container whose tensors keep graphs: a tuple of non-scalar tensors is
    a recurrent state (an LSTM's ``(h, c)``) carried from batch to batch, whose graph reaches
    back through every batch until it is detached; a dict is one result (a model's output,
    ``out.loss`` and ``out.logits``), whose graph backward() needs once; anything else collects
    results (losses), which the report needs as numbers."""
    if isinstance(value, tuple) and not any(_dimensions(r) == 0 for r in roots):
        return f"detach it between batches: {name} = tuple(h.detach() for h in {name})"
    if isinstance(value, dict):
        return f"del {name} once backward() ran (keep .item() or .detach() of the values you need)"
    return "append loss.item() or loss.detach()"


def _dimensions(tensor: Any) -> int | None:
    try:
        return int(tensor.dim())
    except Exception:
        return None


#: attribute graphs: an object's attributes looked at, at most (a big object is a model's
#: own business, and the scan names its tensors anyway)
ATTRIBUTES_LOOKED_AT = 256


def _attribute_graph_sources(
    namespace: Any, name: str, value: Any, memo: KeyMemo | None = None
) -> list[_Source]:
    """The graphs kept by an object's attributes (one level: a tensor, or a list/tuple/dict
    of them): a trainer's ``self.val_losses.append(out.loss)`` in an evaluation loop keeps every
    batch's activations, and the scan names only the losses themselves."""
    attributes = instance_dict(value)
    if not attributes or len(attributes) > ATTRIBUTES_LOOKED_AT:
        return []
    sources = []
    for attribute, element in list(attributes.items()):
        if not isinstance(attribute, str) or not _may_hold_graphs(element):
            continue
        release = functools.partial(
            _detach_attribute_graphs, namespace, name, attribute, id(value), id(element)
        )
        source = _graph_source(namespace, f"{name}.{attribute}", element, memo, release)
        if source is not None:
            source.key = f"graph {attribute}"
            sources.append(source)
    return sources


def _may_hold_graphs(value: Any) -> bool:
    return _is_tensor(value) or type(value) in (list, tuple, dict)


def _graph_source(
    namespace: Any,
    name: str,
    value: Any,
    memo: KeyMemo | None = None,
    release: Callable[[], str] | None = None,
) -> _Source | None:
    roots = _graph_roots(value)
    if not roots:
        return None
    saved = graph_tensors(roots)
    if not saved:
        return None
    keys = graph_keys(saved, f"{name} (autograd graph)", memo)
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
        release or functools.partial(_detach_graphs, namespace, name, id(value)),
        fix,
        count,
        token=id(value),
        key="graph",
    )
