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
- A 0-dim CPU tensor filled at random and read back (``DataLoader``'s base seed:
  ``torch.empty((), dtype=torch.int64).random_().item()``): a fake has no value to read.
  :func:`device_checks` draws it for real (from the CPU generator the dry run forks and
  restores) and keeps it as the fake's constant, so iterating a loader can be predicted.
- ``torch.tensor(data, device=...)`` on a Python backend (the simulated accelerator): the
  constructor makes a real tensor of the backend, which the fake mode cannot lift.
  :func:`python_backend_factories` builds it on the CPU and moves it, under the fake mode.

Pure core: torch only, imported when a mode is made.
"""

from __future__ import annotations

from typing import Any

__all__ = ["device_checks", "python_backend_factories", "tensor_type_name"]

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


def _check_convolution(args: tuple[Any, ...]) -> None:
    source, weight = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    for role, parameter in (("weight", weight), ("bias", bias)):
        if parameter is None or parameter.device == source.device:
            continue
        raise RuntimeError(
            f"Input type ({tensor_type_name(source)}) and {role} type "
            f"({tensor_type_name(parameter)}) should be the same"
        )


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


def device_checks() -> Any:
    """A dispatch mode raising the real device's error for the mixes the fake mode lets by,
    and drawing 0-dim CPU random numbers for real."""
    import torch
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    checked = {aten.convolution.default: _check_convolution}
    random_fills = {aten.random_.default, getattr(aten.random_, "from"), aten.random_.to}

    class DeviceChecks(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            check = checked.get(func)
            if check is not None:
                check(tuple(args))
            name = func.__name__
            if name.startswith("_foreach_") and not name.startswith("_foreach_copy"):
                _check_foreach(tuple(args), kwargs)
            result = func(*args, **kwargs)
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
