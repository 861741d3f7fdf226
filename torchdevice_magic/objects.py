"""What kinds of objects hold tensors, and the ONE read-only walker of user objects.

Pure leaf: no IPython, no widgets, never imports torch (``TorchTypes.current()`` is None until
the user has imported it). Every other part (scanner, move, diagnose, memory) asks this module
what an object is and what it holds; nothing else walks user objects.

Rules kept here (the reviewers check them): children are read only through ``__dict__`` /
``__slots__`` member descriptors, base-class ``dict``/``list``/``tuple`` methods and
``UserDict.data``; never through properties, ``__getattr__``, overridden ``__iter__``/
``items``, iterators or generators; never ``repr``/``str`` of a tensor. Depth and element
counts are bounded. A hostile object is skipped (``Walk.skipped``), never fatal.

API (for the scanner and the mover)
-----------------------------------
``TorchTypes.current() -> TorchTypes | None``
    torch's classes, looked up once per torch module (None if torch is not imported).
    ``T.forget_types()`` after a walk (the scanner does it after each scan): the per-type
    caches must not keep a user's class (and its class attributes) alive.
``kind_of(T, value) -> str``
    one of the ``Kind`` constants; cached per type (O(1) for the common types).
    Leaves: TENSOR, PARAMETER, MODULE, OPTIMIZER. Composites (walked): MAPPING (dict and its
    subclasses: OrderedDict, defaultdict, ModelOutput-style), USERDICT (``UserDict``,
    BatchEncoding-like; children from ``.data``), SEQUENCE (list, tuple, structseq),
    NAMEDTUPLE, DATACLASS, OBJECT (any instance with ``__dict__``/``__slots__``), DATALOADER
    (only ``.dataset`` is followed), DATASET, GRADSCALER, DISTRIBUTION. NONE: atomic or never
    walked (numbers, strings, classes, functions, modules, generators, iterators, exceptions).
``children(T, value, kind) -> list[(key, child)]``
    the edges of one composite, read-only. ``key`` is what ``set_child``/``rebuilt`` take: a dict
    key (MAPPING, USERDICT), an int index (SEQUENCE, NAMEDTUPLE) or an attribute name (the
    attribute kinds).
``label(kind, key, value_type) -> str``
    the path step shown to users: ``['x']``, ``[3]``, ``.field``.
``walk(T, value, path, max_depth=3, cap=100_000) -> Walk``
    ``Walk.leaves``: ``Leaf(path, value, kind, node, key)`` for every tensor/parameter/module/
    optimizer reached (``node`` indexes ``Walk.nodes``, the composite holding it under ``key``);
    ``Walk.nodes``: ``Node(path, value, kind, parent, key)`` (node 0 is the root when it is a
    composite; ``parent`` -1 for the root); ``truncated``, ``visited``, ``skipped`` ((path,
    reason) of objects that could not be read). Cycles and shared sub-containers are entered
    once (further edges to them: ``Walk.aliases``, (node index, key, composite)).
    DATALOADER/DATASET edges cost no depth (loader -> Subset -> TensorDataset -> tensors).
``is_mutable(value, kind) -> bool``; ``set_child(value, kind, key, child) -> previous child``
    put a moved child back in place (list item, dict item through ``dict.__setitem__``,
    ``UserDict.data`` item, instance ``__dict__`` entry or slot): no setters, no properties.
``rebuilt(value, kind, {key: child}) -> new object``
    immutable composites (tuple, namedtuple via ``_make``, frozen dataclass via a shallow copy
    + ``object.__setattr__``) rebuilt with the replaced children; bind the result in the parent.
``size(value, kind)``; ``instance_dict(value)`` (the ``__dict__`` through the type's own
descriptor); ``child_types(value, kind) -> set | None``; ``holds_nothing(T, types)``;
``tensor_children(T, value, kind) -> list | None``
    one C-level pass over a big list/tuple/dict: the types of its children (a list of 200,000
    floats is decided without walking it), and every child at once when all are plain tensors.
``structure(walk) -> spec``; ``signature(T, value, spec) -> tuple | None``
    cheap "did this structure change?" key: (id, size, id of last child) of each composite
    node, found again from the root by the node keys (O(nodes), not O(elements)): a list that
    was empty when first seen and is appended to later has a new signature. ``spec`` holds no
    reference to user objects (the scan keeps it between cells).
Storage identity
    ``add_storages(T, tensor, device, into: Storages) -> int`` adds ``{key: (device, nbytes)}`` for every
    storage the tensor holds and returns the bytes they would need. Key ``(device, data_ptr)``;
    where ``data_ptr`` is 0 (meta, empty storages, out-of-tree/simulated devices): the wrapped
    inner tensors' storages (``__tensor_flatten__`` or tensors in the instance ``__dict__``)
    keyed under the outer device, else ``(device, "impl", StorageImpl address)``. Sparse,
    nested, quantized and fake tensors are handled; meta bytes count 0 in totals ("would
    need" = nbytes).
Modules
    ``module_parts(T, module) -> ModuleParts`` (submodules, parameters, buffers, extra
    (label, tensor) pairs: packed weights of dynamic-quantized modules) for eager and
    TorchScript modules; ``is_uninitialized(T, tensor)`` for lazy parameters;
    ``accelerate_dispatch(T, name, submodules) -> Dispatch | None`` for accelerate-dispatched models (the
    real weights in ``weights_map`` with their devices, and the one-line reason not to move).
Optimizers
    ``optimizer_state_tensors(T, optimizer) -> list[(param, key, tensor)]``: every tensor in the
    per-parameter state, also inside lists/tuples/dicts (LBFGS ``old_dirs``...).
"""

from __future__ import annotations

import copy
import sys
import types
from collections import UserDict
from collections.abc import Callable
from functools import partial
from itertools import chain, repeat
from operator import attrgetter, is_
from typing import Any, NamedTuple

#: Composites nested deeper than this are not walked (a nested batch is rarely deeper).
MAX_DEPTH = 3
#: The hard safety cap on elements visited in one walk; hitting it is reported.
ELEMENT_CAP = 100_000
#: The element cap of a walk that starts at a plain object (its graph can be large)
OBJECT_CAP = 10_000
#: Above this many nodes a structure's signature looks at the root only.
SIGNATURE_NODES = 512


class Kind:
    TENSOR = "tensor"
    PARAMETER = "parameter"
    MODULE = "module"
    OPTIMIZER = "optimizer"
    MAPPING = "mapping"
    USERDICT = "userdict"
    SEQUENCE = "sequence"
    NAMEDTUPLE = "namedtuple"
    DATACLASS = "dataclass"
    OBJECT = "object"
    DATALOADER = "dataloader"
    DATASET = "dataset"
    GRADSCALER = "gradscaler"
    DISTRIBUTION = "distribution"
    NONE = "none"


LEAVES = frozenset({Kind.TENSOR, Kind.PARAMETER, Kind.MODULE, Kind.OPTIMIZER})
CONTAINERS = frozenset({Kind.MAPPING, Kind.USERDICT, Kind.SEQUENCE, Kind.NAMEDTUPLE})
ATTRIBUTE_KINDS = frozenset(
    {Kind.DATACLASS, Kind.OBJECT, Kind.DATALOADER, Kind.DATASET, Kind.GRADSCALER}
    | {Kind.DISTRIBUTION}
)
COMPOSITES = CONTAINERS | ATTRIBUTE_KINDS
#: edges out of these cost no depth (a loader's dataset, a Subset's dataset)
_PASS_THROUGH = frozenset({Kind.DATALOADER, Kind.DATASET})

_ATOMIC_TYPES = frozenset(
    {int, float, complex, bool, str, bytes, bytearray, type(None), range, slice, memoryview}
    | {type(...), type(NotImplemented)}
)
_NEVER_WALKED = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.BuiltinMethodType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
    types.MethodWrapperType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    property,
    staticmethod,
    classmethod,
    BaseException,
)

#: objects of these packages are machinery, not user data (a user object may hold the shell)
_FOREIGN_MODULES = (
    "IPython.", "ipykernel.", "ipywidgets.", "traitlets.", "zmq.", "tornado.", "asyncio.",
    "threading", "logging", "jupyter_client.", "torchdevice_magic.", "concurrent.",
)  # fmt: skip

_mro_of = type.__dict__["__mro__"].__get__
_type_dict = type.__dict__["__dict__"].__get__


class TorchTypes:
    """torch's classes the walker and the scanner need, looked up once per torch module."""

    __slots__ = (
        "torch", "Tensor", "Parameter", "Module", "Optimizer", "UntypedStorage", "Size",
        "kinds", "_leaf_types", "special", "Uninitialized", "ScriptModule", "device_names",
        "dtype_names", "_seed",
    )  # fmt: skip

    _cache: tuple[Any, TorchTypes] | None = None

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.Tensor = torch.Tensor
        self.Parameter = torch.nn.Parameter
        self.Module = torch.nn.Module
        self.Optimizer = torch.optim.Optimizer
        self.UntypedStorage = torch.UntypedStorage
        self.Size = torch.Size
        parameter_module = sys.modules.get("torch.nn.parameter")
        self.Uninitialized = getattr(parameter_module, "UninitializedTensorMixin", None)
        jit = sys.modules.get("torch.jit._script")
        self.ScriptModule = getattr(jit, "ScriptModule", None)
        # classes recognised by name in the MRO (only those already imported by the user)
        special: dict[Any, str] = {}
        data = sys.modules.get("torch.utils.data.dataloader")
        if data is not None:
            special[getattr(data, "DataLoader", None)] = Kind.DATALOADER
        dataset = sys.modules.get("torch.utils.data.dataset")
        if dataset is not None:
            special[getattr(dataset, "Dataset", None)] = Kind.DATASET
        for module_name in ("torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler"):
            module = sys.modules.get(module_name)
            if module is not None:
                special[getattr(module, "GradScaler", None)] = Kind.GRADSCALER
        dist = sys.modules.get("torch.distributions.distribution")
        if dist is not None:
            special[getattr(dist, "Distribution", None)] = Kind.DISTRIBUTION
        special.pop(None, None)
        self.special = special
        self.kinds: dict[type, str] = {
            self.Tensor: Kind.TENSOR,
            self.Parameter: Kind.PARAMETER,
            list: Kind.SEQUENCE,
            tuple: Kind.SEQUENCE,
            dict: Kind.MAPPING,
            self.Size: Kind.NONE,
        }
        self.kinds.update(dict.fromkeys(_ATOMIC_TYPES, Kind.NONE))
        self._seed = dict(self.kinds)
        self.device_names: dict[Any, str] = {}
        self.dtype_names: dict[Any, str] = {}

    def forget_types(self) -> None:
        """Drop the per-type caches filled while walking (the scanner calls this after each
        scan): a class a user deleted or redefined -- and tensors its class attributes hold --
        must not stay alive because we once classified one of its instances."""
        if len(self.kinds) != len(self._seed):
            self.kinds = dict(self._seed)
        _layouts.clear()
        _packing_types.clear()

    @classmethod
    def current(cls) -> TorchTypes | None:
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "Tensor") or not hasattr(torch, "optim"):
            return None
        cached = cls._cache
        if cached is not None and cached[0] is torch:
            return cached[1]
        T = cls(torch)
        cls._cache = (torch, T)
        return T

    def device_name(self, device: Any) -> str:
        name = self.device_names.get(device)
        if name is None:
            name = self.device_names[device] = str(device)
        return name

    def dtype_name(self, dtype: Any) -> str:
        name = self.dtype_names.get(dtype)
        if name is None:
            name = self.dtype_names[dtype] = str(dtype).removeprefix("torch.")
        return name


# --------------------------------------------------------------------------------------------
# What an object is


def kind_of(T: TorchTypes, value: Any) -> str:
    tp = type(value)
    kind = T.kinds.get(tp)
    if kind is None:
        kind = T.kinds[tp] = _classify(T, tp)
    return kind


def kind_of_type(T: TorchTypes, tp: type) -> str:
    kind = T.kinds.get(tp)
    if kind is None:
        kind = T.kinds[tp] = _classify(T, tp)
    return kind


def _classify(T: TorchTypes, tp: type) -> str:
    try:
        mro = _mro_of(tp)
    except Exception:
        return Kind.NONE
    if T.Tensor in mro:
        return Kind.PARAMETER if T.Parameter in mro else Kind.TENSOR
    if T.Module in mro:
        return Kind.MODULE
    if T.Optimizer in mro:
        return Kind.OPTIMIZER
    for base in mro:
        special = T.special.get(base)
        if special is not None:
            return special
    try:
        if issubclass(tp, _NEVER_WALKED) or tp in _ATOMIC_TYPES:
            return Kind.NONE
    except Exception:
        return Kind.NONE
    if dict in mro:
        return Kind.MAPPING
    if UserDict in mro:
        return Kind.USERDICT
    if tuple in mro:
        if T.Size in mro:
            return Kind.NONE
        fields = _class_attr(mro, "_fields")
        if isinstance(fields, tuple) and all(type(f) is str for f in fields):
            return Kind.NAMEDTUPLE
        return Kind.SEQUENCE
    if list in mro:
        return Kind.SEQUENCE
    module = _type_dict(tp).get("__module__")
    if isinstance(module, str) and module.startswith(_FOREIGN_MODULES):
        return Kind.NONE  # the shell, widgets, event loops: never user data
    if _class_attr(mro, "__dataclass_fields__") is not None:
        return Kind.DATACLASS
    dict_descriptor, slots = _layout(tp)
    if dict_descriptor is not None or slots:
        return Kind.OBJECT
    return Kind.NONE


def _class_attr(mro: tuple[type, ...], name: str) -> Any:
    """A class attribute found in the MRO's own dicts (no descriptors run, no metaclass)."""
    for cls in mro:
        try:
            namespace = _type_dict(cls)
        except Exception:
            continue
        if name in namespace:
            return namespace[name]
    return None


_layouts: dict[type, tuple[Any, tuple[tuple[str, Any], ...]]] = {}


def _layout(tp: type) -> tuple[Any, tuple[tuple[str, Any], ...]]:
    """(the ``__dict__`` getset descriptor or None, ((slot name, member descriptor), ...))."""
    cached = _layouts.get(tp)
    if cached is not None:
        return cached
    dict_descriptor = None
    slots: list[tuple[str, Any]] = []
    seen: set[str] = set()
    try:
        for cls in _mro_of(tp):
            namespace = _type_dict(cls)
            candidate = namespace.get("__dict__")
            if dict_descriptor is None and type(candidate) is types.GetSetDescriptorType:
                dict_descriptor = candidate
            own = namespace.get("__slots__")
            if own is None:
                continue
            names = (own,) if isinstance(own, str) else own
            for name in names if isinstance(names, (tuple, list)) else ():
                member = namespace.get(name)
                if type(member) is types.MemberDescriptorType and name not in seen:
                    seen.add(name)
                    slots.append((name, member))
    except Exception:
        dict_descriptor, slots = None, []
    result = (dict_descriptor, tuple(slots))
    _layouts[tp] = result
    return result


def instance_dict(value: Any) -> dict[Any, Any] | None:
    """The instance ``__dict__`` read through the type's own descriptor (never a property)."""
    descriptor = _layout(type(value))[0]
    if descriptor is None:
        return None
    try:
        found = descriptor.__get__(value)
    except Exception:
        return None
    return found if type(found) is dict else None


def _userdict_data(value: Any) -> dict[Any, Any]:
    """A UserDict's ``data`` dict, from the instance dict (raises if it has none)."""
    own = instance_dict(value)
    data = own.get("data") if own is not None else None
    if not isinstance(data, dict):
        raise TypeError("a UserDict without a data dict")
    return data


def is_uninitialized(T: TorchTypes, tensor: Any) -> bool:
    """A lazy module's parameter or buffer that has no shape or storage yet."""
    mixin = T.Uninitialized
    return mixin is not None and mixin in _mro_of(type(tensor))


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
            current = value if parent < 0 else _child(spec[parent][2], found[parent], key)
            found.append(current)
            out.append((id(current), _size(current, kind), _last_id(current, kind)))
    except Exception:
        return ("changed",)
    return tuple(out)


def _child(kind: str, parent: Any, key: Any) -> Any:
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


# --------------------------------------------------------------------------------------------
# Putting moved children back (for the mover)


def is_mutable(value: Any, kind: str) -> bool:
    if kind == Kind.SEQUENCE:
        return isinstance(value, list)
    if kind == Kind.NAMEDTUPLE:
        return False
    if kind == Kind.DATACLASS:
        params = _class_attr(_mro_of(type(value)), "__dataclass_params__")
        return not getattr(params, "frozen", False)
    return kind in COMPOSITES


def set_child(value: Any, kind: str, key: Any, child: Any) -> Any:
    """Put ``child`` at ``key`` in a mutable composite, in place; return what was there."""
    if kind == Kind.MAPPING:
        old = dict.__getitem__(value, key)
        dict.__setitem__(value, key, child)
        if type(value) is not dict and type(key) is str:
            # ModelOutput-style (an OrderedDict that is also a dataclass): the same child is
            # an attribute too; keep ``out.logits`` and ``out["logits"]`` the same object
            own = instance_dict(value)
            if own is not None and own.get(key) is old:
                own[key] = child
        return old
    if kind == Kind.SEQUENCE:
        old = list.__getitem__(value, key)
        list.__setitem__(value, key, child)
        return old
    if kind == Kind.USERDICT:
        data = _userdict_data(value)
        old = dict.__getitem__(data, key)
        dict.__setitem__(data, key, child)
        return old
    own = instance_dict(value)
    if own is not None and key in own:
        old = own[key]
        own[key] = child
        return old
    for name, member in _layout(type(value))[1]:
        if name == key:
            old = member.__get__(value)
            member.__set__(value, child)
            return old
    raise KeyError(key)


def rebuilt(value: Any, kind: str, replacements: dict[Any, Any]) -> Any:
    """A new immutable composite with ``replacements`` ({key: child}) in place."""
    if kind in (Kind.SEQUENCE, Kind.NAMEDTUPLE) and isinstance(value, tuple):
        items = [replacements.get(i, item) for i, item in enumerate(tuple.__iter__(value))]
        if kind == Kind.NAMEDTUPLE:
            # a namedtuple class (checked by kind_of); mypy sees only tuple
            return type(value)._make(items)  # type: ignore[attr-defined]
        if type(value) is tuple:
            return tuple(items)
        return type(value)(items)
    if kind == Kind.DATACLASS:
        new = copy.copy(value)
        for key, child in replacements.items():
            object.__setattr__(new, key, child)
        return new
    raise TypeError(f"{type(value).__name__} is not an immutable composite")


# --------------------------------------------------------------------------------------------
# Storage identity


StorageKey = tuple[Any, ...]
#: storage key -> (device, nbytes the storage holds, or would need on meta)
Storages = dict[StorageKey, tuple[str, int]]


def add_storages(T: TorchTypes, tensor: Any, device: str, into: Storages) -> int:
    """Add ``{storage key: (device, nbytes)}`` for the tensor's storage(s) to ``into``;
    return the bytes they would need (what meta storages would take)."""
    try:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        nbytes = storage.nbytes()
    except Exception:
        return _unusual_storages(T, tensor, device, into)
    if pointer:
        into[(device, pointer)] = (device, nbytes)
        return nbytes
    if device != "meta":  # a wrapper subclass (out-of-tree device): key by its wrapped data
        inner = inner_tensors(T, tensor)
        if inner:
            return sum(add_storages(T, part, device, into) for part in inner)
    # no data pointer (meta, empty): the StorageImpl address identifies the storage
    into[(device, "impl", storage._cdata)] = (device, nbytes)
    return nbytes


def inner_tensors(T: TorchTypes, tensor: Any) -> list[Any]:
    """The tensors a wrapper subclass holds (``__tensor_flatten__`` names, else tensors in its
    instance ``__dict__``): where the data of a data_ptr-0 tensor really lives."""
    found: list[Any] = []
    try:
        flatten = _class_attr(_mro_of(type(tensor)), "__tensor_flatten__")
        if flatten is not None:
            names, _ = tensor.__tensor_flatten__()
            found = [getattr(tensor, name) for name in names]
        else:
            own = instance_dict(tensor)
            if own:
                found = [v for v in own.values() if isinstance(v, T.Tensor)]
    except Exception:
        return []
    return [t for t in found if isinstance(t, T.Tensor) and t is not tensor]


def _unusual_storages(T: TorchTypes, tensor: Any, device: str, into: Storages) -> int:
    """Sparse, nested, wrapper-subclass and fake tensors have no plain storage."""
    inner: list[Any] = []
    try:
        layout = str(tensor.layout)
    except Exception:
        layout = ""
    try:
        if layout == "torch.sparse_coo":
            inner = [tensor._indices(), tensor._values()]
        elif layout in ("torch.sparse_csr", "torch.sparse_bsr"):
            inner = [tensor.crow_indices(), tensor.col_indices(), tensor.values()]
        elif layout in ("torch.sparse_csc", "torch.sparse_bsc"):
            inner = [tensor.ccol_indices(), tensor.row_indices(), tensor.values()]
        elif getattr(tensor, "is_nested", False) is True:
            inner = [tensor.values()]
        else:
            inner = inner_tensors(T, tensor)
    except Exception:
        inner = []
    total = 0
    for part in inner:
        if part is not tensor:
            total += add_storages(T, part, device, into)
    if inner:
        return total
    # Fake and other storage-less tensors: count what they would need, under a private key.
    try:
        nbytes = int(tensor.numel()) * int(tensor.element_size())
    except Exception:
        nbytes = 0
    into[(device, "object", id(tensor))] = (device, nbytes)
    return nbytes


# --------------------------------------------------------------------------------------------
# Modules


class ModuleParts(NamedTuple):
    submodules: list[Any]
    params: list[Any]  # each Parameter once (tied weights once); None entries dropped
    buffers: list[Any]
    extra: list[tuple[str, Any]]  # (label, tensor) held outside _parameters/_buffers
    extra_keys: list[Any]  # a stable identity per extra tensor (packed weights are unpacked)
    uninitialized: list[str]  # qualified names of lazy parameters / buffers
    #: fast path only (eager modules): every ``_modules`` value of every submodule in order
    #: (None included), and every parameter then buffer as the dicts hold them (tied weights
    #: repeated, None left out) -- what a module's change signature is made of
    edges: list[Any] | None = None
    tensors: list[Any] | None = None
    raw_params: int = 0  # how many of ``tensors`` are parameters (the first ones)


_modules_of = attrgetter("_modules")


def _submodules_fast(module: Any) -> tuple[list[Any], list[Any]] | None:
    """The module and its submodules, each once, level by level in C-level passes (eager
    modules: ``_modules`` is a plain dict), and every ``_modules`` value met (None included);
    None for TorchScript and shared submodules."""
    try:
        submodules = [module]
        edges: list[Any] = []
        seen = {id(module)}
        level = [module]
        while level:
            found = list(chain.from_iterable(map(dict.values, map(_modules_of, level))))
            edges += found
            if any(map(is_, found, repeat(None))):  # ``register_module(name, None)``
                found = [child for child in found if child is not None]
            ids = set(map(id, found))
            if len(ids) != len(found) or not seen.isdisjoint(ids):
                return None  # a submodule held twice: the careful walk keeps the first
            seen |= ids
            submodules += found
            level = found
        return submodules, edges
    except Exception:
        return None


def module_parts(T: TorchTypes, module: Any) -> ModuleParts:
    """The module's parts, eager or TorchScript; raises for unreadable modules."""
    fast_walk = _submodules_fast(module)
    if fast_walk is not None:
        fast = _module_parts_fast(T, *fast_walk)
        if fast is not None:
            return fast
    submodules = [module]
    names = [""]
    seen = {id(module)}
    stack = [(module, "")]
    script = T.ScriptModule
    while stack:
        current, prefix = stack.pop()
        children_of = current._modules
        items = (
            dict.items(children_of)
            if isinstance(children_of, dict)
            else list(current.named_children())
            if script is not None and isinstance(current, script)
            else ()
        )
        for child_name, child in items:
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                qualified = f"{prefix}{child_name}"
                submodules.append(child)
                names.append(qualified)
                stack.append((child, qualified + "."))
    fast = _module_parts_fast(T, submodules)
    if fast is not None:
        return fast
    params: dict[int, Any] = {}
    buffers: dict[int, Any] = {}
    extra: list[tuple[str, Any]] = []
    extra_keys: list[Any] = []
    uninitialized: list[str] = []
    for sub, qualified in zip(submodules, names, strict=True):
        for own, into in ((sub._parameters, params), (sub._buffers, buffers)):
            # TorchScript: an OrderedDictWrapper over the C++ module (torch's own class)
            pairs = dict.items(own) if isinstance(own, dict) else own.items()
            for name, tensor in pairs:
                if tensor is None:
                    continue
                if T.Uninitialized is not None and is_uninitialized(T, tensor):
                    uninitialized.append(f"{qualified}.{name}" if qualified else name)
                    continue
                into.setdefault(id(tensor), tensor)
        own = instance_dict(sub)
        holder = own.get("_packed_params") if own else None
        if holder is not None and type(holder).__name__ == "ScriptObject":
            # dynamic-quantized Linear: the weights live packed in a C++ object; torch's own
            # LinearPackedParams._weight_bias() unpacks them (never a user method)
            sub_type = type(sub)
            unpack = _class_attr(_mro_of(sub_type), "_weight_bias")
            if callable(unpack) and str(sub_type.__module__).startswith("torch."):
                weight, bias = unpack(sub)
                prefix = f"{qualified}." if qualified else ""
                extra.append((f"{prefix}weight", weight))
                extra_keys.append(("packed", id(holder)))
                if bias is not None:
                    extra.append((f"{prefix}bias", bias))
                    extra_keys.append(None)
    return ModuleParts(
        submodules, list(params.values()), list(buffers.values()), extra, extra_keys,
        uninitialized,
    )  # fmt: skip


_params_of = attrgetter("_parameters")
_buffers_of = attrgetter("_buffers")
_packing_types: dict[type, bool] = {}


def _packs_weights(tp: type) -> bool:
    """torch's own packed-params modules (dynamic quantization) keep weights outside
    ``_parameters``."""
    packs = _packing_types.get(tp)
    if packs is None:
        module = _type_dict(tp).get("__module__")
        packs = _packing_types[tp] = (
            isinstance(module, str)
            and module.startswith("torch.")
            and _class_attr(_mro_of(tp), "_weight_bias") is not None
        )
    return packs


def _module_parts_fast(
    T: TorchTypes, submodules: list[Any], edges: list[Any] | None = None
) -> ModuleParts | None:
    """The common case (eager modules, plain dicts, no lazy or packed parameters) read
    column-wise; None sends the module down the careful path."""
    try:
        params = list(chain.from_iterable(map(dict.values, map(_params_of, submodules))))
        buffers = list(chain.from_iterable(map(dict.values, map(_buffers_of, submodules))))
    except TypeError:  # TorchScript's wrapper dicts
        return None
    types = set(map(type, params)) | set(map(type, buffers))
    raw_params = params
    if type(None) in types:
        types.discard(type(None))
        raw_params = [tensor for tensor in params if tensor is not None]
        buffers = [tensor for tensor in buffers if tensor is not None]
    tensors = raw_params + buffers
    mixin = T.Uninitialized
    if mixin is not None and any(mixin in _mro_of(tp) for tp in types):
        return None
    if any(map(_packs_weights, set(map(type, submodules)))):
        return None
    unique_params = dict(zip(map(id, raw_params), raw_params))  # noqa: B905 - tied once
    unique_buffers = dict(zip(map(id, buffers), buffers))  # noqa: B905
    return ModuleParts(
        submodules, list(unique_params.values()), list(unique_buffers.values()), [], [], [],
        edges, tensors, len(raw_params),
    )  # fmt: skip


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


# --------------------------------------------------------------------------------------------
# Optimizers


def optimizer_params(optimizer: Any) -> list[Any]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def optimizer_state_tensors(T: TorchTypes, optimizer: Any) -> list[tuple[Any, str, Any]]:
    """(parameter, state path, tensor) for every tensor in the per-parameter state, also
    inside lists, tuples and dicts (LBFGS keeps ``old_dirs``/``old_stps``/``ro`` lists)."""
    found: list[tuple[Any, str, Any]] = []
    state = optimizer.state
    for param, per_param in dict.items(state) if isinstance(state, dict) else ():
        if type(per_param) is not dict:
            continue
        for key, value in dict.items(per_param):
            value_kind = kind_of(T, value)
            if value_kind == Kind.TENSOR or value_kind == Kind.PARAMETER:
                found.append((param, str(key), value))
            elif value_kind in CONTAINERS:
                for leaf in walk(T, value, str(key), max_depth=2).leaves:
                    if leaf.kind == Kind.TENSOR or leaf.kind == Kind.PARAMETER:
                        found.append((param, leaf.path, leaf.value))
    return found


__all__ = [
    "Kind",
    "LEAVES",
    "CONTAINERS",
    "COMPOSITES",
    "ATTRIBUTE_KINDS",
    "MAX_DEPTH",
    "ELEMENT_CAP",
    "TorchTypes",
    "kind_of",
    "kind_of_type",
    "children",
    "label",
    "Leaf",
    "Node",
    "Walk",
    "walk",
    "signature",
    "structure",
    "tensor_children",
    "child_types",
    "holds_nothing",
    "size",
    "Spec",
    "StorageKey",
    "Storages",
    "is_mutable",
    "set_child",
    "rebuilt",
    "add_storages",
    "inner_tensors",
    "instance_dict",
    "is_uninitialized",
    "ModuleParts",
    "module_parts",
    "Dispatch",
    "accelerate_dispatch",
    "optimizer_params",
    "optimizer_state_tensors",
]
