"""CUDA's device rules, for the simulated accelerator: which mixes of devices an operator accepts
and the message it raises otherwise, taken from PyTorch's sources (torch 2.13), with the simulated
device's own names where CUDA would print ``cuda``.

The families, and where PyTorch decides them:

- **Generated device check** (torchgen/dest/register_dispatch_key.py, ``gen_device_check``): every
  operator with a CUDA kernel whose ``native_functions.yaml`` entry does not say
  ``device_check: NoCheck`` checks its out arguments, then its positional tensor arguments, in
  order (aten/src/ATen/core/op_registration/adaption.h, ``check_and_update_common_device``; no
  exception for CPU scalars) and raises ``common_device_check_failure``'s message
  (aten/src/ATen/core/adaption.cpp): "Expected all tensors to be on the same device, but got mat2
  is on cpu, different from other tensors on cuda:0 (when checking argument in method
  wrapper_CUDA_mm)". The method is torchgen's wrapper name for the dispatch key; the simulated
  device dispatches on PrivateUse1, so it reads ``wrapper_PrivateUse1_mm``.
- **TensorIterator** (aten/src/ATen/TensorIterator.cpp, ``compute_types``): the operators marked
  ``device_check: NoCheck   # TensorIterator``. The common device is the first non-CPU operand's;
  a 0-dim CPU input joins it; anything else raises "Expected all tensors to be on the same device,
  but found at least two devices, cuda:0 and cpu!".
- **Advanced indexing** (aten/src/ATen/native/TensorAdvancedIndexing.cpp): ``x[idx]`` takes index
  tensors on the CPU or on x's device (``check_indices_on_cpu_or_selfdevice``, an IndexError
  "indices should be either on cpu or on the same device as the indexed tensor (cpu)" otherwise);
  ``index_put_`` moves its indices to self's device and a 0-dim value too (``_index_put_impl_``);
  with ``accumulate`` on CUDA a value elsewhere raises "expected device cuda:0 but got device cpu
  for value tensor", otherwise the TensorIterator message.
- **Convolution** (aten/src/ATen/native/Convolution.cpp, ``check_input_same_type_as_parameters``):
  "Input type (...) and weight type (...) should be the same", with "... or input should be a
  MKLDNN tensor and weight is a dense tensor" when the input's backend is mkldnn (a CPU input).
  The type names are ``TensorBase::toString()`` (aten/src/ATen/core/Tensor.cpp): dispatch key +
  scalar type + "Type", the PrivateUse1 backend's name for its key ("simdevFloatType"); Python's
  error translation (torch/csrc/Exceptions.cpp, ``processErrorMsg``) rewrites only the CPU and
  CUDA names of eight scalar types into the legacy "torch.FloatTensor" / "torch.cuda.FloatTensor".
- **Operators with only a CompositeExplicitAutograd kernel** (``embedding``...) have no check of
  their own on CUDA: their kernel calls other operators, which do. Here that kernel is run again
  on the same arguments when they mix devices, so the operator it reaches raises its own message.

RNNs (aten/src/ATen/native/RNN.h, ``check_attributes``) and DataParallel
(torch/nn/parallel/data_parallel.py) need nothing here: their checks run unchanged on this device.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

DISPATCH_KEY = "PrivateUse1"
SAME_DEVICE = "Expected all tensors to be on the same device"

#: torch/csrc/Exceptions.cpp's processErrorMsg: the type names it rewrites for Python
_LEGACY_SCALAR_TYPES = ("Byte", "Char", "Double", "Float", "Int", "Long", "Short", "Half")

#: the operators that copy between devices: their arguments may be on any two (the foreach
#: copies are ``device_check: NoCheck`` in native_functions.yaml and fall back to one ``copy_``
#: per pair when the devices differ: optimizers' and accelerate's state loading use them)
CROSS_DEVICE_OPS = frozenset(
    (
        "aten::_to_copy",
        "aten::copy_",
        "aten::_copy_from",
        "aten::_copy_from_and_resize",
        "aten::to",
        "aten::_foreach_copy_",
        "aten::_foreach_copy",
    )
)

_INDEXING = frozenset(("aten::index.Tensor", "aten::index.Tensor_out"))
_INDEX_PUT = frozenset(("aten::index_put_", "aten::index_put", "aten::_index_put_impl_"))
_CONVOLUTION = frozenset(("aten::convolution", "aten::_convolution"))


def device_error(
    op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> RuntimeError | IndexError | None:
    """The error CUDA raises for ``op`` called with these arguments (tensors on the simulated
    device and elsewhere), or None when CUDA accepts the mix. Returned without a traceback, for
    the backend to raise from its own frame: CUDA raises from C++, and a traceback of the user's
    code shows no frames of these rules."""
    try:
        _check_devices(op, args, kwargs)
    except (RuntimeError, IndexError) as error:
        error.__context__ = None
        return error.with_traceback(None)
    return None


@functools.cache
def accepts_cpu_scalars(op: Any) -> bool:
    """Whether ``op`` on the accelerator takes 0-dim CPU tensors along (every operator but those
    with a generated check: TensorIterator's, indexing's and composite kernels' rules do)."""
    return generated_check(op.name(), op._overloadname) is None


def _check_devices(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    name = op.name()
    bound = _bind(op, args, kwargs)
    if name in _INDEXING:
        _check_indexing(bound)
    elif name in _INDEX_PUT:
        _check_index_put(bound)
    elif name in _CONVOLUTION:
        _check_convolution(bound)
    else:
        generated = generated_check(name, op._overloadname)
        if generated is not None:
            method, arguments = generated
            _check_generated(method, arguments, bound)
        elif _has_only_composite_kernel(name, op._overloadname):
            _run_composite_kernel(op, args, kwargs)
        else:
            _check_tensor_iterator(op, bound)


def _bind(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = [argument.name for argument in op._schema.arguments]
    return {**dict(zip(names, args, strict=False)), **kwargs}


def _tensors(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, torch.Tensor):
                yield item


def _is_cpu_scalar(tensor: Any) -> bool:
    return bool(tensor.device.type == "cpu" and tensor.dim() == 0)


# --------------------------------------------------------------------------------------------
# The generated check


@functools.cache
def _native_functions() -> dict[str, dict[str, Any]]:
    """``native_functions.yaml`` as torch's own code generator read it (shipped with torch in
    torchgen/packaged), keyed by operator name with overload ("mm", "mm.out")."""
    import importlib.util
    from pathlib import Path

    import yaml  # type: ignore[import-untyped]  # torchgen's own dependency; no stubs here

    spec = importlib.util.find_spec("torchgen")
    if spec is None or spec.origin is None:
        return {}
    path = Path(spec.origin).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as source:
        entries = yaml.load(source, Loader=loader)
    return {entry["func"].partition("(")[0]: entry for entry in entries}


def _entry(name: str, overload: str) -> dict[str, Any] | None:
    """The ``native_functions.yaml`` entry of an aten operator (``OpOverload.name()`` and
    ``_overloadname``), or None (another namespace, or no PyYAML/torchgen to read it with)."""
    namespace, _, base = name.partition("::")
    if namespace != "aten":
        return None
    try:
        functions = _native_functions()
    except (ImportError, OSError):
        return None
    key = base if overload in ("", "default") else f"{base.partition('.')[0]}.{overload}"
    return functions.get(key)


def _dispatch_keys(entry: dict[str, Any]) -> set[str]:
    keys: set[str] = set()
    for names in entry.get("dispatch") or {}:
        keys.update(key.strip() for key in names.split(","))
    return keys


@functools.cache
def generated_check(name: str, overload: str) -> tuple[str, tuple[str, ...]] | None:
    """(wrapper name, arguments checked in order) of the device check torchgen generates for
    the CUDA kernel of ``aten::name.overload``, or None when it generates none."""
    entry = _entry(name, overload)
    if entry is None or entry.get("device_check") == "NoCheck":
        return None
    delegate = _native_functions().get(entry.get("structured_delegate", ""), {})
    if "CUDA" not in _dispatch_keys(entry) | _dispatch_keys(delegate):
        return None
    from torchgen.api.types import (  # type: ignore[import-untyped]  # torch's code generator
        DispatcherSignature,
        NativeSignature,
    )
    from torchgen.model import FunctionSchema  # type: ignore[import-untyped]

    schema = FunctionSchema.parse(entry["func"])
    if entry.get("structured") or "structured_delegate" in entry:
        method = NativeSignature(schema, prefix=f"wrapper_{DISPATCH_KEY}_", symint=False).name()
    else:
        prefix = f"wrapper_{DISPATCH_KEY}_{schema.name.overload_name}_"
        method = DispatcherSignature.from_schema(schema, prefix=prefix).name()
    arguments = [*schema.arguments.out, *schema.arguments.flat_positional]
    return method, tuple(a.name for a in arguments if a.type.is_tensor_like())


def _check_generated(method: str, arguments: tuple[str, ...], bound: dict[str, Any]) -> None:
    common = None
    for argument in arguments:
        for tensor in _tensors(bound.get(argument)):
            if common is None:
                common = tensor.device
            elif tensor.device != common:
                raise RuntimeError(
                    f"{SAME_DEVICE}, but got {argument} is on {tensor.device}, different from "
                    f"other tensors on {common} (when checking argument in method {method})"
                )


# --------------------------------------------------------------------------------------------
# TensorIterator


def _check_tensor_iterator(op: Any, bound: dict[str, Any]) -> None:
    outputs = [a.name for a in op._schema.arguments if a.is_out]
    ordered = [*outputs, *(name for name in bound if name not in outputs)]
    operands = [(name in outputs, t) for name in ordered for t in _tensors(bound.get(name))]
    common = next((t.device for _, t in operands if t.device.type != "cpu"), None)
    if common is None:
        return
    for is_output, tensor in operands:
        if not is_output and _is_cpu_scalar(tensor):
            continue
        if tensor.device != common:
            raise RuntimeError(
                f"{SAME_DEVICE}, but found at least two devices, {common} and {tensor.device}!"
            )


# --------------------------------------------------------------------------------------------
# Indexing


def _check_indexing(bound: dict[str, Any]) -> None:
    device = bound["self"].device
    for index in _tensors(bound.get("indices")):
        if index.device.type != "cpu" and index.device != device:
            raise IndexError(
                f"indices should be either on cpu or on the same device as the indexed tensor "
                f"({device})"
            )


def _check_index_put(bound: dict[str, Any]) -> None:
    device = bound["self"].device
    values = bound["values"]
    if values.device == device or (values.numel() == 1 and values.dim() == 0):
        return
    if device.type != "cpu" and bound.get("accumulate", False):
        # the CUDA branch of _index_put_impl_ (index_put_with_sort_stub)
        raise RuntimeError(
            f"expected device {device} but got device {values.device} for value tensor"
        )
    common, other = (device, values.device) if device.type != "cpu" else (values.device, device)
    raise RuntimeError(f"{SAME_DEVICE}, but found at least two devices, {common} and {other}!")


# --------------------------------------------------------------------------------------------
# Convolution


def type_string(tensor: Any) -> str:
    """What a device-type message prints for ``tensor``'s type: ``TensorBase::toString()`` as
    Python's error translation leaves it ("torch.FloatTensor", "simdevFloatType")."""
    import torch

    scalar = torch.empty(0, dtype=tensor.dtype).type().removeprefix("torch.")
    scalar = scalar.removesuffix("Tensor")
    kind = tensor.device.type
    if kind in ("cpu", "cuda") and scalar in _LEGACY_SCALAR_TYPES:
        return f"torch.{scalar}Tensor" if kind == "cpu" else f"torch.cuda.{scalar}Tensor"
    key = {"cpu": "CPU", "cuda": "CUDA"}.get(kind, kind)
    return f"{key}{scalar}Type"


def _uses_mkldnn(bound: dict[str, Any]) -> bool:
    """Whether the input's backend is mkldnn (Convolution.cpp's ``_select_conv_backend``, asked
    with the parameters' values on the input's device)."""
    import torch

    def here(tensor: Any) -> Any:
        # a wrapper tensor's values (the simulated device's host tensor), through the protocol
        # every wrapper subclass has
        if tensor is None or tensor.device.type == "cpu":
            return tensor
        names, _context = tensor.__tensor_flatten__()
        return getattr(tensor, names[0])

    try:
        backend = torch._C._select_conv_backend(
            here(bound["input"]), here(bound["weight"]), here(bound.get("bias")),
            bound["stride"], bound["padding"], bound["dilation"], bound["transposed"],
            bound["output_padding"], bound["groups"], None,
        )  # fmt: skip
    except (RuntimeError, TypeError, KeyError):
        return False
    return bool(backend.name == "Mkldnn")  # a torch._C._ConvBackend


def _check_convolution(bound: dict[str, Any]) -> None:
    source = bound["input"]
    mkldnn = source.device.type == "cpu" and _uses_mkldnn(bound)
    for role in ("weight", "bias"):
        parameter = bound.get(role)
        if parameter is None or (
            parameter.device == source.device and parameter.dtype == source.dtype
        ):
            continue
        tail = f" or input should be a MKLDNN tensor and {role} is a dense tensor" if mkldnn else ""
        raise RuntimeError(
            f"Input type ({type_string(source)}) and {role} type ({type_string(parameter)}) "
            f"should be the same{tail}"
        )


# --------------------------------------------------------------------------------------------
# Operators whose only kernel is composite


_COMPOSITE_KEYS = frozenset(("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"))


@functools.cache
def _has_only_composite_kernel(name: str, overload: str) -> bool:
    entry = _entry(name, overload)
    if entry is None:
        return False
    keys = _dispatch_keys(entry)
    return bool(keys & _COMPOSITE_KEYS) and "CUDA" not in keys


def _run_composite_kernel(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """When the arguments really mix devices (more than a CPU scalar), run the composite kernel
    on them as CUDA would: the operators it calls check their devices and raise their own
    messages. Should none raise, TensorIterator's message stands in."""
    import torch

    try:
        _check_tensor_iterator(op, _bind(op, args, kwargs))
        return
    except RuntimeError as mixed:
        fallback = mixed
    # the key the kernel is registered under (calling a key without a kernel crashes the
    # process: diagonal_scatter's is NonFunctional)
    keys = [
        key
        for key in _COMPOSITE_KEYS
        if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)
    ]
    if not keys:
        raise fallback
    try:
        op._op_dk(getattr(torch._C.DispatchKey, sorted(keys)[0]), *args, **kwargs)
    except (RuntimeError, IndexError) as error:
        if _is_device_message(str(error)):
            raise
    raise fallback


def _is_device_message(text: str) -> bool:
    return text.startswith((SAME_DEVICE, "indices should be", "Input type (", "expected device"))
