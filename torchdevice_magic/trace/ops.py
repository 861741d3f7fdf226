"""What the recorder reads of an aten op: its kind (copy, host read, index), its name, its
tensor inputs and their devices, and the mixes of devices torch accepts by design.

Importing this never imports torch: :func:`bind_torch` binds ``torch.Tensor`` when the mode
classes are built (:func:`~torchdevice_magic.trace.modes.mode_classes`), before any op is seen.
"""

from __future__ import annotations

import sys
from typing import Any

# kinds of ops (cached per OpOverload by the recorder); PLAIN is falsy so the hot path can test
# "anything to note?" with one truth test
PLAIN, COPY, HOST_READ, INDEX, INDEX_PUT = 0, 1, 2, 3, 4

#: containers an op takes tensors in (``torch.cat([a, b])``, ``x[idx]``)
SEQUENCES = (list, tuple)

#: the name a host read is shown under, per aten base name
READ_NAMES = {
    "_local_scalar_dense": ".item()",
    "item": ".item()",
    "equal": "torch.equal",
    "nonzero": "nonzero",
    "masked_select": "masked_select",
    "index": "boolean mask",
    "_unique2": "unique",
    "_unique": "unique",
    "unique_dim": "unique",
    "unique_consecutive": "unique_consecutive",
    "repeat_interleave": "repeat_interleave",
    "bincount": "bincount",
    "one_hot": "one_hot",
}

_tensor_class: Any = None


def bind_torch() -> Any:
    """Bind ``torch.Tensor`` for the helpers here (torch is imported by then); return it."""
    global _tensor_class
    if _tensor_class is None:
        _tensor_class = sys.modules["torch"].Tensor
    return _tensor_class


def classify(func: Any) -> int:
    """The kind of an aten op: COPY, HOST_READ, INDEX, INDEX_PUT or PLAIN."""
    torch = sys.modules["torch"]
    name = func.__name__  # "add.Tensor"
    base = name.partition(".")[0]
    if base in ("_to_copy", "copy_", "_copy_from", "_copy_from_and_resize"):
        return COPY
    if base == "index":
        return INDEX
    if base in ("index_put", "index_put_", "_index_put_impl_"):
        return INDEX_PUT
    tags = getattr(func, "tags", ())
    if (
        torch.Tag.data_dependent_output in tags
        or torch.Tag.dynamic_output_shape in tags
        or base == "equal"
    ):
        return HOST_READ
    return PLAIN


def op_name(func: Any) -> str:
    name = getattr(func, "__name__", str(func))
    return name.removesuffix(".default")


def read_label(func: Any) -> str | None:
    """The name a host read made by ``func`` is shown under, when it has one of its own."""
    return READ_NAMES.get(func.__name__.partition(".")[0])


def tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The tensor inputs, those inside a list or tuple argument included."""
    found = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, _tensor_class):
            found.append(a)
        elif isinstance(a, SEQUENCES):
            found.extend(b for b in a if isinstance(b, _tensor_class))
    return found


def mixed_devices(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """The distinct devices of the tensor inputs, as strings (only called when they differ)."""
    seen: dict[str, None] = {}
    for t in tensors(args, kwargs):
        seen.setdefault(str(t.device))
    return list(seen)


def benign_mix(kind: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Mixes torch accepts by design: 0-dim cpu tensors beside accelerator tensors (scalars),
    and cpu index tensors indexing an accelerator tensor (``x[idx]``, ``x[idx] = v``)."""
    found = tensors(args, kwargs)
    devices = {str(t.device) for t in found if not (t.device.type == "cpu" and t.dim() == 0)}
    if len(devices) < 2:
        return True
    if kind not in (INDEX, INDEX_PUT) or len(args) < 2 or not isinstance(args[0], _tensor_class):
        return False
    own = str(args[0].device)
    indices = args[1] if isinstance(args[1], SEQUENCES) else ()
    if any(isinstance(i, _tensor_class) and str(i.device) not in (own, "cpu") for i in indices):
        return False
    rest = tensors(args[2:], kwargs)  # index_put's values: its own device, or a cpu scalar
    return all(str(t.device) == own or (t.device.type == "cpu" and t.dim() == 0) for t in rest)


def boolean_index(args: tuple[Any, ...]) -> bool:
    """``x[mask]``: indexing by a boolean (or uint8) tensor, a read of the mask's values."""
    if len(args) < 2 or not isinstance(args[1], SEQUENCES):
        return False
    torch = sys.modules["torch"]
    return any(
        isinstance(i, _tensor_class) and i.dtype in (torch.bool, torch.uint8) for i in args[1]
    )


def output_device(out: Any) -> Any:
    """The device of an op's (first) tensor output, or None."""
    if isinstance(out, _tensor_class):
        return out.device
    if isinstance(out, SEQUENCES):
        for o in out:
            if isinstance(o, _tensor_class):
                return o.device
    return None


#: aten ops that read their tensor inputs' sizes, strides or devices and never their values: a
#: meta tensor beside a real one there loses nothing (``x.resize_as_(w)``, ``x.is_same_size(w)``).
#: ``view_as``, ``expand_as``, ``reshape_as``, ``type_as``, ``new_empty`` and the ``*_like``
#: factories reach dispatch as ops on one tensor (``view``, ``expand``...), so never mix there.
SHAPE_ONLY = frozenset(
    {
        "is_same_size",
        "resize_as",
        "resize_as_",
        "resize_as_sparse_",
        "_resize_output_",
        "_has_same_storage_numel",
        "_has_compatible_shallow_copy_type",
        "is_set_to",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
    }
)


def shape_only(func: Any) -> bool:
    """The op reads only its inputs' shapes, strides or devices (:data:`SHAPE_ONLY`)."""
    return func.__name__.partition(".")[0] in SHAPE_ONLY


def meta_mix(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """The op computes with a meta tensor beside one holding data: its result (if it returns
    one rather than raising) is a real tensor of numbers computed from nothing, or a meta
    tensor that drops the real one's values. A 0-dim cpu tensor is a scalar beside any device
    (torch reads it as a number), and shape-only ops read no values: neither is a mix."""
    if shape_only(func):
        return False
    meta = real = False
    for t in tensors(args, kwargs):
        if t.is_meta:
            meta = True
        elif not (t.device.type == "cpu" and t.dim() == 0):
            real = True
    return meta and real


def real_device(devices: list[str] | tuple[str, ...]) -> str:
    """The device holding data in a meta/real mix (the first that is not meta)."""
    return next((d for d in devices if d != "meta"), "cpu")
