"""What kinds of objects hold tensors, and the ONE read-only walker of user objects.

Pure leaf: no IPython, no widgets, never imports torch (``TorchTypes.current()`` is None until
the user has imported it). Every other part (scanner, move, diagnose, memory) asks this module
what an object is and what it holds; nothing else walks user objects.

Rules kept here (the reviewers check them): children are read only through ``__dict__`` /
``__slots__`` member descriptors, base-class ``dict``/``list``/``tuple`` methods and
``UserDict.data``; never through properties, ``__getattr__``, overridden ``__iter__``/
``items``, iterators or generators; never ``repr``/``str`` of a tensor. Depth and element
counts are bounded. A hostile object is skipped (``Walk.skipped``), never fatal.

Where things are (everything is importable from here: ``from torchdevice_magic.objects import
Kind, TorchTypes``; ``objects.walk(...)``): :mod:`.kinds` (``Kind``, ``TorchTypes``,
``kind_of``, ``instance_dict``), :mod:`.walker` (``children``, ``label``, ``walk``,
``structure``, ``signature``, the walk's limits), :mod:`.putback` (``is_mutable``,
``set_child``, ``rebuilt``), :mod:`.storage` (``add_storages``, ``StorageKey``,
``Storages``), :mod:`.modules` (``module_parts``), :mod:`.offload` (``accelerate_dispatch``, ``sharded_reason``),
:mod:`.optimizers` (``optimizer_params``, ``optimizer_state_tensors``).

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
    need" = nbytes). ``storage_identity(T, tensor) -> StorageIdentity(key, nbytes, storage)``
    is the same key for the one storage a tensor's data lives in (what a move groups aliases
    by); ``storage_key(device, storage)`` the rule itself. ``is_fake(T, tensor)``: torch's
    fake tensors (and functional wrappers of them), by class, never by a type's name.
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

from .kinds import (
    ATTRIBUTE_KINDS,
    COMPOSITES,
    CONTAINERS,
    LEAVES,
    Kind,
    TorchTypes,
    instance_dict,
    is_uninitialized,
    kind_of,
    kind_of_type,
)
from .modules import (
    LooseTensor,
    ModuleParts,
    mixes_with_any_device,
    module_parts,
    plain_tensor_attributes,
)
from .offload import Dispatch, accelerate_dispatch, sharded_reason
from .optimizers import optimizer_params, optimizer_state_tensors
from .putback import is_mutable, rebuilt, set_child
from .storage import (
    StorageIdentity,
    StorageKey,
    Storages,
    add_storages,
    functional_inner,
    inner_tensors,
    is_fake,
    storage_identity,
    storage_key,
    tensor_bytes,
)
from .storage import unusual_storages as unusual_storages
from .walker import (
    ELEMENT_CAP,
    LOADER_DATA_STAYS,
    MAX_DEPTH,
    Leaf,
    Node,
    Spec,
    Walk,
    child_types,
    children,
    cut_short_reason,
    holds_nothing,
    label,
    loader_above,
    signature,
    size,
    structure,
    tensor_children,
    walk,
)
from .walker import OBJECT_CAP as OBJECT_CAP
from .walker import SIGNATURE_NODES as SIGNATURE_NODES
from .walker import child_at as child_at

# (the ``X as X`` imports: importable from here, outside __all__: the walk's other limits, and
# the private helpers the scan's facts and the tests reach through this package)
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
    "loader_above",
    "cut_short_reason",
    "LOADER_DATA_STAYS",
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
    "StorageIdentity",
    "storage_identity",
    "storage_key",
    "tensor_bytes",
    "Storages",
    "is_mutable",
    "set_child",
    "rebuilt",
    "add_storages",
    "inner_tensors",
    "functional_inner",
    "is_fake",
    "instance_dict",
    "is_uninitialized",
    "LooseTensor",
    "ModuleParts",
    "mixes_with_any_device",
    "module_parts",
    "plain_tensor_attributes",
    "Dispatch",
    "accelerate_dispatch",
    "sharded_reason",
    "optimizer_params",
    "optimizer_state_tensors",
]
