"""What a ``torch.nn.Module`` holds: submodules, parameters and buffers each once (eager
modules read column-wise, TorchScript and lazy or packed parameters the careful way).
"""

from __future__ import annotations

import operator
from itertools import chain, repeat
from operator import attrgetter, is_
from typing import Any, NamedTuple

from .kinds import (
    TorchTypes,
    _class_attr,
    _mro_of,
    _packing_types,
    _type_dict,
    instance_dict,
    is_uninitialized,
)


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


class LooseTensor(NamedTuple):
    """A tensor a module holds as a plain attribute (``self.pe = pe`` where
    ``self.register_buffer("pe", pe)`` was meant): ``module.to()`` leaves it where it is."""

    name: str  # qualified, as ``module.get_submodule`` names the owner: ``pos.pe``
    tensor: Any
    owner: Any  # the submodule whose ``__dict__`` holds it
    key: str


_dict_of = attrgetter("__dict__")


def mixes_with_any_device(tensor: Any) -> bool:
    """A 0-dim cpu tensor: torch's ops take it beside tensors of any device (AveragedModel's
    ``n_averaged``, a step counter), so where it sits is never a device mix."""
    return bool(tensor.device.type == "cpu" and tensor.dim() == 0)


#: torch's own module classes -> the fewest ``__dict__`` entries an instance seen without a
#: plain tensor had: an instance with no more is not looked through (torch's own settings
#: hold no tensor; one a user adds comes as one more entry, ``lin.mask = torch.ones(3)``)
_TORCH_SIZE: dict[type, int] = {}


def plain_tensor_attributes(T: TorchTypes, module: Any, submodules: list[Any]) -> list[LooseTensor]:
    """The tensors ``module`` and its ``submodules`` hold as plain instance attributes. Left
    out: what a forward pre-hook makes again from registered tensors before every call
    (``torch.nn.utils.prune``'s ``weight``, the old ``weight_norm``/``spectral_norm``): torch
    keeps those as plain attributes on purpose. Types are compared, never ``isinstance`` on a
    value (a proxy's ``__class__`` is user code). Every value of every ``__dict__`` is looked
    at (about 50 ns each) but for instances of torch's own classes no bigger than usual."""
    tensor_type = T.Tensor
    try:
        dicts = list(map(_dict_of, submodules))
        usual = map(_TORCH_SIZE.get, map(type, submodules), repeat(-1))
        settled = list(map(operator.le, map(len, dicts), usual))
        looked = [own for own, done in zip(dicts, settled, strict=True) if not done]
        types = set(map(type, chain.from_iterable(map(dict.values, looked))))
    except Exception:
        return []  # TorchScript, __slots__: nothing read
    if not any(issubclass(tp, tensor_type) for tp in types):
        _learn_torch_keys(submodules, dicts, settled)
        return []
    names = _qualified_names(module)
    found: list[LooseTensor] = []
    for sub, own in zip(submodules, dicts, strict=True):
        remade = _remade_by_hooks(own)
        prefix = names.get(id(sub), "")
        for key, value in list(own.items()):
            if issubclass(type(value), tensor_type) and key not in remade and type(key) is str:
                found.append(LooseTensor(f"{prefix}.{key}" if prefix else key, value, sub, key))
    return found


def _learn_torch_keys(submodules: list[Any], dicts: list[Any], settled: list[bool]) -> None:
    """Remember the sizes of torch's own classes' instances just seen without a plain tensor."""
    for sub, own, done in zip(submodules, dicts, settled, strict=True):
        if done:
            continue
        cls = type(sub)
        where = _type_dict(cls).get("__module__")
        if isinstance(where, str) and where.startswith("torch."):
            _TORCH_SIZE[cls] = min(len(own), _TORCH_SIZE.get(cls, len(own)))


def _qualified_names(module: Any) -> dict[int, str]:
    """{id(submodule): its qualified name} through the ``_modules`` dicts (never a user's
    ``named_modules`` override); the first name of a submodule held twice."""
    names = {id(module): ""}
    stack = [(module, "")]
    while stack:
        current, prefix = stack.pop()
        children = getattr(current, "_modules", None)
        if type(children) is not dict:
            continue
        for key, child in children.items():
            if child is not None and id(child) not in names:
                names[id(child)] = f"{prefix}{key}"
                stack.append((child, f"{prefix}{key}."))
    return names


def _remade_by_hooks(own: dict[str, Any]) -> set[str]:
    """Attribute names a forward pre-hook of this module computes again before each call."""
    hooks = own.get("_forward_pre_hooks")
    if not isinstance(hooks, dict):
        return set()
    remade: set[str] = set()
    for hook in list(hooks.values()):
        where = getattr(type(hook), "__module__", "")
        if not (isinstance(where, str) and where.startswith("torch.")):
            continue  # only torch's own hooks are known to remake their tensor
        own_hook = instance_dict(hook) or {}
        for attr in ("_tensor_name", "name"):
            value = own_hook.get(attr)
            if isinstance(value, str):
                remade.add(value)
    return remade
