"""How much memory a cell would take on each device: every storage the shadow run allocates,
counted once, the moment it is allocated and the moment it dies.

    with fake_mode, MemoryCounter(cell_filename) as counter:
        exec(cell_code, shadow_namespace)
    forecast = counter.forecast(shadow_namespace)
    forecast.peak        # {"cuda:0": 2_147_483_648, ...} the most ever allocated at once
    forecast.left        # what is still allocated when the cell ends
    forecast.biggest     # Allocation(device, nbytes, line, variable), largest at the peak

The counting rule is the one PyTorch's ``MemTracker`` uses, without its module and optimizer
bookkeeping: a ``TorchDispatchMode`` sees every operator's outputs (factories, views, autograd's
backward and the optimizer's state included); a storage is counted under its device by
``untyped_storage().nbytes()`` the first time it appears, and uncounted when its storage object
dies (a weak reference's callback: storage objects live exactly as long as their StorageImpl).
Under ``FakeTensorMode`` the storages are fake (no data), yet they are born and die exactly when
real ones would, so the same counter measures a real run (outside fake mode) and predicts it
(inside): the benchmark and the tests compare the two, and the real one with ``MemTracker``.

Storages alive before the counter starts (the fake copies of the user's tensors, modules and
optimizers) are the starting allocation. The counter never walks memory at entry: they are
found the first time an operator reads them, and at :meth:`MemoryCounter.forecast` in the
namespace; being alive then, they were alive from the start.

CUDA's caching allocator hands out blocks in multiples of 512 bytes, and counts those blocks in
``torch.cuda.max_memory_allocated``: :func:`allocator_bytes` rounds storages on ``cuda`` devices
the same way, so the forecast compares with the allocator's own peak. The CPU allocator neither
caches nor rounds. Memory an operator uses only inside its kernel (cuBLAS and cuDNN workspaces)
is not seen by any dispatch-level counter, PyTorch's included.

A ``meta`` tensor holds no memory: its storage is not counted (its nominal size is no device's
need). What a cell materialises from one on a real device (``Module.to_empty``, ``empty_like``)
is a new storage on that device, counted there.

Pure core: no IPython; torch is imported only when a counter is entered.
"""

from __future__ import annotations

import heapq
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from ..objects import (
    Kind,
    TorchTypes,
    kind_of,
    optimizer_params,
    optimizer_state_tensors,
    plain_tensor_attributes,
    storage_identity,
    walk,
)

#: the CUDA caching allocator's smallest block and its rounding step (c10/cuda
#: CUDACachingAllocator.cpp ``kMinBlockSize``); also what ``MemTracker`` rounds cuda storages to
CUDA_BLOCK_BYTES = 512

#: how many allocations :attr:`MemoryForecast.biggest` lists
BIGGEST_COUNT = 5


def allocator_bytes(device: str, nbytes: int) -> int:
    """The bytes the device's allocator reserves for a storage of ``nbytes``: on ``cuda``
    devices a whole number of 512-byte blocks (nothing for an empty storage), on ``meta``
    nothing (it has no memory), elsewhere exactly ``nbytes``."""
    if nbytes <= 0 or device == "meta":
        return 0
    if device == "cuda" or device.startswith("cuda:"):
        return -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
    return nbytes


@dataclass(frozen=True)
class Allocation:
    """One storage: where, how big (as the allocator counts it), the line of the cell that
    allocated it (None: allocated before the cell, or outside the cell's own code) and the
    shadow namespace's name that holds it after the run, or for a storage from before the
    cell that the run freed, the name that held it then (None: freed, or held by nothing
    named)."""

    device: str
    nbytes: int
    line: int | None
    variable: str | None


@dataclass(frozen=True)
class MemoryForecast:
    """Bytes per device (``"cuda:0"``, ``"cpu"``) before, at the peak of, and after the run."""

    start: dict[str, int]
    peak: dict[str, int]
    left: dict[str, int]
    biggest: tuple[Allocation, ...] = field(default=())

    def growth(self, device: str) -> int:
        """What the run needs on ``device`` beyond what was allocated when it started: the
        figure to compare with the device's free memory."""
        return self.peak.get(device, 0) - self.start.get(device, 0)


class _Storage:
    """One counted storage; holds only a weak reference to it."""

    __slots__ = ("key", "device", "nbytes", "line", "before", "born", "died", "ref")

    def __init__(self, key: Any, device: str, nbytes: int, line: int | None, before: bool) -> None:
        self.key = key  # the storage's address, the ledger's key
        self.device = device
        self.nbytes = nbytes
        self.line = line
        self.before = before  # alive before the counter started
        self.born = 0  # the counter's clock when it was allocated (0: before the start)
        self.died: int | None = None  # the counter's clock when it died
        self.ref: weakref.ref[Any] | None = None


def _nbytes_of(record: _Storage) -> int:
    return record.nbytes


def _biggest_first(record: _Storage) -> tuple[int, int]:
    """Bigger first; among equal sizes the older (what was there before the run first)."""
    return (-record.nbytes, record.born)


class _Ledger:
    """The running totals: storages alive, bytes per device now, at the start and at the peak,
    and the biggest storages alive at each device's peak."""

    def __init__(self) -> None:
        self.live: dict[Any, _Storage] = {}
        self.before: list[_Storage] = []
        self.now: dict[str, int] = {}
        self.start: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        #: per device: the biggest storages born in the run alive at its peak, and when
        self.peak_top: dict[str, list[_Storage]] = {}
        self.peak_clock: dict[str, int] = {}
        #: devices whose peak rose since their last snapshot (taken lazily, at the next free)
        self.rising: set[str] = set()
        self.clock = 0
        self.open = True

    def allocate(self, key: Any, record: _Storage) -> None:
        self.clock += 1
        record.born = self.clock
        self.live[key] = record
        device = record.device
        now = self.now.get(device, 0) + record.nbytes
        self.now[device] = now
        if now > self.peak.get(device, -1):
            self.peak[device] = now
            self.rising.add(device)

    def found_before(self, key: Any, record: _Storage) -> None:
        """A storage alive since before the start: part of the start, of every moment since,
        and so of the peak (and of the set alive at it: see :meth:`biggest`)."""
        self.live[key] = record
        self.before.append(record)
        device = record.device
        self.start[device] = self.start.get(device, 0) + record.nbytes
        self.now[device] = self.now.get(device, 0) + record.nbytes
        self.peak[device] = self.peak.get(device, 0) + record.nbytes

    def resize(self, record: _Storage, nbytes: int) -> None:
        device = record.device
        if nbytes < record.nbytes and device in self.rising:
            self.snapshot(device)
        self.clock += 1
        self.now[device] = self.now.get(device, 0) + nbytes - record.nbytes
        record.nbytes = nbytes
        if self.now[device] > self.peak.get(device, -1):
            self.peak[device] = self.now[device]
            self.rising.add(device)

    def free(self, key: Any, record: _Storage) -> None:
        if not self.open or self.live.get(key) is not record:
            return
        device = record.device
        if device in self.rising:
            self.snapshot(device)
        self.clock += 1
        del self.live[key]
        record.died = self.clock
        self.now[device] -= record.nbytes

    def snapshot(self, device: str) -> None:
        """Keep the biggest storages alive now on ``device`` (now is its peak)."""
        born_here = [r for r in self.live.values() if r.device == device and not r.before]
        self.peak_top[device] = heapq.nlargest(BIGGEST_COUNT, born_here, key=_nbytes_of)
        self.peak_clock[device] = self.clock
        self.rising.discard(device)

    def close(self) -> None:
        for device in list(self.rising):
            self.snapshot(device)
        for device in self.now:
            if device not in self.peak_clock:
                # never above its start: the peak was the start, when what the run found
                # there was alive (and nothing of the run's own yet)
                self.peak_top[device] = []
                self.peak_clock[device] = 0
        self.open = False

    def biggest(self) -> list[_Storage]:
        """The biggest storages alive at their device's peak, all devices together."""
        found: list[_Storage] = []
        for device, top in self.peak_top.items():
            at = self.peak_clock[device]
            found += [
                r for r in self.before if r.device == device and (r.died is None or r.died > at)
            ]
            found += top
        return sorted(found, key=_biggest_first)[:BIGGEST_COUNT]


class MemoryCounter:
    """Counts the storages a run allocates and frees, per device; enter it inside the
    ``FakeTensorMode`` of the shadow run (or outside any, to measure a real run the same way).

    ``cell_filename`` is the ``co_filename`` the cell's code was compiled with: an allocation's
    line is the line of the innermost frame of that file on the stack when it happened.
    """

    def __init__(self, cell_filename: str, namespace: dict[str, Any] | None = None) -> None:
        self.cell_filename = cell_filename
        #: the shadow namespace as the run starts: names the storages there held before it
        self._namespace = namespace
        self._names_before: dict[Any, str] = {}
        self._ledger = _Ledger()
        self._lock = threading.RLock()
        self._types: TorchTypes | None = None
        self._mode: Any = None
        self._thread = threading.get_ident()
        self._foreach_lists: list[list[Any]] = []

    def __enter__(self) -> MemoryCounter:
        self._types = TorchTypes.current()
        if self._types is None:
            raise RuntimeError("MemoryCounter needs torch imported")
        if self._namespace is not None:
            self._names_before = _names_by_storage(
                self._types, self._namespace, attrgetter("_cdata")
            )
            self._namespace = None  # the names are kept, not the namespace
        self._thread = threading.get_ident()
        self._foreach_lists = _count_fake_as_plain()
        self._mode = _counting_mode_class()(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        mode, self._mode = self._mode, None
        try:
            if mode is not None:
                mode.__exit__(*exc)
        finally:
            for types in self._foreach_lists:
                types.pop()
            self._foreach_lists = []
            with self._lock:
                self._ledger.close()

    # -- what the dispatch mode reports -------------------------------------------------

    def saw_inputs(self, tensors: list[Any]) -> None:
        """Tensors an operator reads: any storage not seen yet was alive before the start."""
        for tensor in tensors:
            self._count(tensor, before=True)

    def saw_outputs(self, tensors: list[Any]) -> None:
        """Tensors an operator returned: new storages are allocations of the run; a known
        storage that changed size (``out=``, ``resize_``) is counted at its new size."""
        for tensor in tensors:
            self._count(tensor, before=False)

    def _count(self, tensor: Any, before: bool) -> None:
        found = _storage_of(self._types, tensor)
        if found is None:
            return
        storage, device, raw_nbytes = found
        if device == "meta":
            return  # no memory: not an allocation, not in the biggest
        key = storage._cdata
        nbytes = allocator_bytes(device, raw_nbytes)
        with self._lock:
            ledger = self._ledger
            record = ledger.live.get(key)
            if record is not None:
                if record.nbytes != nbytes and not before:
                    ledger.resize(record, nbytes)
                return
            record = _Storage(key, device, nbytes, None if before else self._cell_line(), before)
            try:
                record.ref = weakref.ref(storage, _on_free(ledger, self._lock, key, record))
            except TypeError:
                return  # a storage that cannot be watched cannot be counted honestly
            if before:
                ledger.found_before(key, record)
            else:
                ledger.allocate(key, record)

    def _cell_line(self) -> int | None:
        """The line of the cell running now: the innermost frame of the cell's file on this
        thread, or on the cell's thread when autograd runs the backward on a worker thread."""
        frame = sys._getframe(2)
        if threading.get_ident() != self._thread:
            frame = sys._current_frames().get(self._thread)  # type: ignore[assignment]
        filename = self.cell_filename
        while frame is not None:
            if frame.f_code.co_filename == filename:
                return frame.f_lineno
            frame = frame.f_back  # type: ignore[assignment]
        return None

    # -- the result -----------------------------------------------------------------------

    def forecast(self, shadow_namespace: dict[str, Any]) -> MemoryForecast:
        """The figures of the run, the storages the namespace holds counted in: those the run
        never touched were alive all along. Call it after the ``with`` block."""
        T = self._types or TorchTypes.current()
        names: dict[Any, str] = {}
        if T is not None:
            names = _names_by_storage(T, shadow_namespace, id, count=self._count)
        with self._lock:
            ledger = self._ledger
            if ledger.open:
                ledger.close()
            biggest = tuple(
                Allocation(r.device, r.nbytes, r.line, _variable(r, names, self._names_before))
                for r in ledger.biggest()
            )
            return MemoryForecast(
                start=_nonzero(ledger.start),
                peak=_nonzero(ledger.peak),
                left=_nonzero(ledger.now),
                biggest=biggest,
            )


def _storage_of(T: TorchTypes | None, tensor: Any) -> tuple[Any, str, int] | None:
    """(storage, device, nbytes) of the one storage a tensor's data lives in; None for tensors
    without one (sparse, nested). Fake tensors keep a storage of their own (no data, the
    size); a storage-less wrapper (the simulated accelerator's) is counted by the storage of
    the tensor it wraps, as the scan counts it."""
    try:
        storage = tensor.untyped_storage()
        nbytes = storage.nbytes()
        device = str(tensor.device)
    except Exception:
        return None
    if nbytes == 0 and device != "meta" and _has_elements(tensor):
        identity = storage_identity(T, tensor)
        if identity.storage is None:
            return None
        return identity.storage, device, identity.nbytes
    return storage, device, nbytes


def _has_elements(tensor: Any) -> bool:
    try:
        return bool(tensor.numel())
    except Exception:
        return False


def _nonzero(totals: dict[str, int]) -> dict[str, int]:
    return {device: nbytes for device, nbytes in sorted(totals.items()) if nbytes}


def _variable(record: _Storage, names: dict[Any, str], before: dict[Any, str]) -> str | None:
    """The name holding the storage after the run; for one alive before the cell and freed
    by it (a parameter the cell moved away), the name that held it before."""
    storage = record.ref() if record.ref is not None else None
    if storage is None or record.died is not None:
        return before.get(record.key) if record.before else None
    return names.get(id(storage))


def _names_by_storage(
    T: TorchTypes,
    namespace: dict[str, Any],
    key: Callable[[Any], Any],
    count: Callable[[Any, bool], None] | None = None,
) -> dict[Any, str]:
    """{key(storage): the first name reaching it} over the tensors of ``namespace``; each
    tensor also goes to ``count(tensor, before=True)`` where given."""
    names: dict[Any, str] = {}
    try:
        for name, tensor in named_tensors(T, namespace):
            found = _storage_of(T, tensor)
            if found is not None:
                names.setdefault(key(found[0]), name)
                if count is not None:
                    count(tensor, True)
    finally:
        T.forget_types()  # the walk's per-type caches must not keep a user's class
    return names


def _on_free(ledger: _Ledger, lock: threading.RLock, key: Any, record: _Storage) -> Any:
    def freed(_ref: object) -> None:
        with lock:
            ledger.free(key, record)

    return freed


def _count_fake_as_plain() -> list[list[Any]]:
    """Under fake mode, let fake tensors pass the checks by which optimizers and
    ``clip_grad_norm_`` choose their multi-tensor (foreach) path, ``type(t) in [Tensor,
    Parameter]``: the copies stand for plain tensors, and a foreach step allocates its
    temporaries for all parameters at once where the per-parameter loop a fake tensor would
    take allocates one parameter's. The lists are torch's own (DTensor appends itself the same
    way); the caller pops what was appended when the counter leaves."""
    from torch._guards import detect_fake_mode

    if detect_fake_mode() is None:
        return []
    import torch.optim.optimizer as optimizer_module
    import torch.utils._foreach_utils as foreach_utils
    from torch._subclasses.fake_tensor import FakeTensor

    appended: list[list[Any]] = []
    lists: tuple[list[Any], ...] = (
        optimizer_module._foreach_supported_types,
        foreach_utils._foreach_supported_types,
    )
    for types in lists:
        if FakeTensor not in types:
            types.append(FakeTensor)
            appended.append(types)
    return appended


_mode_class: list[type] = []


def _counting_mode_class() -> type:
    """The dispatch mode that reports every operator's tensors to its counter (built on first
    use: importing this module must not import torch)."""
    if _mode_class:
        return _mode_class[0]
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    tensor_type = torch.Tensor
    aten = torch.ops.aten
    # ``torch.tensor(data)`` builds its tensor outside the dispatcher and hands it to one of
    # these: that input is the new tensor (its own output, in a real run), never an old one
    lifting = {aten.lift_fresh.default, aten.lift_fresh_copy.default, aten.lift.default}

    class CountingMode(TorchDispatchMode):
        def __init__(self, counter: MemoryCounter) -> None:
            super().__init__()
            self.counter = counter

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            kwargs = kwargs or {}
            if func not in lifting:
                inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, tensor_type)]
                self.counter.saw_inputs(inputs)
            out = func(*args, **kwargs)
            outputs = [t for t in tree_leaves(out) if isinstance(t, tensor_type)]
            self.counter.saw_outputs(outputs)
            return out

    _mode_class.append(CountingMode)
    return CountingMode


# -- which name holds a storage -----------------------------------------------------------


def named_tensors(T: TorchTypes, namespace: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every tensor the namespace holds, with the name a user would type for it: ``x``,
    ``batch['x']``, ``model.fc.weight``, ``model.fc.weight.grad``,
    ``opt.state[model.fc.weight]['exp_avg']`` (parameters an optimizer names by the module
    that holds them, else by their place in its parameter list)."""
    found: list[tuple[str, Any]] = []
    optimizers: list[tuple[str, Any]] = []
    param_names: dict[int, str] = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        try:
            leaves = walk(T, value, name).leaves
        except Exception:
            continue
        for leaf in leaves:
            if leaf.kind in (Kind.TENSOR, Kind.PARAMETER):
                _add_tensor(found, leaf.path, leaf.value)
                param_names.setdefault(id(leaf.value), leaf.path)
            elif leaf.kind == Kind.MODULE:
                for path, tensor in _module_tensors(T, leaf.path, leaf.value):
                    _add_tensor(found, path, tensor)
                    param_names.setdefault(id(tensor), path)
            elif leaf.kind == Kind.OPTIMIZER:
                optimizers.append((leaf.path, leaf.value))
    for path, optimizer in optimizers:
        try:
            states = optimizer_state_tensors(T, optimizer)
            order = {id(p): i for i, p in enumerate(optimizer_params(optimizer))}
        except Exception:
            continue
        for param, state_path, tensor in states:
            owner = param_names.get(id(param)) or str(order.get(id(param), "?"))
            key = state_path if state_path.startswith("[") else f"[{state_path!r}]"
            found.append((f"{path}.state[{owner}]{key}", tensor))
    return found


def _add_tensor(found: list[tuple[str, Any]], path: str, tensor: Any) -> None:
    found.append((path, tensor))
    try:
        grad = tensor.grad if tensor.is_leaf else None
    except Exception:
        return
    if grad is not None:
        found.append((f"{path}.grad", grad))


def _module_tensors(T: TorchTypes, path: str, module: Any) -> list[tuple[str, Any]]:
    """A module's parameters and buffers by qualified name, read from the ``_modules``,
    ``_parameters`` and ``_buffers`` dicts (never a module's own methods), then its plain
    tensor attributes (``model.pos.pe``)."""
    found: list[tuple[str, Any]] = []
    stack = [(path, module)]
    seen: set[int] = set()
    submodules: list[Any] = []
    while stack:
        prefix, current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        submodules.append(current)
        for attribute in ("_parameters", "_buffers"):
            own = getattr(current, attribute, None)
            if isinstance(own, dict):
                found += [(f"{prefix}.{n}", t) for n, t in dict.items(own) if t is not None]
        children = getattr(current, "_modules", None)
        if isinstance(children, dict):
            stack += [
                (f"{prefix}.{n}", child)
                for n, child in reversed(list(dict.items(children)))
                if child is not None and kind_of(T, child) == Kind.MODULE
            ]
    found += [
        (f"{path}.{loose.name}", loose.tensor)
        for loose in plain_tensor_attributes(T, module, submodules)
    ]
    return found
