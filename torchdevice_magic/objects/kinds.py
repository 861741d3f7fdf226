"""What an object is: the ``Kind`` vocabulary, torch's classes (``TorchTypes``) and how a
type is classified, read from the MRO's own dicts (no descriptors run, no metaclass), and an
instance's ``__dict__``/``__slots__`` read through the type's own descriptors.

The per-type caches (``TorchTypes.kinds``, ``_layouts``, ``_packing_types``) are emptied by
``TorchTypes.forget_types()`` after each scan.
"""

from __future__ import annotations

import sys
import types
from collections import UserDict
from typing import Any


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


_packing_types: dict[type, bool] = {}


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
