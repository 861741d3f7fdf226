"""Where the fake mode does not do what a real device does, and the shadow run makes up for it.

- Convolutions: the fake mode computes a convolution's output on meta without comparing its
  arguments' devices, so a CPU layer given an accelerator input (or the other way round) runs
  on fakes while CUDA raises ``Input type (torch.cuda.FloatTensor) and weight type
  (torch.FloatTensor) should be the same``. :func:`device_checks` raises that message (the
  shape ``Convolution.cpp`` gives it) before the fake mode sees the operator.
- Multi-tensor (``_foreach_*``) operators: the fake mode checks no devices across their lists,
  so an optimizer whose state stayed on the CPU (loaded before the model moved) steps on
  fakes; on CUDA each slot's tensors meet in one kernel and the step raises TensorIterator's
  ``Expected all tensors to be on the same device, but found at least two devices``.
  :func:`device_checks` raises it for the first slot whose tensors span devices (CPU 0-dim
  tensors mix freely, as everywhere on CUDA; ``_foreach_copy_`` copies between devices).
- Copying out of a meta tensor (``.to(device)``, ``copy_``): a fake copies its shape, and the
  real run raises ``NotImplementedError: Cannot copy out of meta tensor; no data!`` (a module's
  ``.to()`` adds that ``to_empty()`` is the way). :func:`device_checks` raises it.
- A 0-dim CPU tensor filled at random and read back (``DataLoader``'s base seed:
  ``torch.empty((), dtype=torch.int64).random_().item()``): a fake has no value to read.
  :func:`device_checks` draws it for real (from the CPU generator the dry run forks and
  restores) and keeps it as the fake's constant, so iterating a loader can be predicted.
- Mixes the fake mode lets by that CUDA refuses: a CPU tensor indexed with an index (or a
  boolean mask) on the device raises an ``IndexError`` on CUDA, and an operator with a generated
  check takes no 0-dim CPU tensor along (``torch.addmm(torch.tensor(1.), a, b)``), where the fake
  mode computes both. :func:`device_checks` asks CUDA's rules about such calls (indexing, and
  operators with a generated check, mixing devices) and raises what they give, before the fake
  mode sees the call; the mixes the fake mode checks as CUDA does are left to it.
- The message: the fake mode raises TensorIterator's words for every operator that mixes
  devices, where the real run names the argument and the operator for most of them ("but got
  mat1 is on cpu, different from other tensors on cuda:0 (when checking argument in method
  wrapper_CUDA_addmm)", torchgen's generated check), another operator's words for an operator
  whose kernel is composite (``embedding`` fails in ``index_select``), or an ``IndexError``
  for an index tensor. When the fake mode raises a device error, :func:`device_checks` raises
  instead the error CUDA's rules (:mod:`..testing.cuda_rules`, those the simulated accelerator
  follows) give for the same call, on ``cuda`` or the simulated device, and remembers which
  operator raised it (:meth:`DeviceChecks.operator_of`).
- ``torch.tensor(data, device=...)`` on a Python backend (the simulated accelerator): the
  constructor makes a real tensor of the backend, which the fake mode cannot lift.
  :func:`python_backend_factories` builds it on the CPU and moves it, under the fake mode.

Pure core: torch (imported when a mode is made) and CUDA's rules, :mod:`..testing.cuda_rules`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..testing.cuda_rules import CROSS_DEVICE_OPS, DISPATCH_KEY, accepts_cpu_scalars, device_error

__all__ = ["device_checks", "python_backend_factories", "real_device_error", "tensor_type_name"]

#: scalar types whose tensors print with a legacy name (``torch.cuda.FloatTensor``)
_LEGACY = frozenset({"Float", "Double", "Half", "BFloat16", "Byte", "Char", "Short", "Int", "Long", "Bool"})  # fmt: skip  # noqa: E501


def tensor_type_name(tensor: Any) -> str:
    """``TensorBase::toString()`` as a device-type message prints it: ``torch.FloatTensor``,
    ``torch.cuda.HalfTensor``, ``simdevFloatType``."""
    import torch

    scalar = torch.empty(0, dtype=tensor.dtype, device="meta").type()
    scalar = scalar.removeprefix("torch.").removeprefix("meta.").removesuffix("Tensor")
    kind = tensor.device.type
    if kind in ("cpu", "cuda") and scalar in _LEGACY:
        return f"torch.{scalar}Tensor" if kind == "cpu" else f"torch.cuda.{scalar}Tensor"
    return f"{ {'cpu': 'CPU', 'cuda': 'CUDA'}.get(kind, kind) }{scalar}Type"


def _check_convolution(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    source, weight = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    for role, parameter in (("weight", weight), ("bias", bias)):
        if parameter is None or parameter.device == source.device:
            continue
        raise RuntimeError(
            f"Input type ({tensor_type_name(source)}) and {role} type "
            f"({tensor_type_name(parameter)}) should be the same"
        )


def _check_copy_out_of_meta(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """``_to_copy`` (``.to(device)``) or ``copy_`` from a meta tensor to a real device: a real
    device has nothing to copy (Copy.cpp's ``copy_impl``); a fake has no values either way."""
    import torch

    source, device = args[0], kwargs.get("device")
    if len(args) > 1:  # copy_(self, src)
        source, device = args[1], args[0].device
    if source.device.type == "meta" and device is not None and torch.device(device).type != "meta":
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")


def _tensor_arguments(tensor_type: type, args: Any, kwargs: dict[str, Any]) -> Iterator[Any]:
    """The tensors an aten operator is given: arguments, and items of list arguments (aten
    nests no deeper); a walk of its own, cheaper per operator than a pytree's."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, tensor_type):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from (item for item in value if isinstance(item, tensor_type))


def _is_cpu_scalar(tensor: Any) -> bool:
    return tensor.device.type == "cpu" and tensor.dim() == 0


def _check_foreach(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    import torch

    lists = [
        value
        for value in (*args, *kwargs.values())
        if isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor)
    ]
    for slot in zip(*lists, strict=False):
        devices = {
            str(t.device) for t in slot if isinstance(t, torch.Tensor) and not _is_cpu_scalar(t)
        }
        if len(devices) > 1:
            first, second = sorted(devices, key=lambda d: d == "cpu")[:2]
            raise RuntimeError(
                "Expected all tensors to be on the same device, but found at least two "
                f"devices, {first} and {second}!"
            )


@dataclass(frozen=True)
class _CudaChecks:
    """What :func:`_refused_by_cuda` compares with, made once per mode."""

    #: device types whose kernels follow CUDA's rules: cuda and the Python backend's
    accelerators: frozenset[str]
    #: the indexing operators (CUDA takes their indices on the CPU or the data's device)
    indexing: frozenset[Any]


def real_device_error(func: Any, args: Any, kwargs: dict[str, Any]) -> Exception | None:
    """The error CUDA (or the simulated accelerator, which follows CUDA's rules) raises for
    ``func`` called with these arguments, or None: where it raises none, and where no argument
    is on such a device (a CPU and meta mix fails in meta kernels, whose words the fake mode
    has already)."""
    import torch

    backend = torch._C._get_privateuse1_backend_name()
    kinds = {t.device.type for t in _tensor_arguments(torch.Tensor, args, kwargs)}
    accelerators = kinds - {"cpu"}
    if accelerators == {"cuda"}:
        key = "CUDA"
    elif accelerators == {backend} and backend != "privateuseone":
        key = DISPATCH_KEY
    else:
        return None
    try:
        error = device_error(func, tuple(args), dict(kwargs))
    except Exception:  # the rules could not read this call: the fake mode's words stand
        return None
    if error is None or key == DISPATCH_KEY:
        return error
    # torchgen names the generated check's wrapper after the dispatch key it is generated for
    return type(error)(str(error).replace(f"wrapper_{DISPATCH_KEY}_", f"wrapper_{key}_"))


def _refused_by_cuda(func: Any, args: Any, kwargs: dict[str, Any], checks: _CudaChecks) -> bool:
    """Whether this call is one of the mixes the fake mode lets by and CUDA checks: an argument
    on one of the accelerators, tensors on two devices (0-dim CPU tensors aside) or a 0-dim CPU
    tensor, and an operator whose devices CUDA checks where the fake mode does not (indexing,
    and torchgen's generated check, which takes no CPU scalar along). Operators the fake mode
    checks as CUDA does (TensorIterator's rule) are left to it."""
    import torch

    devices: set[Any] = set()
    cpu_scalars = accelerator = False
    for value in _tensor_arguments(torch.Tensor, args, kwargs):
        if _is_cpu_scalar(value):
            cpu_scalars = True
            continue
        devices.add(value.device)
        accelerator = accelerator or value.device.type in checks.accelerators
    if not accelerator or (len(devices) < 2 and not cpu_scalars):
        return False
    if func in checks.indexing:
        return True
    return func.name() not in CROSS_DEVICE_OPS and not accepts_cpu_scalars(func)


def _operator_of(
    raised_by: dict[int, tuple[BaseException, str]], error: BaseException
) -> str | None:
    """The operator ``raised_by`` names for ``error`` or an error it was raised from."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        known = raised_by.get(id(current))
        if known is not None and known[0] is current:
            return known[1]
        current = current.__cause__ or current.__context__
    return None


def device_checks() -> Any:
    """A dispatch mode raising the real device's error for the mixes the fake mode lets by and,
    in the real device's words, for those it stops; drawing 0-dim CPU random numbers for real.
    Its ``operator_of(error)`` names the operator that raised a device error."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import TorchDispatchMode

    from ..diagnose import parse_message

    backend = torch._C._get_privateuse1_backend_name()
    cuda_checks = _CudaChecks(
        frozenset({"cuda", backend} - {"privateuseone"}),
        frozenset({torch.ops.aten.index.Tensor, torch.ops.aten.index.Tensor_out}),
    )

    aten = torch.ops.aten
    checked = {
        aten.convolution.default: _check_convolution,
        aten._to_copy.default: _check_copy_out_of_meta,
        aten.copy_.default: _check_copy_out_of_meta,
    }
    random_fills = {aten.random_.default, getattr(aten.random_, "from"), aten.random_.to}

    class DeviceChecks(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            #: id(error) -> (error, the operator that raised it), for every device error
            self.raised_by: dict[int, tuple[BaseException, str]] = {}

        def operator_of(self, error: BaseException) -> str | None:
            """The operator that raised ``error`` or the error it was raised from."""
            return _operator_of(self.raised_by, error)

        def _raised(self, error: BaseException, func: Any) -> BaseException:
            # the innermost operator keeps it: the one the message names (``index_select``
            # inside ``embedding``)
            self.raised_by.setdefault(id(error), (error, func.overloadpacket.__name__))
            return error

        def _call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
            try:
                return func(*args, **kwargs)
            except RuntimeError as error:
                if parse_message(str(error)) is None:
                    raise
                fake_error = error
            raise self._raised(self._predicted(func, args, kwargs) or fake_error, func)

        def _predicted(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Exception | None:
            # re-entered: an operator whose kernel is composite is run again by the rules, and
            # the operators it calls get their own words
            with self:
                return real_device_error(func, args, kwargs)

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            try:
                check = checked.get(func)
                if check is not None:
                    check(tuple(args), kwargs)
                name = func.__name__
                if name.startswith("_foreach_") and not name.startswith("_foreach_copy"):
                    _check_foreach(tuple(args), kwargs)
            except RuntimeError as error:
                self._raised(error, func)
                raise
            if _refused_by_cuda(func, args, kwargs, cuda_checks):
                predicted = self._predicted(func, args, kwargs)
                if predicted is not None:
                    raise self._raised(predicted, func)
            result = self._call(func, args, kwargs)
            if func in random_fills and _is_cpu_scalar(args[0]):
                target = args[0]
                with unset_fake_temporarily():
                    real = torch.empty((), dtype=target.dtype)
                    func(real, *args[1:], **kwargs)
                target.constant = real
            return result

    return DeviceChecks()


def python_backend_factories() -> Any:
    """A function mode building ``torch.tensor(data, device=<Python backend>)`` on the CPU and
    moving it there, so that the fake mode sees a CPU constant and a move."""
    import torch
    from torch.overrides import TorchFunctionMode

    backend = torch._C._get_privateuse1_backend_name()
    constructors = {torch.tensor, torch.as_tensor}

    class PythonBackendFactories(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = dict(kwargs or {})
            device = kwargs.get("device")
            if func in constructors and device is not None and torch.device(device).type == backend:
                kwargs["device"] = "cpu"
                return func(*args, **kwargs).to(device)
            return func(*args, **kwargs)

    return PythonBackendFactories()
