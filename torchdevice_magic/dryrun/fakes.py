"""Fake copies: the user's tensors, modules and optimizers as ``FakeTensor`` s (shape, dtype,
device; no data), made without touching the originals.

One :class:`FakeCopies` per dry run owns the ``FakeTensorMode`` (``allow_non_fake_inputs``
off: a real tensor reaching an operator stops the run instead of being read) and the copies.
Objects are copied with ``copy.deepcopy`` under a ``TorchFunctionMode`` that answers
``Tensor.__deepcopy__`` and ``clone`` with a fake (what ``torch._subclasses.FakeCopyMode``
does), so modules, optimizers (their ``param_groups`` point at the fake parameters, their
state is keyed by them) and containers keep their structure, aliases and tied weights.

Two things torch's own conversion does not do:

- Parameters are copied with their ``.grad`` (``Parameter.__deepcopy__`` drops it; the real run
  accumulates into it, so it belongs to the starting allocation).
- 0-dim CPU tensors that need no gradient (an optimizer's ``step`` counter, a learning rate)
  become fake *constants* of a copy of their value: optimizers read ``step.item()``, which a
  fake without a value cannot answer.

Tensors of a Python ``PrivateUse1`` backend (the simulated accelerator) are faked from the
tensor holding their values (``__tensor_flatten__``), with their own device.

Pure core: torch only, imported when a :class:`FakeTensor` copy is made.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import sys
from collections.abc import Iterator
from typing import Any

from .gaps import device_checks, python_backend_factories

__all__ = ["FakeCopies", "python_backend_fakes"]


class FakeCopies:
    """The fake mode of one dry run and the fake copy of each real tensor it has made."""

    def __init__(self) -> None:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        self.torch = torch
        self.mode = FakeTensorMode(allow_non_fake_inputs=False)
        self.mode.fake_tensor_converter.__class__ = _converter_class()
        # a user's meta tensors are faked as meta (mixing them is a device error)
        self.mode.allow_meta = True
        #: id(real tensor) -> (real tensor, its fake): the real one is held so its id stays
        #: unique while the copies live
        self._fakes: dict[int, tuple[Any, Any]] = {}

    # -- one tensor ---------------------------------------------------------------------------
    def fake_of(self, tensor: Any) -> Any:
        """The fake copy of ``tensor`` (the same one each time it is asked for)."""
        from torch._subclasses.fake_tensor import FakeTensor

        if isinstance(tensor, FakeTensor):
            return tensor
        known = self._fakes.get(id(tensor))
        if known is not None:
            return known[1]
        torch = self.torch
        if isinstance(tensor, torch.nn.Parameter):
            fake = torch.nn.Parameter(self.fake_of(tensor.data), tensor.requires_grad)
        elif _is_small_cpu_constant(torch, tensor):
            converter = self.mode.fake_tensor_converter
            fake = converter.from_real_tensor(
                self.mode, tensor.detach().clone(), make_constant=True
            )
        else:
            fake = self.mode.from_tensor(tensor, static_shapes=True)
        grad = getattr(tensor, "grad", None) if tensor.is_leaf else None
        if grad is not None and getattr(fake, "grad", None) is None:
            fake.grad = self.fake_of(grad)
        self._fakes[id(tensor)] = (tensor, fake)
        return fake

    # -- whole objects ------------------------------------------------------------------------
    def copy(self, value: Any, memo: dict[int, Any]) -> Any:
        """A deep copy of ``value`` whose tensors are fakes; ``memo`` is shared by the objects
        of one namespace, so what they share stays shared."""
        with python_backend_fakes():
            for parameter in _parameters_of(self.torch, value):
                if id(parameter) not in memo:
                    memo[id(parameter)] = self.fake_of(parameter)
            with _copy_mode(self):
                try:
                    copied = copy.deepcopy(value, memo)
                except Exception as error:
                    copied = _copy_attributes(value, memo, error)
        # The meta converter remembers each fake it made by a weak reference; ``Module.to()``
        # swaps a fake parameter for its moved one (``swap_tensors``), which a weak reference
        # forbids. This run keeps its own memo of fakes, so the converter's is let go.
        self.mode.fake_tensor_converter.meta_converter.tensor_memo.clear()
        return copied

    def release(self) -> None:
        """Let go of every reference to the user's tensors and to the fakes made of them. The
        meta converter keys what it converted by weak references to the real tensors and
        storages, and ``Module.to()`` refuses to swap a tensor that has one ("Couldn't swap
        Linear.weight"): a user's next move must not depend on when the collector frees this
        run. Called as soon as the copies are made, before the run, the fakes are left to the
        shadow namespace alone, as the user's objects alone hold their tensors: a storage the
        cell lets go of (a parameter ``model.half()`` or ``model.cpu()`` replaces) is freed
        when the real run frees it, instead of counting in the peak and in what is left."""
        converter = self.mode.fake_tensor_converter
        meta = converter.meta_converter
        meta.tensor_memo.clear()
        meta.storage_memo.clear()
        meta.describer.lookup_tensor.clear()
        meta.describer.lookup_storage.clear()
        converter.__dict__.pop("python_backend_storages", None)
        self._fakes.clear()

    @contextlib.contextmanager
    def running(self) -> Iterator[Any]:
        """The fake mode, entered for the shadow run; yields the device checks (their
        ``operator_of(error)`` names the operator that raised a device error)."""
        # the fake mode logs every failed meta kernel with its traceback before raising: the
        # error reaches the report, the log would only fill the cell's output
        logger = logging.getLogger("torch._subclasses.fake_tensor")
        level = logger.level
        logger.setLevel(logging.CRITICAL)
        try:
            checks = device_checks()
            with python_backend_fakes(), self.mode, checks, python_backend_factories():
                yield checks
        finally:
            logger.setLevel(level)


def _copy_attributes(value: Any, memo: dict[int, Any], error: Exception) -> Any:
    """A copy of a plain Python object that ``deepcopy`` could not copy: a new instance of its
    class with a deep copy of its attributes. Such objects fail where ``__getattr__`` reads an
    attribute the half-made copy does not have yet (``UserDict`` subclasses that forward
    attribute reads to ``self.data``, as ``transformers``' ``BatchEncoding`` does); the
    original ``error`` is raised when this does not apply either."""
    attributes = getattr(value, "__dict__", None)
    if (
        not isinstance(attributes, dict)
        or getattr(type(value), "__new__", None) is not object.__new__
    ):
        raise error
    copied = object.__new__(type(value))
    memo[id(value)] = copied
    copied.__dict__.update(copy.deepcopy(attributes, memo))
    return copied


def _converter_class() -> type:
    from torch._subclasses.fake_tensor import FakeTensorConverter

    class ShadowConverter(FakeTensorConverter):
        """The fake mode's converter, with two changes.

        Fakes an operator returns are not remembered by a weak reference: ``Module.to()``
        swaps each fake parameter for its moved one (``swap_tensors``, always, for fakes),
        which a weak reference to the parameter forbids. An operator's output is a fresh meta
        tensor, so its memo was never looked up again.

        A Python backend's tensor is faked from the CPU tensor holding its values (the meta
        converter would resize the backend's storage, which it has no hook for), with its own
        device; views of one storage share one meta storage."""

        def set_tensor_memo(self, t: Any, v: Any) -> None:
            return None

        def from_real_tensor(self, fake_mode: Any, t: Any, *args: Any, **kwargs: Any) -> Any:
            values = _python_backend_values(t)
            if values is None:
                return super().from_real_tensor(fake_mode, t, *args, **kwargs)
            import torch

            storages = self.__dict__.setdefault("python_backend_storages", {})
            storage = values.untyped_storage()
            shared = storages.get(id(storage))
            if shared is None:
                meta_bytes = torch.empty(storage.nbytes(), dtype=torch.uint8, device="meta")
                shared = storages[id(storage)] = (storage, meta_bytes.untyped_storage())
            meta = torch.empty(0, dtype=values.dtype, device="meta")
            meta.set_(shared[1], values.storage_offset(), values.size(), values.stride())
            if t.requires_grad:
                meta.requires_grad_(True)
            return self.from_meta_and_device(fake_mode, meta, t.device)

    return ShadowConverter


def _is_small_cpu_constant(torch: Any, tensor: Any) -> bool:
    try:
        return (
            tensor.device.type == "cpu"
            and tensor.layout == torch.strided
            and tensor.numel() <= 1
            and not tensor.requires_grad
            and type(tensor) in (torch.Tensor, torch.nn.Buffer)
        )
    except Exception:
        return False


def _python_backend_values(tensor: Any) -> Any:
    """The CPU tensor holding a Python backend tensor's values, or None for other tensors."""
    torch = _loaded_torch()
    if torch is None or tensor.device.type != torch._C._get_privateuse1_backend_name():
        return None
    flatten = getattr(tensor, "__tensor_flatten__", None)
    if flatten is None:
        return None
    try:
        names, _ = flatten()
        values = getattr(tensor, names[0])
    except Exception:
        return None
    return values if isinstance(values, torch.Tensor) and values.device.type == "cpu" else None


def _loaded_torch() -> Any:
    return sys.modules.get("torch")


def _parameters_of(torch: Any, value: Any) -> list[Any]:
    """The parameters of the modules and optimizers ``value`` is or directly holds."""
    found: list[Any] = []
    items = value.values() if isinstance(value, dict) else value
    objects = list(items) if isinstance(value, (list, tuple, dict)) else [value]
    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            found += list(obj.parameters())
        elif isinstance(obj, torch.optim.Optimizer):
            found += [p for group in obj.param_groups for p in group["params"]]
    return found


def _copy_mode(copies: FakeCopies) -> Any:
    import torch
    from torch.overrides import TorchFunctionMode

    class FakeCopyingMode(TorchFunctionMode):
        """``deepcopy`` of a tensor (and the ``clone`` ``Parameter.__deepcopy__`` makes)
        answers with its fake; every other function runs as usual."""

        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if func is torch._C.TensorBase.clone:
                return func(copies.fake_of(args[0]), **kwargs)
            if func is torch.Tensor.__deepcopy__:
                tensor, memo = args
                if id(tensor) not in memo:
                    memo[id(tensor)] = copies.fake_of(tensor)
                return memo[id(tensor)]
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)

    return FakeCopyingMode()


@contextlib.contextmanager
def python_backend_fakes() -> Iterator[None]:
    """While it lasts, fake tensors on a ``PrivateUse1`` device dispatch as CPU ones.

    ``FakeTensor`` keys its dispatch on its device, and its constructor detaches the new tensor
    in C++. A Python backend (the simulated accelerator) serves that ``detach`` with a Python
    kernel whose result already has a Python object, which the constructor refuses, or reaches
    the backend's kernels again. A fake needs no backend kernel at all (the fake mode computes
    every operator on meta), so fakes on that device are built with the CPU's dispatch keys and
    report their own device (``fake_device``), which is all the device checks read."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    backend = torch._C._get_privateuse1_backend_name()
    if backend == "privateuseone" or getattr(FakeTensor, "_dryrun_patched", False):
        yield
        return
    original = FakeTensor.__new__
    cpu = torch.device("cpu")

    def new(cls: Any, mode_or_elem: Any = None, elem: Any = None, device: Any = None,
            *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        if device is not None and torch.device(device).type == backend:
            fake = original(cls, mode_or_elem, elem, cpu, *args, **kwargs)
            fake.fake_device = torch.device(device)
            return fake
        return original(cls, mode_or_elem, elem, device, *args, **kwargs)

    FakeTensor.__new__ = new  # type: ignore[method-assign, assignment]
    FakeTensor._dryrun_patched = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        FakeTensor.__new__ = original  # type: ignore[method-assign]
        del FakeTensor._dryrun_patched  # type: ignore[attr-defined]
