"""The walk: the edges of one composite (``children``, ``label``), the bounded read-only
``walk`` of everything a value holds, and the cheap "did this structure change?"
(``structure``, ``signature``) the scanner keeps between cells.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from .kinds import (
    ATTRIBUTE_KINDS,
    COMPOSITES,
    CONTAINERS,
    LEAVES,
    Kind,
    TorchTypes,
    _class_attr,
    _layout,
    _mro_of,
    _userdict_data,
    instance_dict,
    kind_of,
    kind_of_type,
)

#: Composites nested deeper than this are not walked (a nested batch is rarely deeper).
MAX_DEPTH = 3


#: The hard safety cap on elements visited in one walk; hitting it is reported.
ELEMENT_CAP = 100_000


#: The element cap of a walk that starts at a plain object (its graph can be large)
OBJECT_CAP = 10_000


#: Above this many nodes a structure's signature looks at the root only.
SIGNATURE_NODES = 512


#: edges out of these cost no depth (a loader's dataset, a Subset's dataset)
_PASS_THROUGH = frozenset({Kind.DATALOADER, Kind.DATASET})


# --------------------------------------------------------------------------------------------
# Edges


def children(T: TorchTypes, value: Any, kind: str) -> list[tuple[Any, Any]]:
    """(key, child) edges of one composite, read-only. Raises only for unreadable objects."""
    if kind == Kind.MAPPING:
        return list(dict.items(value))
    if kind == Kind.SEQUENCE or kind == Kind.NAMEDTUPLE:
        if isinstance(value, tuple):
            return list(enumerate(tuple.__iter__(value)))
        return list(enumerate(list.__iter__(value)))
    if kind == Kind.USERDICT:
        own = instance_dict(value)
        data = own.get("data") if own is not None else None
        return list(dict.items(data)) if isinstance(data, dict) else []
    if kind == Kind.DATALOADER:
        own = instance_dict(value)
        if own is not None and "dataset" in own:
            return [("dataset", own["dataset"])]
        return []
    if kind in ATTRIBUTE_KINDS:
        edges: list[tuple[Any, Any]] = []
        own = instance_dict(value)
        if own is not None:
            edges.extend(dict.items(own))
        for name, member in _layout(type(value))[1]:
            try:
                edges.append((name, member.__get__(value)))
            except Exception:  # an unset slot
                continue
        return edges
    return []


def _values(value: Any, kind: str) -> Any:
    """An iterator over a container's children through the base-class methods."""
    if kind == Kind.MAPPING:
        return dict.values(value)
    if kind == Kind.USERDICT:
        return dict.values(_userdict_data(value))
    return tuple.__iter__(value) if isinstance(value, tuple) else list.__iter__(value)


def _size(value: Any, kind: str) -> int:
    if kind == Kind.MAPPING:
        return dict.__len__(value)
    if kind == Kind.SEQUENCE or kind == Kind.NAMEDTUPLE:
        return tuple.__len__(value) if isinstance(value, tuple) else list.__len__(value)
    if kind == Kind.USERDICT:
        own = instance_dict(value)
        data = own.get("data") if own is not None else None
        return dict.__len__(data) if isinstance(data, dict) else -1
    own = instance_dict(value)
    return dict.__len__(own) if own is not None else -1


def size(value: Any, kind: str) -> int:
    """How many children a composite has (base-class ``len``; -1 if unknown), O(1)."""
    try:
        return _size(value, kind)
    except Exception:
        return -1


def _last_id(value: Any, kind: str) -> int:
    """ids of the children of small composites, else of the last child (appends show
    here): O(1) for big containers."""
    try:
        if kind == Kind.MAPPING:
            if dict.__len__(value) <= 64:
                return hash(tuple(map(id, dict.values(value))))
            return id(next(reversed(dict.values(value)), None))
        if kind == Kind.SEQUENCE or kind == Kind.NAMEDTUPLE:
            if isinstance(value, tuple):
                if tuple.__len__(value) <= 64:
                    return hash(tuple(map(id, tuple.__iter__(value))))
                return id(tuple.__getitem__(value, -1)) if tuple.__len__(value) else 0
            if list.__len__(value) <= 64:
                return hash(tuple(map(id, list.__iter__(value))))
            return id(list.__getitem__(value, -1))
        own = instance_dict(value)
        if kind == Kind.USERDICT:
            own = own.get("data") if own is not None else None
            return id(next(reversed(dict.values(own)), None)) if isinstance(own, dict) else 0
        if own is None:
            return 0
        if kind in ATTRIBUTE_KINDS and dict.__len__(own) <= 64:
            return hash(tuple(map(id, dict.values(own))))
        return id(next(reversed(dict.values(own)), None))
    except Exception:
        return 0


def label(kind: str, key: Any, value_type: type | None = None) -> str:
    """The path step a user reads: ``['x']``, ``[3]``, ``.field``."""
    if kind == Kind.MAPPING or kind == Kind.USERDICT:
        if isinstance(key, (str, int, float, bool)) or key is None:
            return f"[{key!r}]"
        return f"[<{type(key).__name__}>]"
    if kind == Kind.NAMEDTUPLE and value_type is not None:
        fields = _class_attr(_mro_of(value_type), "_fields")
        if isinstance(fields, tuple) and type(key) is int and key < len(fields):
            return f".{fields[key]}"
        return f"[{key}]"
    if kind == Kind.SEQUENCE:
        return f"[{key}]"
    return f".{key}"


# --------------------------------------------------------------------------------------------
# The walk


#: the shape of a walk without its values: (parent index, key, kind) per composite node
Spec = tuple[tuple[int, Any, str], ...]


class Leaf(NamedTuple):
    path: str
    value: Any
    kind: str
    node: int  # index in Walk.nodes of the composite holding it (-1: the walked value itself)
    key: Any


class Node(NamedTuple):
    path: str
    value: Any
    kind: str
    parent: int  # -1 for the root
    key: Any


class Walk:
    __slots__ = (
        "leaves", "nodes", "aliases", "visited", "truncated", "skipped", "cap", "max_depth",
    )  # fmt: skip

    def __init__(self, cap: int, max_depth: int) -> None:
        self.leaves: list[Leaf] = []
        self.nodes: list[Node] = []
        #: (index of the node holding it, key, composite) for each further edge to a composite
        #: already entered (a tuple held in two places): the mover puts a rebuilt one there too
        self.aliases: list[tuple[int, Any, Any]] = []
        self.visited = 0
        self.truncated = False
        self.skipped: list[tuple[str, str]] = []
        self.cap = cap
        self.max_depth = max_depth


#: Why a DataLoader's data stays where it is when what holds it moves (a dataset on an
#: accelerator breaks ``pin_memory`` and forked workers; only the batch needs to be there):
#: the scan's row and the mover say the same
LOADER_DATA_STAYS = (
    "a DataLoader's data stays where it is: move each batch in the loop"
    " (batch.to(device, non_blocking=True))"
)


def cut_short_reason(name: str, walked: Walk) -> str:
    """Why a move leaves ``name`` whose walk stopped at its cap (what it does not know, it
    does not move); the scan's row says the same. A cut-short walk of a DataLoader's data
    alone says :data:`LOADER_DATA_STAYS` instead: that data stays whatever its size."""
    if walked.leaves and all(loader_above(walked, leaf.node) for leaf in walked.leaves):
        return LOADER_DATA_STAYS
    return f"{name} holds more than {walked.cap:,} elements: name the tensors in it directly"


def loader_above(walked: Walk, index: int) -> str | None:
    """The path of the DataLoader that is node ``index`` or holds it, or None: a loader's data
    stays where it is when what holds it moves (its batches move in the training loop; a
    dataset on an accelerator breaks ``pin_memory`` and forked workers)."""
    nodes = walked.nodes
    while index >= 0:
        node = nodes[index]
        if node.kind == Kind.DATALOADER:
            return node.path
        index = node.parent
    return None


def walk(
    T: TorchTypes,
    value: Any,
    path: str,
    *,
    max_depth: int = MAX_DEPTH,
    cap: int = ELEMENT_CAP,
    kind: str | None = None,
) -> Walk:
    """Everything a value holds, read-only and bounded (see the module docstring)."""
    kind = kind or kind_of(T, value)
    if kind in ATTRIBUTE_KINDS:
        cap = min(cap, OBJECT_CAP)
    result = Walk(cap, max_depth)
    if kind in LEAVES:
        result.leaves.append(Leaf(path, value, kind, -1, None))
        return result
    if kind not in COMPOSITES:
        return result
    seen: set[int] = {id(value)}
    result.nodes.append(Node(path, value, kind, -1, None))
    _walk_node(T, result, 0, 1, seen)
    return result


def _step(path: str, kind: str, value_type: type, key: Any) -> str:
    return path + label(kind, key, value_type)


def _walk_node(T: TorchTypes, result: Walk, index: int, depth: int, seen: set[int]) -> None:
    node = result.nodes[index]
    value, kind, path = node.value, node.kind, node.path
    kinds = T.kinds
    try:
        if kind in CONTAINERS and _size(value, kind) > 32:
            # most big containers hold only numbers or strings: one C-level pass decides
            child_types = set(map(type, _values(value, kind)))
            if all(kinds.get(tp) == Kind.NONE for tp in child_types):
                return
        edges = children(T, value, kind)
    except Exception as error:
        result.skipped.append((path, f"could not read: {type(error).__name__}"))
        return
    step: Callable[[Any], str] | None = None  # made when the first child needs a path
    child_depth = depth if kind in _PASS_THROUGH else depth + 1
    visited, cap = result.visited, result.cap
    for key, child in edges:
        visited += 1
        if visited > cap:
            result.visited = visited
            result.truncated = True
            return
        child_type = type(child)
        child_kind = kinds.get(child_type)
        if child_kind is None:
            child_kind = kind_of_type(T, child_type)
        if child_kind == Kind.NONE:
            continue
        if step is None:
            step = _stepper(path, kind, type(value))
        if child_kind in LEAVES:
            result.leaves.append(Leaf(step(key), child, child_kind, index, key))
        elif id(child) in seen:
            result.aliases.append((index, key, child))
        elif child_depth <= result.max_depth:
            seen.add(id(child))
            result.nodes.append(Node(step(key), child, child_kind, index, key))
            result.visited = visited
            _walk_node(T, result, len(result.nodes) - 1, child_depth, seen)
            if result.truncated:
                return
            visited = result.visited
    result.visited = visited


def _stepper(path: str, kind: str, value_type: type) -> Callable[[Any], str]:
    """The path of a child from its key (a bound ``str.format`` where the step is plain)."""
    escaped = path.replace("{", "{{").replace("}", "}}")  # the path becomes a format string
    if kind == Kind.SEQUENCE:
        return f"{escaped}[{{}}]".format
    if kind in ATTRIBUTE_KINDS:
        return f"{escaped}.{{}}".format
    return partial(_step, path, kind, value_type)


def child_types(value: Any, kind: str) -> set[type] | None:
    """The types of a list/tuple/dict's children in one C-level pass (None: not readable)."""
    if kind not in CONTAINERS:
        return None
    try:
        return set(map(type, _values(value, kind)))
    except Exception:
        return None


def holds_nothing(T: TorchTypes, types: set[type]) -> bool:
    """Whether children of these types can hold no tensor (numbers, strings, ...)."""
    kinds = T.kinds
    return all(kinds.get(tp) == Kind.NONE for tp in types)


def tensor_children(T: TorchTypes, value: Any, kind: str) -> list[Any] | None:
    """All children of a list/tuple/dict whose children are all plain ``Tensor``s or
    ``Parameter``s (a batch list, a dict of activations), in one C-level pass, no paths.
    Check :func:`child_types` first; None when the container cannot be read."""
    try:
        return list(_values(value, kind))
    except Exception:
        return None


def structure(walked: Walk) -> Spec:
    """The shape of what a walk entered, without references to user objects: one
    (parent index, key, kind) per composite node, for :func:`signature`. Nodes under a key that
    is not a plain str/int (it could keep an object alive) are left out, with their subtrees."""
    kept: dict[int, int] = {}
    spec: list[tuple[int, Any, str]] = []
    for index, node in enumerate(walked.nodes[:SIGNATURE_NODES]):
        if node.parent < 0:
            parent = -1
        else:
            parent = kept.get(node.parent, -2)
            if parent == -2 or type(node.key) not in (str, int):
                continue
        kept[index] = len(spec)
        spec.append((parent, node.key, node.kind))
    return tuple(spec)


def signature(T: TorchTypes, value: Any, spec: Spec) -> tuple[Any, ...] | None:
    """Changes when a composite the walk entered gains, loses or replaces children: (id, size,
    id of the last child) per node, each found again from ``value`` by its key: O(nodes)."""
    if not spec:
        return None
    if len(spec) == 1:  # the common watch: one container or object, looked at O(1)
        kind = spec[0][2]
        try:
            return ((id(value), _size(value, kind), _last_id(value, kind)),)
        except Exception:
            return ("changed",)
    found: list[Any] = []
    out: list[Any] = []
    try:
        for parent, key, kind in spec:
            current = value if parent < 0 else child_at(spec[parent][2], found[parent], key)
            found.append(current)
            out.append((id(current), _size(current, kind), _last_id(current, kind)))
    except Exception:
        return ("changed",)
    return tuple(out)


def child_at(kind: str, parent: Any, key: Any) -> Any:
    if kind == Kind.MAPPING:
        return dict.__getitem__(parent, key)
    if kind == Kind.SEQUENCE or kind == Kind.NAMEDTUPLE:
        if isinstance(parent, tuple):
            return tuple.__getitem__(parent, key)
        return list.__getitem__(parent, key)
    if kind == Kind.USERDICT:
        return dict.__getitem__(_userdict_data(parent), key)
    own = instance_dict(parent)
    if own is not None and key in own:
        return own[key]
    for name, member in _layout(type(parent))[1]:
        if name == key:
            return member.__get__(parent)
    raise KeyError(key)
