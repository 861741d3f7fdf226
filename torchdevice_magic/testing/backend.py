"""The simulated accelerator's backend: a second device that keeps data, for CPU-only machines.

    from torchdevice_magic.testing import simulated_accelerator
    device_type = simulated_accelerator()          # "simdev"
    x = torch.ones(3, device=device_type)          # lives on simdev:0, values kept on the host
    x + torch.ones(3)                              # RuntimeError: Expected all tensors to be on
                                                   # the same device, but found at least two
                                                   # devices, simdev:0 and cpu!

It is a pure-Python PrivateUse1 backend (``torch.utils.backend_registration``): a tensor on it is
a storage-less wrapper (:class:`SimulatedTensor`) whose values live in a CPU tensor; one boxed
fallback runs every aten operator on those CPU values and wraps the results again. So it keeps
values, moves bit-exactly both ways, runs autograd and optimizers (SGD, Adam, fused AdamW), and
when an operator's arguments mix devices it does what CUDA does (:mod:`.cuda_rules`: the mixes
CUDA accepts, and each operator family's message) -- which ``meta`` does not (on torch 2.13
``matmul``/``linear``/``bmm``/``embedding`` with one meta input return garbage).

A wrapper's own strides are always contiguous (torch offers a Python backend no way to make a
storage-less tensor with other strides); operators only ever see the host values, which keep the
real strides and aliasing, and fused optimizer kernels get contiguous copies.

It has one device unless asked for more: ``simulated_accelerator(devices=2)``, or the environment
variable ``TORCHDEVICE_MAGIC_SIMDEV_DEVICES=2`` read when it registers (an engine or a child
process started with it set). Then ``simdev:0`` and ``simdev:1`` are different devices, as
``cuda:0`` and ``cuda:1`` are: an operator mixing them raises CUDA's message ("found at least two
devices, simdev:0 and simdev:1!"), copies between them keep values, and ``torch.simdev`` has
``set_device``, ``current_device`` and the ``device(i)`` guard. A factory given ``"simdev"`` without
an index (``torch.ones(2, device="simdev")``) uses the current device, as on CUDA; but C++'s
``.to("simdev")`` and ``torch.accelerator``'s ``current_device_index`` / ``set_device_index`` ask
torch's Python-backend device guard, which knows one device, and so mean ``simdev:0``; and a
tensor torch makes in C++ without the fallback from one on ``simdev:1`` (``.data``, a tensor
autograd saved) says ``simdev:0`` although its storage, which every operator here reads, says 1.

What it does not have: pinned memory, memory statistics, streams, events or asynchrony (its
``synchronize`` has nothing to wait for), DataParallel's scatter, cuDNN-only paths, and shape
changes in place (``x.transpose_(0, 1)``, ``x.unsqueeze_(0)`` raise a one-line error; the ATen
composites that do one to a result of their own, ``nn.GRU``/``nn.RNN`` with ``batch_first`` and
``torch.stft``, run by :mod:`.reshaping_composites`; ``nn.LSTM`` and ``nn.GRU`` run on CUDA's
fused cell kernels, computed in :mod:`.rnn_kernels`);
``data_ptr()`` is 0 (the values' storage is reachable through ``__tensor_flatten__``, which is how
:mod:`torchdevice_magic.objects` keys its storages -- the same protocol any wrapper tensor has).

Registration is process-global and irreversible (PrivateUse1 can be renamed once per process) and
makes ``torch.accelerator.current_accelerator()`` return it, so nothing registers it on import:
tests that use it run in their own process (``@pytest.mark.simulated``), notebooks call it in
their kernel.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, SupportsIndex

from .cuda_rules import CROSS_DEVICE_OPS, accepts_cpu_scalars, device_error
from .reshaping_composites import reshaping_kernels, undo_reshape
from .rnn_kernels import HOST_KERNELS

DEVICE_TYPE = "simdev"
#: how many devices the simulated accelerator has, read when it registers (default 1)
DEVICES_VARIABLE = "TORCHDEVICE_MAGIC_SIMDEV_DEVICES"

_state: dict[str, Any] = {"count": 1, "current": 0}


def simulated_accelerator(devices: int | None = None) -> str:
    """Register the simulated accelerator in this process (once) and return its device type.

    ``devices``: how many devices it has (``simdev:0`` ... ``simdev:{devices-1}``); without it,
    the environment variable ``TORCHDEVICE_MAGIC_SIMDEV_DEVICES`` at the first registration, else
    one. Given again later, it changes the count (tensors already made keep their device).

    Raises ``RuntimeError`` with one line when this process already gave the PrivateUse1 backend
    another name (another out-of-tree accelerator is registered), ``ValueError`` for a count
    that is not a whole number of at least one.
    """
    if devices is not None:
        _state["count"] = _checked_count(devices, "devices")
        if _state["current"] >= _state["count"]:
            _state["current"] = 0  # the current device went with the devices taken away
    elif "device_type" not in _state and os.environ.get(DEVICES_VARIABLE):
        _state["count"] = _checked_count(os.environ[DEVICES_VARIABLE], DEVICES_VARIABLE)
    if "device_type" not in _state:
        _register()
    if _state["count"] > 1:
        _run_backward_on_the_calling_thread()
    _replay_views_in_backward()
    return DEVICE_TYPE


def _replay_views_in_backward() -> None:
    """A wrapper's strides are contiguous from offset 0 whatever its values' are, so autograd's
    default for an in-place write into a view (``CopySlices``: ``grad.as_strided(the view's
    sizes, strides and offset)``) reads the wrong part of the gradient -- circular padding's
    gradient came out wrong. Replaying the view functions instead (as autograd does for XLA
    and lazy tensors, which have no strides either) gives each view's own part. A per-thread
    flag, for the thread that asked for the device (a kernel's and an engine's cell thread);
    the backward's worker threads inherit it."""
    import torch

    torch._C._set_view_replay_enabled(True)


def _run_backward_on_the_calling_thread() -> None:
    """Autograd runs a device's backward on a thread of its own, one per device index torch's
    device guard knows -- one for a Python backend -- and fails an internal assertion for
    ``simdev:1``. With its multithreading off (per thread: the one that registered, a kernel's
    and an engine's cell thread), every device's backward runs on the calling thread."""
    import torch

    torch._C._set_multithreading_enabled(False)


def _register() -> None:
    import torch

    current = torch._C._get_privateuse1_backend_name()
    if current not in ("privateuseone", DEVICE_TYPE):
        raise RuntimeError(
            f"cannot register the simulated accelerator: this process already has the "
            f"accelerator {current!r} on PrivateUse1"
        )
    if current == "privateuseone":
        from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

        _setup_privateuseone_for_python_backend(DEVICE_TYPE, backend_module=_BackendModule())
    library = torch.library.Library("_", "IMPL")  # a fallback needs the global fragment
    library.fallback(_dispatch, "PrivateUse1")
    views = torch.library.Library("aten", "IMPL")
    for name in _composite_views(torch):
        views.impl(name, _view_kernel(name), "PrivateUse1")
    for name, kernel in reshaping_kernels().items():
        views.impl(name, kernel, "AutogradPrivateUse1")
    _state["libraries"] = (library, views)  # registrations live as long as the Library objects
    _state["device_type"] = DEVICE_TYPE


def _checked_count(value: Any, source: str) -> int:
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = 0
    if count < 1 or isinstance(value, bool):
        raise ValueError(f"{source} must be a whole number of devices, at least 1; got {value!r}")
    return count


def _checked_index(index: int | None) -> int:
    """A device index as CUDA checks it: None means the current device; one past the last
    device raises CUDA's "invalid device ordinal" (with this backend's name)."""
    if index is None:
        return int(_state["current"])
    if not 0 <= index < _state["count"]:
        raise RuntimeError(f"{DEVICE_TYPE} error: invalid device ordinal")
    return index


def _dispatch(op: Any, *args: Any, **kwargs: Any) -> Any:
    return _fallback(op, *args, **kwargs)


def _composite_views(torch: Any) -> list[str]:
    """Every aten operator with a CompositeExplicitAutograd(NonFunctional) kernel (detach,
    transpose, expand, mse_loss, ...): those outrank a backend fallback. Left alone, such a kernel runs on the wrappers themselves: a view is made in
    C++ from the wrapper's metadata, with no host values; an out tensor is resized on the host
    while the wrapper keeps its old shape. Registered for PrivateUse1, they reach the fallback
    instead, and their CPU kernels run on the host values."""
    names = set()
    for key in ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional"):
        for name in torch._C._dispatch_get_registrations_for_dispatch_key(key):
            namespace, _, rest = name.partition("::")
            if namespace == "aten":
                names.add(rest)
    return sorted(names)


def _view_kernel(name: str) -> Any:
    import torch

    base, _, overload = name.partition(".")
    op = getattr(getattr(torch.ops.aten, base), overload or "default")

    def kernel(*args: Any, **kwargs: Any) -> Any:
        # a real backend's kernel is C++, no frame of a traceback: IPython and the shortened
        # traceback leave a frame with this local out
        __tracebackhide__ = True  # noqa: F841
        try:
            return _fallback(op, *args, **kwargs)
        except BaseException as error:
            # A real backend raises from C++ and keeps nothing: drop this Python backend's
            # frames' references to the arguments (views of the user's Parameters), which the
            # traceback IPython keeps of the failed cell would otherwise hold -- and then
            # Module.to(), which swaps Parameters of a wrapper-subclass device, refuses
            # ("Couldn't swap Linear.weight") to apply the fix the diagnosis suggests.
            # Nor does it leave frames of its own in the traceback: the error starts here, in
            # this frame, which tracebacks leave out (__tracebackhide__).
            traceback.clear_frames(error.__traceback__)
            del args, kwargs
            raise error.with_traceback(None)  # noqa: B904

    return kernel


def is_registered() -> bool:
    return "device_type" in _state


class _BackendModule:
    """``torch.simdev``: what torch asks an accelerator's module for (always ready), and CUDA's
    current-device calls (``set_device``, ``current_device``, the ``device(i)`` guard)."""

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return int(_state["count"])

    @staticmethod
    def current_device() -> int:
        return int(_state["current"])

    @staticmethod
    def set_device(device: Any) -> None:
        _state["current"] = _index_of_device(device)

    @staticmethod
    @contextmanager
    def device(device: Any) -> Iterator[None]:
        """Make ``device`` the current device inside the block (``torch.cuda.device``)."""
        previous = _state["current"]
        _state["current"] = _index_of_device(device)
        try:
            yield
        finally:
            _state["current"] = previous

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        """Random operators run on the host, with the CPU generator torch.manual_seed seeds."""

    @staticmethod
    def synchronize(device: Any = None) -> None:
        """Nothing to wait for: every operator already ran on the host when it returned."""


def _index_of_device(device: Any) -> int:
    """The index ``set_device`` and ``device(i)`` take: an int, ``"simdev:1"`` or a
    ``torch.device`` of this backend (without an index: the current device)."""
    import torch

    if isinstance(device, int) and not isinstance(device, bool):
        return _checked_index(device)
    parsed = torch.device(device)
    if parsed.type != DEVICE_TYPE:
        raise ValueError(f"expected a {DEVICE_TYPE} device, got {parsed}")
    return _checked_index(parsed.index)


def _wrapper_class() -> type:
    wrapper = _state.get("wrapper")
    if wrapper is None:
        wrapper = _define_wrapper()
        _state["wrapper"] = wrapper
    return wrapper


def _define_wrapper() -> type:
    import torch

    class SimulatedTensor(torch.Tensor):
        """A tensor on the simulated device; its values are the CPU tensor ``.host``."""

        # No subclass preservation: a result is a SimulatedTensor only when the fallback made it
        # one (the default would turn ``.cpu()`` of a SimulatedTensor into one).
        __torch_function__ = torch._C._disabled_torch_function_impl  # type: ignore[assignment]  # torch's documented way to turn it off

        @staticmethod
        def __new__(cls, host: torch.Tensor, index: int = 0) -> SimulatedTensor:
            # A storage-less PrivateUse1 tensor with the host's shape and dtype. (Not
            # _make_wrapper_subclass: that needs __torch_dispatch__, which would route every
            # operator through Python dispatch instead of the PrivateUse1 fallback.) Its strides
            # are contiguous whatever the host's: operators only ever see the host.
            wrapper: Any = torch._C._acc.create_empty_tensor(tuple(host.shape), host.dtype)
            # The values (and the device index) hang on the wrapper's storage, not on the
            # tensor object: torch keeps a storage's Python object (and so its attributes) alive
            # exactly as long as the storage, and the tensors it makes in C++ without the
            # fallback (``.data``, tensors autograd saves for backward, ``param.data = ...``)
            # share that storage.
            storage = wrapper.untyped_storage()
            setattr(storage, "host", host)  # noqa: B010 - storages declare no such attribute
            if index == 0:  # the index a storage without one has
                wrapper.__class__ = cls
                return wrapper
            setattr(storage, "index", index)  # noqa: B010
            return _on_other_device(wrapper, cls)

        @property
        def host(self) -> torch.Tensor:
            return _host_of(self)

        def __init__(self, host: torch.Tensor, index: int = 0) -> None:
            pass

        def __tensor_flatten__(self) -> tuple[list[str], int]:
            return ["host"], _index_of(self)

        @staticmethod
        def __tensor_unflatten__(
            inner: dict[str, torch.Tensor], context: Any, size: Any, stride: Any
        ) -> torch.Tensor:
            return SimulatedTensor(inner["host"], context or 0)

        def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # torch's stub names its keyword oddly
            # torch's repr would read through the fallback value by value; one copy to the host
            # (dispatched, so a trace sees the device->host read printing costs on a real device)
            text = repr(self.cpu())
            suffix = f", device='{self.device}'"
            if text.endswith(")"):
                return text[:-1] + suffix + ")"
            return text + suffix

        __str__ = __repr__

        def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
            # pickling (torch.save, copy.deepcopy) keeps the values and the device, as
            # torch.load without map_location puts a cuda:1 tensor back on cuda:1
            return (_rebuild, (self.host, _index_of(self)))

    # Tables and diagnoses show a tensor's type name; on a real accelerator it is "Tensor", and a
    # notebook on the simulated device should read the same ("SimulatedTensor" is plumbing).
    indexed = _define_indexed_wrapper(SimulatedTensor)
    for wrapper_type in (SimulatedTensor, indexed):
        wrapper_type.__name__ = wrapper_type.__qualname__ = "Tensor"
    _state["indexed"] = indexed
    return SimulatedTensor


def _define_indexed_wrapper(base: type) -> type:
    import torch

    class IndexedSimulatedTensor(base):  # type: ignore[misc]  # a class made at run time
        """A tensor on a simulated device other than the first. The empty tensor torch makes
        for a Python backend is always on device 0; this one's ``device`` is asked of Python
        (torch's "python custom device" policy, which calls ``__torch_dispatch__`` with
        ``prim.device`` only), and answers the index its storage carries."""

        @classmethod
        def __torch_dispatch__(
            cls, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if func is torch.ops.prim.device.default:
                return torch.device(DEVICE_TYPE, _index_of(args[0]))
            return NotImplemented  # never reached: these tensors carry no Python dispatch key

    return IndexedSimulatedTensor


def _on_other_device(empty: Any, cls: type) -> Any:
    """``empty`` (device 0) remade with a device asked of Python. ``_make_subclass`` gives the
    one tensor-creating call that sets that policy without the Python dispatch key -- when the
    class it makes has no ``__torch_dispatch__`` of its own, hence ``cls`` first and the
    subclass after. Its ``detach`` of ``empty`` runs in C++ (PrivateUse1 excluded), so no
    second Python object claims the tensor."""
    import torch

    excluded = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
    with torch._C._ExcludeDispatchKeyGuard(excluded):
        wrapper: Any = torch.Tensor._make_subclass(cls, empty, dispatch_device=True)
    wrapper.__class__ = _state["indexed"]
    return wrapper


def _index_of(tensor: Any) -> int:
    """The simulated device index of a tensor on it, from its storage: right for the tensors
    torch makes in C++ too, whose own ``device`` says 0."""
    return int(getattr(tensor.untyped_storage(), "index", 0))


def _rebuild(host: Any, index: int = 0) -> Any:
    return _wrapper_class()(host, _checked_index(index) if index else 0)


def _host_of(tensor: Any) -> Any:
    host = getattr(tensor.untyped_storage(), "host", None)
    if host is None:
        raise RuntimeError(
            f"this {DEVICE_TYPE} tensor has no values: it was made outside the simulated "
            "accelerator"
        )
    return host


def _call_fused(op: Any, args: Any, kwargs: Any) -> Any:
    """Fused optimizer kernels walk raw memory as if contiguous. A wrapper always says it is
    contiguous while its host may be a strided view (a transposed gradient), so they get
    contiguous copies and what they update is copied back."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten((args, kwargs))
    copies = [
        leaf.contiguous() if isinstance(leaf, torch.Tensor) and not leaf.is_contiguous() else leaf
        for leaf in leaves
    ]
    call_args, call_kwargs = tree_unflatten(copies, spec)
    result = op(*call_args, **call_kwargs)
    for original, copy in zip(leaves, copies, strict=True):
        if copy is not original:
            original.copy_(copy)
    return result


class _Call:
    """One operator call: its arguments with simulated tensors replaced by their host values.

    Arguments are walked directly (tensors, devices, and the lists/tuples aten takes), not with
    pytree: this runs for every operator and pytree was three quarters of its cost."""

    __slots__ = ("devices", "cpu_scalars", "hosts", "host_args", "index")

    def __init__(self) -> None:
        self.devices: set[Any] = set()  # the devices of the tensor arguments but CPU scalars
        self.cpu_scalars = False  # whether a 0-dim CPU tensor was passed
        self.hosts: dict[int, Any] = {}  # id(host values) -> the simulated tensor they back
        self.host_args: set[int] = set()  # ids of CPU tensors passed in
        self.index: int | None = None  # the first simulated tensor argument's device index

    def unwrap(self, value: Any) -> Any:
        import torch

        if isinstance(value, torch.Tensor):
            if value.device.type == DEVICE_TYPE:
                storage = value.untyped_storage()  # carries the values and the device index
                host = getattr(storage, "host", None)
                if host is None:
                    host = _host_of(value)  # raises its one-line error
                self.hosts[id(host)] = value
                index = getattr(storage, "index", 0)
                if self.index is None:
                    self.index = index
                self.devices.add((DEVICE_TYPE, index))
                return host
            self.host_args.add(id(value))
            if value.device.type == "cpu" and value.dim() == 0:
                self.cpu_scalars = True
            else:
                self.devices.add(value.device)
            return value
        if isinstance(value, (list, tuple)):
            return type(value)(self.unwrap(item) for item in value)
        if isinstance(value, torch.device):
            return torch.device("cpu") if value.type == DEVICE_TYPE else value
        if isinstance(value, str) and value.partition(":")[0] == DEVICE_TYPE:
            return "cpu"
        return value

    def input_storages(self) -> set[int]:
        return {host.untyped_storage().data_ptr() for host in self.hosts_values()}

    def hosts_values(self) -> list[Any]:
        # (_host_of, not ``.host``: a tensor torch made in C++, one autograd saved, is a plain
        # Tensor whose storage carries the values all the same)
        return [_host_of(wrapped) for wrapped in self.hosts.values()]


# Operators whose sizes/strides/offsets were computed by torch from the *wrapper's* metadata,
# which is always contiguous from offset 0 (``.contiguous()`` of a wrapper returns itself, so
# ``x.t().contiguous().view(-1)`` reaches ``view`` with a transposed host).
_WRAPPER_COORDINATE_OPS = frozenset(
    ("aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::as_strided")
)


def _to_wrapper_coordinates(name: str, host_args: list[Any], host_kwargs: dict[str, Any]) -> None:
    """Apply the wrapper's coordinates to its host: a host that is not contiguous is read as a
    contiguous copy (what ``.contiguous()`` would have made on a real device), and an explicit
    storage offset counts from the host's own first element."""
    host = host_args[0]
    import torch

    if not isinstance(host, torch.Tensor):
        return
    base_offset = host.storage_offset()
    if not host.is_contiguous():
        host_args[0] = host = host.contiguous()
        base_offset = 0
    if name == "aten::as_strided":
        given = host_args[3] if len(host_args) > 3 else host_kwargs.pop("storage_offset", None)
        offset = base_offset + (given or 0)
        if len(host_args) > 3:
            host_args[3] = offset
        else:
            host_kwargs["storage_offset"] = offset


def _fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    import torch

    name = op.name()
    call = _Call()
    host_args = [call.unwrap(a) for a in args]
    host_kwargs = {key: call.unwrap(value) for key, value in kwargs.items()}
    mixed = len(call.devices) > 1 or (
        call.cpu_scalars and call.devices and not accepts_cpu_scalars(op)
    )
    # copies between devices mix devices by design; every other operator with tensors on the
    # simulated device and elsewhere follows CUDA's rules (cuda_rules.py)
    if mixed and name not in CROSS_DEVICE_OPS:
        error = device_error(op, args, kwargs)  # None for the mixes CUDA accepts
        if error is not None:
            raise error
    if name in ("aten::_copy_from", "aten::_copy_from_and_resize"):
        # copy_ between devices reaches a backend as _copy_from(src, dst), which has no CPU
        # kernel: copy the host values, and answer with the destination as the caller knows it
        source, destination = host_args[0], host_args[1]
        if name == "aten::_copy_from_and_resize":
            destination.resize_(source.shape)
        destination.copy_(source)
        return args[1]
    if name in _WRAPPER_COORDINATE_OPS:
        _to_wrapper_coordinates(name, host_args, host_kwargs)
    if "pin_memory" in host_kwargs:
        host_kwargs["pin_memory"] = False  # no pinned memory here
    # results live on the simulated device when asked for it (an index or the current
    # device), or when computed from its tensors (their device)
    index: int | None = call.index if call.index is not None else _state["current"]
    to_device = kwargs.get("device")
    if to_device is not None:
        target = torch.device(to_device)
        index = _checked_index(target.index) if target.type == DEVICE_TYPE else None
    # an in-place operator on a wrapper must not change its shape (undo_reshape says why);
    # the name carries its overload (aten::squeeze_.dim)
    guarded = None  # (the wrapper's values, and their shape, stride and offset before)
    if host_args and name.partition(".")[0].endswith("_") and id(host_args[0]) in call.hosts:
        values = host_args[0]
        guarded = (values, values.shape, values.stride(), values.storage_offset())
    host_kernel = HOST_KERNELS.get(name)
    if host_kernel is not None:  # a CUDA-only kernel, computed here as CUDA computes it
        result = host_kernel(*host_args, **host_kwargs)
    elif name.startswith("aten::_fused_"):
        result = _call_fused(op, host_args, host_kwargs)
    else:
        result = op(*host_args, **host_kwargs)
    if guarded is not None and guarded[0].shape != guarded[1]:
        undo_reshape(name, *guarded)
    return _rewrap(result, call, index)


def _rewrap(value: Any, call: _Call, index: int | None) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        original = call.hosts.get(id(value))
        if original is not None:  # in-place and out= results are their input
            return original
        if id(value) in call.host_args or index is None or value.device.type != "cpu":
            return value
        if (
            not value.is_contiguous()
            and value.untyped_storage().data_ptr() not in call.input_storages()
        ):
            # A fresh result (no input's view) is made contiguous so that the wrapper's
            # contiguous strides are the truth: fused kernels read memory in that order.
            value = value.contiguous()
        wrapper = _wrapper_class()(value, index)
        # a lazily conjugated (or negated) view: the wrapper says so too, so that what reads
        # the bit (view_as_real, resolve_conj in backward formulas) sees what the values are
        if value.is_conj():
            torch._C._set_conj(wrapper, True)
        if value.is_neg():
            torch._C._set_neg(wrapper, True)
        return wrapper
    if isinstance(value, (list, tuple)):
        return type(value)(_rewrap(item, call, index) for item in value)
    return value
