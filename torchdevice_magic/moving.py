"""The move engine: put named tensors, modules and optimizers on another device, all or nothing.

``move(namespace, "cuda")`` is what the widget's "Move all to cuda" button, the sidebar and the
public API call. It never touches IPython or widgets; it works on any mutable mapping of names.

How a move runs, and why each step is there:

1. **Check** (nothing is touched). The device string parses and the device exists in this
   kernel (``torch.cuda.is_available()`` / ``device_count()``, which do not create a CUDA
   context); every name exists; nothing is refused (parameters on ``meta`` going to a real
   device, models dispatched by accelerate hooks); the bytes that would land on the target
   fit in its free memory. A refusal raises :class:`MoveError` with a one-line reason.
2. **Move in place / copy** (no name is rebound yet). Modules move with ``module.to(device)``
   and Parameters stay the same objects, because optimizers and user code hold them; before
   that, every parameter's data, gradient and every buffer is recorded so it can be put back.
   Plain tensors and containers of tensors are copied but not rebound.
3. **Synchronise** once: copies to CUDA are issued with ``non_blocking=True``.
4. **Commit**: rebind names, install the new optimizer state. Nothing here allocates.

If anything in 2-4 fails (out of memory, an object whose ``.to()`` raises, Ctrl-C), what was
moved in place is restored from the records and the new copies are dropped: the namespace is
exactly as before (same objects bound to the same names, same devices, same values) and the
result's ``failed`` says what failed.

Choices a reader should know about:

* Optimizers: moving an optimizer moves its *state* to where its parameters will be (the
  target for parameters moved in the same call, their current device otherwise); it never
  moves the parameters themselves, which belong to their module. ``step`` counters stay where
  torch keeps them (on the CPU unless the group is ``capturable`` or ``fused``), like
  ``Optimizer.load_state_dict`` does. When named modules or Parameters move, every optimizer
  bound to a top-level name whose state belongs to them is moved along, so ``opt.step()``
  keeps working; it is listed in ``moved``.
* A Parameter bound to a top-level name (``w = model.weight``) moves in place, so it stays the
  module's parameter. Moving it alone leaves the rest of the module where it was.
* Storage sharing is kept: two names for one tensor, a view and its base, and a tensor that
  aliases a module's parameter (``model.state_dict()``) still share storage on the target,
  which is copied once. A view whose base is not being moved is copied on its own, like
  ``view.to(device)`` would.
* Containers (exact ``list``, ``tuple``, ``dict``, ``OrderedDict``, ``defaultdict`` and
  namedtuples, up to 3 levels deep) are rebuilt only if one of their tensors changed;
  modules and optimizers inside containers are left alone (name them directly).
* Moving to CUDA reads the target's free memory, which creates the CUDA context if it did not
  exist yet; the move is about to create it anyway. Nothing else here initialises CUDA.
"""

from __future__ import annotations

import copy
import inspect
import re
import time
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from .scanner import is_ipython_bookkeeping
from .units import device_sort_key, format_bytes

if TYPE_CHECKING:  # torch is imported inside functions: importing this module must not import it
    import torch

__all__ = [
    "resolve_device",
    "MoveError",
    "MoveResult",
    "MovedItem",
    "ProgressCallback",
    "available_devices",
    "best_device",
    "move",
]

ProgressCallback = Callable[[int, int], None]

#: Container levels searched for tensors (a dict of lists of tuples is 3 levels).
MAX_DEPTH = 3

_BOOKKEEPING = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
# IPython's output and input caches: refused even when named explicitly (rebinding them would
# break IPython's history); user names such as ``_idx`` are allowed when named explicitly.
_HISTORY_NAME = re.compile(r"_{1,3}|_\d+|_i{1,3}|_i\d+|_oh|_ih|_dh")
_META_ADVICE = (
    "parameters on meta have no data: use model.to_empty(device=...) and load the weights again"
)


class MoveError(ValueError):
    """A move was refused before anything was touched; the message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(_one_line(message))


class MovedItem(NamedTuple):
    """One top-level name that was moved (a named tuple: cheap to make by the ten thousand)."""

    name: str
    kind: str  # "tensor", "parameter", "module", "optimizer" or "container"
    bytes: int  # what the object occupies, each storage counted once
    from_devices: tuple[str, ...]
    to_device: str


@dataclass
class MoveResult:
    """What a :func:`move` did. When ``failed`` is set, nothing changed."""

    device: str
    moved: list[MovedItem] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: str | None = None
    seconds: float = 0.0
    bytes_moved: int = 0
    #: Bytes of replaced tensors that stay allocated on their old device because something
    #: else (IPython's ``Out``, a container that was not moved, an attribute) still holds them.
    still_held_bytes: int = 0
    _undo: _UndoRecord | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.failed is None

    @property
    def can_undo(self) -> bool:
        """False for a move to meta (meta keeps no data), a failed move, or one undone."""
        return self._undo is not None and not self._undo.used and not self._undo.to_meta

    def summary(self) -> str:
        """One line for a status bar, e.g. ``Moved 3 objects (1.2 MiB) to meta in 4 ms``."""
        if self.failed is not None:
            return _one_line(f"Nothing was moved: {self.failed}")
        skipped = f"; {len(self.skipped)} skipped" if self.skipped else ""
        if not self.moved:
            return f"Nothing to move to {self.device}{skipped}"
        n = len(self.moved)
        text = (
            f"Moved {n} object{'s' if n != 1 else ''} ({format_bytes(self.bytes_moved)}) "
            f"to {self.device} in {_format_seconds(self.seconds)}{skipped}"
        )
        if self.still_held_bytes:
            text += f"; {format_bytes(self.still_held_bytes)} still held on the old device by other references"
        return text

    def undo(self, *, progress: ProgressCallback | None = None) -> MoveResult:
        """Move everything this move moved back where it was, each object to its own device(s).

        Modules and Parameters move back in place; tensors and containers are rebound. A name
        rebound since the move is skipped. Raises :class:`MoveError` for a move to ``meta``
        (meta tensors keep no data), a failed move, or a move already undone.
        """
        record = self._undo
        if self.failed is not None:
            raise MoveError("nothing to undo: this move failed and changed nothing")
        if record is None:
            raise MoveError("nothing to undo: this move changed nothing")
        if record.to_meta:
            raise MoveError("cannot undo a move to meta: meta tensors keep no data")
        if record.used:
            raise MoveError("this move was already undone")
        result = _undo(record, progress)
        if result.failed is None:
            record.used = True
        return result


# --------------------------------------------------------------------------------------------
# Devices


def _one_line(text: object) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def _reason(error: BaseException, limit: int = 240) -> str:
    """``Type: first line of the message``, cut short (torch's dispatcher errors list every
    backend on one very long line)."""
    text = _one_line(error)
    reason = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return reason if len(reason) <= limit else reason[: limit - 1].rstrip() + "…"


def _format_seconds(seconds: float) -> str:
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


def _xpu_module() -> Any:
    import torch

    xpu = getattr(torch, "xpu", None)
    return xpu if xpu is not None and hasattr(xpu, "is_available") else None


def _resolve_device(device: Any, allow_meta: bool) -> torch.device:
    """Parse and check a target device without initialising CUDA; raise :class:`MoveError`."""
    import torch

    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device.strip())
        except (RuntimeError, ValueError, TypeError) as e:
            raise MoveError(f"{device!r} is not a device: {_one_line(e)}") from None
    else:
        raise MoveError(f"{device!r} is not a device: expected a string such as 'cuda:0'")
    kind, index = dev.type, dev.index
    if kind == "cpu":
        if index not in (None, 0):
            raise MoveError(f"{dev} does not exist; this kernel sees cpu")
        return torch.device("cpu")
    if kind == "meta":
        if not allow_meta:
            raise MoveError("moving to meta is turned off: meta tensors keep no data")
        return torch.device("meta")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise MoveError("CUDA is not available in this kernel")
        count = torch.cuda.device_count()
        if index is None:
            index = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
        if index >= count:
            seen = ", ".join(f"cuda:{i}" for i in range(count))
            raise MoveError(f"cuda:{index} does not exist; this kernel sees {seen}")
        return torch.device("cuda", index)
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise MoveError("MPS is not available in this kernel")
        if index not in (None, 0):
            raise MoveError(f"{dev} does not exist; this kernel sees mps:0")
        return torch.device("mps", 0)
    if kind == "xpu":
        xpu = _xpu_module()
        if xpu is None or not xpu.is_available():
            raise MoveError("XPU is not available in this kernel")
        count = xpu.device_count()
        if index is None:
            index = xpu.current_device() if xpu.is_initialized() else 0
        if index >= count:
            seen = ", ".join(f"xpu:{i}" for i in range(count))
            raise MoveError(f"xpu:{index} does not exist; this kernel sees {seen}")
        return torch.device("xpu", index)
    raise MoveError(f"moving to {kind} devices is not supported; use cpu, cuda, mps, xpu or meta")


def resolve_device(device: Any, allow_meta: bool) -> torch.device:
    """The device a user typed, validated: it parses and exists in this kernel (MoveError with
    one line otherwise). Never initialises CUDA."""
    return _resolve_device(device, allow_meta)


def available_devices(allow_meta: bool) -> list[tuple[str, bool, str]]:
    """``(device, enabled, reason)`` for cpu, each cuda:N, mps, xpu and meta.

    Never initialises CUDA: only ``is_available()`` and ``device_count()`` are asked.
    """
    import torch

    out: list[tuple[str, bool, str]] = [("cpu", True, "")]
    if torch.cuda.is_available():
        out.extend((f"cuda:{i}", True, "") for i in range(torch.cuda.device_count()))
    else:
        out.append(("cuda", False, "CUDA is not available in this kernel"))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append(("mps", True, ""))
    else:
        out.append(("mps", False, "MPS is not available in this kernel"))
    xpu = _xpu_module()
    if xpu is not None and xpu.is_available():
        out.extend((f"xpu:{i}", True, "") for i in range(xpu.device_count()))
    else:
        out.append(("xpu", False, "XPU is not available in this kernel"))
    if allow_meta:
        out.append(("meta", True, ""))
    else:
        out.append(("meta", False, "moving to meta is turned off: meta tensors keep no data"))
    return out


def best_device() -> str:
    """The fastest device this kernel has: cuda, then mps, then xpu, then cpu."""
    import torch

    if torch.cuda.is_available():
        index = torch.cuda.current_device() if torch.cuda.is_initialized() else 0
        return f"cuda:{index}"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    xpu = _xpu_module()
    if xpu is not None and xpu.is_available():
        index = xpu.current_device() if xpu.is_initialized() else 0
        return f"xpu:{index}"
    return "cpu"


def _free_bytes(dev: torch.device) -> int | None:
    """Free memory on ``dev`` in bytes, or None when it cannot be known."""
    import torch

    try:
        if dev.type == "cuda":
            # mem_get_info creates the CUDA context if needed; this is only asked when the move
            # is about to put bytes on this GPU, which creates it anyway.
            free, _total = torch.cuda.mem_get_info(dev.index)
            cached = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
            return int(free) + max(int(cached), 0)
        if dev.type == "cpu":
            with open("/proc/meminfo", encoding="ascii") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
            return None
        if dev.type == "xpu":
            xpu = _xpu_module()
            if xpu is not None and hasattr(xpu, "mem_get_info"):
                return int(xpu.mem_get_info(dev.index)[0])
            return None
        if dev.type == "mps":
            mps = torch.mps
            if hasattr(mps, "recommended_max_memory"):
                return int(mps.recommended_max_memory()) - int(mps.driver_allocated_memory())
            return None
    except (OSError, RuntimeError, ValueError, AttributeError):
        return None
    return None


# --------------------------------------------------------------------------------------------
# What can be moved


def _is_namedtuple(obj: Any) -> bool:
    tp = type(obj)
    return issubclass(tp, tuple) and hasattr(tp, "_fields") and hasattr(tp, "_make")


def _container_kind(obj: Any) -> str | None:
    """Which supported container ``obj`` is ("list", "tuple", "namedtuple", "dict", "mapping"
    for OrderedDict/defaultdict), or None: only exact types, never user subclasses."""
    tp = type(obj)
    if tp is list:
        return "list"
    if tp is tuple:
        return "tuple"
    if tp is dict:
        return "dict"
    if tp is OrderedDict or tp is defaultdict:
        return "mapping"
    if issubclass(tp, tuple) and _is_namedtuple(obj):
        return "namedtuple"
    return None


def _children(obj: Any, kind: str) -> Iterable[Any]:
    return obj.values() if kind in ("dict", "mapping") else obj


def _has_tensor(obj: Any, depth: int, tensor_type: type) -> bool:
    kind = _container_kind(obj)
    if kind is None:
        return False
    for child in _children(obj, kind):
        if isinstance(child, tensor_type):
            return True
        if (
            depth < MAX_DEPTH
            and _container_kind(child) is not None
            and _has_tensor(child, depth + 1, tensor_type)
        ):
            return True
    return False


def _container_leaves(obj: Any, depth: int, out: list[Any], odd: list[str], types: Any) -> None:
    """Tensors of a container in a fixed order (the order ``_rebuild`` walks), up to MAX_DEPTH."""
    tensor_type, module_type, optim_type = types
    kind = _container_kind(obj)
    if kind is None:
        return
    for child in _children(obj, kind):
        if isinstance(child, tensor_type):
            out.append(child)
        elif depth < MAX_DEPTH and _container_kind(child) is not None:
            _container_leaves(child, depth + 1, out, odd, types)
        elif isinstance(child, (module_type, optim_type)):
            odd.append(type(child).__name__)


def _rebuild(
    obj: Any, depth: int, new_of: dict[int, Any], memo: dict[int, Any], tensor_type: type
) -> Any:
    """The container with moved tensors in place of the old ones; the same object if none moved."""
    key = id(obj)
    if key in memo:
        return memo[key]
    kind = _container_kind(obj)
    if kind is None:
        return obj

    def sub(child: Any) -> Any:
        if isinstance(child, tensor_type):
            return new_of.get(id(child), child)
        if depth < MAX_DEPTH and _container_kind(child) is not None:
            return _rebuild(child, depth + 1, new_of, memo, tensor_type)
        return child

    result: Any
    if kind in ("dict", "mapping"):
        changed = {}
        for k, v in obj.items():
            nv = sub(v)
            if nv is not v:
                changed[k] = nv
        if not changed:
            result = obj
        elif kind == "dict":
            result = {k: changed.get(k, v) if k in changed else v for k, v in obj.items()}
        else:
            # copy.copy keeps OrderedDict attributes (state_dict's _metadata) and default_factory
            result = copy.copy(obj)
            for k, v in changed.items():
                result[k] = v
    else:
        items = [sub(v) for v in obj]
        if all(a is b for a, b in zip(items, obj, strict=True)):
            result = obj
        elif kind == "list":
            result = items
        elif kind == "tuple":
            result = tuple(items)
        else:
            result = type(obj)._make(items)
    memo[key] = result
    return result


def _static_attr(obj: Any, name: str) -> Any:
    """An attribute looked up without running properties or ``__getattr__``."""
    try:
        return inspect.getattr_static(obj, name, None)
    except Exception:
        return None


def _accelerate_reason(name: str, module: Any) -> str | None:
    """Why a module dispatched by accelerate must not be moved by hand, or None."""
    device_map = _static_attr(module, "hf_device_map")
    if isinstance(device_map, dict) and len({str(v) for v in device_map.values()}) > 1:
        places = ", ".join(sorted({str(v) for v in device_map.values()}))
        return (
            f"{name} is dispatched across devices by accelerate (hf_device_map: {places}); "
            "moving it by hand breaks its hooks: load it again with the device_map you want, "
            f"or call accelerate.hooks.remove_hook_from_module({name}, recurse=True) first"
        )
    for sub in module.modules():
        if "_hf_hook" in sub.__dict__:
            return (
                f"{name} has accelerate hooks (_hf_hook) that place its weights; moving it by "
                "hand breaks them: load it again with the device_map you want, or call "
                f"accelerate.hooks.remove_hook_from_module({name}, recurse=True) first"
            )
    return None


def _tensor_nbytes(t: Any) -> int:
    """Bytes of a tensor without storage access (sparse, nested, some subclasses)."""
    try:
        if t.is_sparse:
            return int(t._values().nbytes + t._indices().nbytes)
        return int(t.numel() * t.element_size())
    except Exception:
        return 0


def _storage(t: Any) -> tuple[Any, int, Any]:
    """(key, nbytes, storage object) of a tensor's storage; a per-tensor key when it has none."""
    try:
        s = t.untyped_storage()
        return s._cdata, s.nbytes(), s
    except Exception:
        return ("tensor", id(t)), _tensor_nbytes(t), None


# --------------------------------------------------------------------------------------------
# In-place moves (modules, Parameters) and how to put them back


class _ParamRecord:
    """What a Parameter held before the move: enough to put it back exactly."""

    __slots__ = ("param", "data", "cls", "requires_grad", "grad", "grad_data")

    def __init__(self, param: Any) -> None:
        self.param = param
        self.data = param.data  # a plain alias of the old storage: keeps it alive until commit
        self.cls = type(param)
        self.requires_grad = param.requires_grad
        grad = param.grad
        self.grad = grad
        self.grad_data = grad.data if grad is not None else None

    def restore(self) -> None:
        import torch

        p, data, grad = self.param, self.data, self.grad
        if torch._has_compatible_shallow_copy_type(p, data):
            if grad is not None and self.grad_data is not None:
                grad.data = self.grad_data
            p.data = data
            if p.grad is not grad:
                p.grad = grad
            return
        # cpu <-> meta: the TensorImpl types differ, so the move swapped tensors; swap back.
        p.grad = None
        torch.utils.swap_tensors(p, torch.nn.Parameter(data, requires_grad=self.requires_grad))
        if type(p) is not self.cls:
            p.__class__ = self.cls
        if grad is not None and self.grad_data is not None:
            if torch._has_compatible_shallow_copy_type(grad, self.grad_data):
                grad.data = self.grad_data
            else:
                torch.utils.swap_tensors(grad, self.grad_data.detach())
            p.grad = grad


_IN_PLACE_OK: dict[tuple[str, str], bool] = {}


def _in_place_ok(src: Any, dst: Any) -> bool:
    """Whether ``param.data = tensor_on_dst`` works for a parameter on ``src`` (cached)."""
    import torch

    key = (src.type, dst.type)
    ok = _IN_PLACE_OK.get(key)
    if ok is None:
        a = torch.empty(0, device=src)
        b = torch.empty(0, device=dst)
        ok = _IN_PLACE_OK[key] = bool(torch._has_compatible_shallow_copy_type(a, b))
    return ok


class _ModuleJob:
    """One module (or a holder of one standalone Parameter) moved in place, and its records."""

    __slots__ = ("name", "module", "dest", "dest_of", "subs", "params", "buffers", "nbytes")

    def __init__(self, name: str, module: Any, dest: Any, dest_of: dict[int, Any] | None) -> None:
        self.name = name
        self.module = module
        self.dest = dest  # one device for everything, or None and ``dest_of`` (undo)
        self.dest_of = dest_of
        self.subs: list[tuple[Any, list[tuple[str, Any]], list[tuple[str, Any]]]] = []
        self.params: list[_ParamRecord] = []
        self.buffers: list[tuple[Any, Any, Any, str]] = []  # (storage key, buffer, owner, key)
        self.nbytes = 0  # bytes it will copy (for progress)

    def target_of(self, t: Any) -> Any:
        if self.dest is not None:
            return self.dest
        return (self.dest_of or {}).get(id(t), t.device)

    def apply(self) -> None:
        import torch

        future = torch.__future__
        swap = self._needs_swap() and not future.get_swap_module_params_on_conversion()
        if swap:
            future.set_swap_module_params_on_conversion(True)
        try:
            if self.dest is not None:
                if self.dest.type == "cuda":
                    self.module.to(self.dest, non_blocking=True)
                else:
                    self.module.to(self.dest)
            else:
                dest_of = self.dest_of or {}

                def convert(t: Any) -> Any:
                    d = dest_of.get(id(t), t.device)
                    return t.to(d, non_blocking=True) if d.type == "cuda" else t.to(d)

                self.module._apply(convert)
        finally:
            if swap:
                future.set_swap_module_params_on_conversion(False)
        for sub, params, _buffers in self.subs:
            for key, p in params:
                if sub._parameters.get(key) is not p:
                    raise RuntimeError(
                        f"{type(sub).__name__}.{key} was replaced by a new Parameter "
                        "(optimizers would lose it)"
                    )

    def _needs_swap(self) -> bool:
        """Some devices' tensors cannot take another device's data in place (cpu and meta:
        different TensorImpl types), so ``module.to`` would put new Parameter objects in the
        module; swapping keeps the objects, and the optimizers that hold them, valid."""
        import torch

        if torch.__future__.get_overwrite_module_params_on_conversion():
            return True
        targets = {self.dest} if self.dest is not None else set((self.dest_of or {}).values())
        sources = {r.data.device for r in self.params}
        return any(not _in_place_ok(a, b) for a in sources for b in targets if a != b)

    def restore(self) -> None:
        for sub, params, buffers in self.subs:
            for key, p in params:
                if sub._parameters.get(key) is not p:
                    sub._parameters[key] = p
            for key, b in buffers:
                if sub._buffers.get(key) is not b:
                    sub._buffers[key] = b
        for record in self.params:
            record.restore()


# --------------------------------------------------------------------------------------------
# The plan


class _Item:
    """One top-level name in the plan."""

    __slots__ = ("name", "kind", "obj", "from_devices", "nbytes", "rebind", "layout", "to_device")

    def __init__(
        self,
        name: str,
        kind: str,
        obj: Any,
        from_devices: tuple[str, ...],
        nbytes: int,
        to_device: str,
        layout: Any,
    ) -> None:
        self.name = name
        self.kind = kind
        self.obj = obj
        self.from_devices = from_devices
        self.nbytes = nbytes
        self.rebind = kind == "tensor" or kind == "container"
        self.layout = layout  # the device(s) it came from: what undo needs to send it back
        self.to_device = to_device


def _names(devices: Iterable[Any]) -> tuple[str, ...]:
    return tuple(sorted({str(d) for d in devices}, key=device_sort_key))


class _Refused(Exception):
    """An object that must not be moved: a MoveError for named objects, a skip otherwise."""


# A plain tensor queued for copying: (tensor, name that brought it, storage bytes, storage)
_Member = tuple[Any, str, int, Any]


class _Plan:
    """Everything a move will do, worked out before anything is touched."""

    def __init__(self, namespace: MutableMapping[str, Any], label: str, explicit: bool) -> None:
        import torch

        self.torch = torch
        self.ns = namespace
        self.label = label
        self.explicit = explicit
        self.items: list[_Item] = []
        self.skipped: list[tuple[str, str]] = []
        self.modules: dict[int, _ModuleJob] = {}  # in-place jobs: modules and Parameter holders
        self.module_ids: set[int] = set()  # every submodule recorded by a job
        self.param_records: dict[int, _ParamRecord] = {}
        self.param_dest: dict[int, Any] = {}  # id(param) -> where it will be
        self.groups: dict[tuple[Any, Any], list[_Member]] = {}  # (storage key, dest) -> tensors
        self.plain_ids: set[int] = set()
        self.opt_updates: list[tuple[dict[Any, Any], Any, Any]] = []
        self.optimizers: set[int] = set()
        self.devstr: dict[Any, str] = {}
        self.types = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)
        # Plain torch.Tensor values bound to top-level names, per target: the common case
        # (thousands of tensors) goes through C-level maps instead of per-tensor Python.
        self.fast: dict[Any, tuple[list[str], list[Any]]] = {}
        self.fast_sets: list[_FastSet] = []

    def dstr(self, dev: Any) -> str:
        s = self.devstr.get(dev)
        if s is None:
            s = self.devstr[dev] = str(dev)
        return s

    def skip_or_refuse(self, name: str, reason: str) -> None:
        """Named explicitly: refuse the whole move. Found by ``names=None``: skip it."""
        if self.explicit:
            raise MoveError(reason)
        self.skipped.append((name, reason))

    @staticmethod
    def _check_meta_source(name: str, dev: Any, dest: Any, what: str) -> None:
        if dev.type == "meta" and dest.type != "meta":
            raise _Refused(f"{name}: {what} is on meta and has no data: create it again on {dest}")

    def _add_plain(self, t: Any, name: str, dest: Any) -> int:
        """Queue a tensor to be copied (once per object; grouped by storage to keep sharing).

        Returns the bytes of its storage."""
        tid = id(t)
        try:
            s = t.untyped_storage()
            key = s._cdata
            snb = s.nbytes()
        except Exception:
            s, key, snb = None, ("tensor", tid), _tensor_nbytes(t)
        if tid in self.plain_ids:
            return snb
        g = t.grad if t.is_leaf else None  # (read before the plan changes)
        follow = g is not None and g.device != dest
        self.plain_ids.add(tid)
        group = self.groups.get((key, dest))
        if group is None:
            self.groups[(key, dest)] = [(t, name, snb, s)]
        else:
            group.append((t, name, snb, s))
        if follow:
            self._add_plain(g, name, dest)
        return snb

    # -- named objects ----------------------------------------------------------------------------

    def add(self, name: str, obj: Any, dest: Any, layout: Any = None) -> None:
        """Plan one top-level name. ``dest`` None: per-tensor devices from ``layout`` (undo)."""
        tensor_type, module_type, optim_type = self.types
        tp = type(obj)
        try:
            if issubclass(tp, tensor_type):
                # issubclass, not isinstance: Parameter's metaclass makes isinstance slow
                if issubclass(tp, self.torch.nn.Parameter):
                    self._add_parameter(name, obj, dest)
                else:
                    self._add_tensor(name, obj, dest)
            elif issubclass(tp, module_type):
                self._add_module(name, obj, dest, layout)
            elif issubclass(tp, optim_type):
                self._add_optimizer(name, obj, layout)
            elif _container_kind(obj) is not None:
                self._add_container(name, obj, dest, layout)
            else:
                self.skip_or_refuse(
                    name,
                    f"{name} is a {tp.__name__}, not a tensor, module, optimizer or container of tensors",
                )
        except _Refused as e:
            self.skip_or_refuse(name, str(e))
        except MoveError:
            raise
        except Exception as e:  # a broken object: skipped (or refused when named), never fatal
            self.skip_or_refuse(name, f"{name} could not be planned: {_reason(e)}")

    def _add_tensor(self, name: str, t: Any, dest: Any) -> None:
        dev = t.device
        if dev == dest:
            self.skipped.append((name, f"already on {self.dstr(dest)}"))
            return
        if dev.type == "meta":
            self._check_meta_source(name, dev, dest, "this tensor")
        snb = self._add_plain(t, name, dest)
        self.items.append(_Item(name, "tensor", t, (self.dstr(dev),), snb, self.dstr(dest), dev))

    def _add_parameter(self, name: str, p: Any, dest: Any) -> None:
        devs = {p.device}
        grad = p.grad
        if grad is not None:
            devs.add(grad.device)
        if devs == {dest}:
            self.skipped.append((name, f"already on {self.dstr(dest)}"))
            return
        for d in devs:
            self._check_meta_source(name, d, dest, "this Parameter")
        self._move_param_in_place(name, p, dest)
        snb = _storage(p)[1]
        self.items.append(_Item(name, "parameter", p, _names(devs), snb, self.dstr(dest), p.device))

    def _move_param_in_place(self, name: str, p: Any, dest: Any) -> None:
        """A Parameter outside any module moved in this call: move it in place, through a
        holder module so it goes through exactly what ``module.to`` does."""
        if id(p) in self.param_dest:  # moves with its module, or was named twice
            return
        holder = self.torch.nn.Module()
        holder._parameters["p"] = p
        job = _ModuleJob(name, holder, dest, None)
        self._record_module(job, holder)
        self.modules[id(holder)] = job

    def _add_module(self, name: str, m: Any, dest: Any, layout: Any) -> None:
        reason = _accelerate_reason(name, m)
        if reason is not None:
            raise _Refused(reason)
        dest_of: dict[int, Any] | None = None
        if dest is None:  # undo of a module that spanned devices: targets by qualified name
            dest_of = {}
            for qual, p in m.named_parameters():
                d = layout.get(qual)
                if d is not None:
                    dest_of[id(p)] = d
                    if p.grad is not None:
                        dest_of[id(p.grad)] = d
            for qual, b in m.named_buffers():
                d = layout.get(qual)
                if d is not None:
                    dest_of[id(b)] = d
        devices: set[Any] = set()
        pending = False
        for t in _module_tensors(m):
            dev = t.device
            devices.add(dev)
            want = dest if dest_of is None else dest_of.get(id(t), dev)
            if dev == want:
                continue
            if dev.type == "meta":
                raise _Refused(f"{name}: {_META_ADVICE}")
            pending = True
        if not pending:
            where = self.dstr(dest) if dest is not None else "its original devices"
            self.skipped.append((name, f"already on {where}"))
            return
        if dest is not None:
            to_device = self.dstr(dest)
        else:
            to_device = ", ".join(_names((dest_of or {}).values()))
        item = _Item(
            name, "module", m, _names(devices), _module_bytes(m), to_device, _module_layout(m)
        )
        if id(m) not in self.module_ids:  # else a submodule of a module moved in this call
            job = _ModuleJob(name, m, dest, dest_of)
            self._record_module(job, m)
            self.modules[id(m)] = job
        self.items.append(item)

    def _record_module(self, job: _ModuleJob, m: Any) -> None:
        """Record every submodule's parameters and buffers as they are now, for rollback.

        Everything is read first and entered into the plan at the end, so a module that raises
        while being read leaves the plan as it was (it is then skipped or refused)."""
        subs: list[tuple[Any, list[tuple[str, Any]], list[tuple[str, Any]]]] = []
        records: list[_ParamRecord] = []
        buffers: list[tuple[Any, Any, Any, str]] = []
        seen_subs: set[int] = set()
        seen_params: set[int] = set()
        for sub in m.modules():
            sid = id(sub)
            if sid in self.module_ids or sid in seen_subs:
                continue
            seen_subs.add(sid)
            sub_params = list(sub._parameters.items())
            sub_buffers = list(sub._buffers.items())
            subs.append((sub, sub_params, sub_buffers))
            for _k, p in sub_params:
                if p is None or id(p) in self.param_records or id(p) in seen_params:
                    continue
                seen_params.add(id(p))
                records.append(_ParamRecord(p))
            for k, b in sub_buffers:
                if b is not None:
                    buffers.append((_storage(b)[0], b, sub, k))
        targets = [job.target_of(r.param) for r in records]
        self.module_ids.update(seen_subs)
        job.subs.extend(subs)
        job.params.extend(records)
        job.buffers.extend(buffers)
        for record, target in zip(records, targets, strict=True):
            self.param_records[id(record.param)] = record
            self.param_dest[id(record.param)] = target

    def _add_optimizer(self, name: str, opt: Any, layout: Any) -> None:
        """Queue the optimizer's state to follow its parameters (undo: to go back)."""
        if id(opt) in self.optimizers:
            return
        self.optimizers.add(id(opt))
        state = getattr(opt, "state", None)
        groups = getattr(opt, "param_groups", None)
        if not isinstance(state, dict) or not isinstance(groups, list):
            raise _Refused(f"{name}: this optimizer keeps no state dict that can be moved")
        tensor_type = self.types[0]
        devices: set[Any] = set()
        wants: set[Any] = set()
        nbytes = 0
        original: dict[tuple[int, Any], Any] = {}
        updates: list[tuple[dict[Any, Any], Any, Any]] = []
        planned: list[tuple[Any, Any]] = []
        index = 0
        for group in groups:
            # Like Optimizer.load_state_dict: step counters stay where they are (the CPU)
            # unless the group is capturable or fused, where they live with the parameters.
            step_follows = bool(group.get("capturable", False) or group.get("fused", False))
            for p in group.get("params", []):
                entry = state.get(p)
                if isinstance(entry, dict):
                    target = self.param_dest.get(id(p))
                    if target is None:
                        target = p.device
                    for key, value in entry.items():
                        if not isinstance(value, tensor_type):
                            continue
                        dev = value.device
                        original[(index, key)] = dev
                        if layout is not None:
                            want = layout.get((index, key), dev)
                        elif key == "step" and not step_follows:
                            continue
                        else:
                            want = target
                        if dev == want:
                            continue
                        self._check_meta_source(name, dev, want, "its state")
                        devices.add(dev)
                        wants.add(want)
                        updates.append((entry, key, value))
                        planned.append((value, want))
                index += 1
        if not updates:
            self.skipped.append((name, "optimizer state is already with its parameters"))
            return
        for value, want in planned:
            nbytes += self._add_plain(value, name, want)
        self.opt_updates.extend(updates)
        self.items.append(
            _Item(
                name, "optimizer", opt, _names(devices), nbytes, ", ".join(_names(wants)), original
            )
        )

    def _add_container(self, name: str, obj: Any, dest: Any, layout: Any) -> None:
        leaves: list[Any] = []
        odd: list[str] = []
        _container_leaves(obj, 1, leaves, odd, self.types)
        if odd:
            kinds = ", ".join(sorted(set(odd)))
            self.skipped.append((name, f"{kinds} inside {name} left in place: name them directly"))
        if not leaves:
            if not odd:
                self.skip_or_refuse(name, f"{name} holds no tensors")
            return
        parameter = self.torch.nn.Parameter
        devices: set[Any] = set()
        wants: set[Any] = set()
        planned: list[tuple[Any, Any]] = []
        for i, t in enumerate(leaves):
            dev = t.device
            devices.add(dev)
            want = dest if layout is None else (layout[i] if i < len(layout) else dev)
            if dev == want:
                continue
            self._check_meta_source(name, dev, want, "a tensor in it")
            wants.add(want)
            planned.append((t, want))
        if not planned:
            where = self.dstr(dest) if dest is not None else "its original devices"
            self.skipped.append((name, f"already on {where}"))
            return
        layout_now = [t.device for t in leaves]
        seen: set[Any] = set()
        nbytes = 0
        for t in leaves:
            key, snb, _s = _storage(t)
            if key not in seen:
                seen.add(key)
                nbytes += snb
        for t, want in planned:
            if issubclass(type(t), parameter):
                self._move_param_in_place(name, t, want)
            else:
                self._add_plain(t, name, want)
        self.items.append(
            _Item(
                name,
                "container",
                obj,
                _names(devices),
                nbytes,
                ", ".join(_names(wants)),
                layout_now,
            )
        )

    def add_followers(self) -> None:
        """Optimizers bound to top-level names whose parameters move in this call move along,
        so ``opt.step()`` keeps working."""
        if not self.param_dest:
            return
        optim_type = self.types[2]
        for name, value in list(self.ns.items()):
            if not isinstance(name, str) or not issubclass(type(value), optim_type):
                continue
            if id(value) in self.optimizers:
                continue
            state = getattr(value, "state", None)
            if isinstance(state, dict) and any(id(p) in self.param_dest for p in list(state)):
                try:
                    self._add_optimizer(name, value, None)
                except _Refused as e:
                    self.skip_or_refuse(name, str(e))

    def add_fast(self, name: str, t: Any, dest: Any) -> None:
        """A plain ``torch.Tensor`` bound to a name: checked and planned in bulk by ``finalize``."""
        bucket = self.fast.get(dest)
        if bucket is None:
            bucket = self.fast[dest] = ([], [])
        bucket[0].append(name)
        bucket[1].append(t)

    def finalize(self) -> None:
        """Check the bulk tensors; those that need care (sharing a storage with anything else
        in the move, autograd leaves with grads, views, storage-less tensors, meta sources)
        go through the general path, the rest form fast sets copied with one C-level map."""
        if not self.fast:
            return
        torch = self.torch
        taken = {key for key, _dest in self.groups} | self._module_storage_keys()
        buckets, self.fast = self.fast, {}
        cpu = torch.device("cpu")
        for dest, (names, tensors) in buckets.items():
            label = self.dstr(dest)
            if all(map(_IS_CPU, tensors)):  # the common case, without a device object each
                devices = [cpu] * len(tensors)
                distinct = {cpu}
            else:
                devices = list(map(_DEVICE, tensors))
                distinct = set(devices)
            if dest in distinct or (
                dest.type != "meta" and any(d.type == "meta" for d in distinct)
            ):
                keep_names, keep_tensors, keep_devices = [], [], []
                for name, t, dev in zip(names, tensors, devices, strict=True):
                    if dev == dest:
                        self.skipped.append((name, f"already on {label}"))
                    elif dev.type == "meta":
                        self.add(name, t, dest)  # refused (named) or skipped, with the reason
                    else:
                        keep_names.append(name)
                        keep_tensors.append(t)
                        keep_devices.append(dev)
                names, tensors, devices = keep_names, keep_tensors, keep_devices
                distinct = set(devices)
            if not names:
                continue
            try:
                storages = list(map(torch.Tensor.untyped_storage, tensors))
            except Exception:  # sparse and other storage-less tensors: one by one
                for name, t in zip(names, tensors, strict=True):
                    self.add(name, t, dest)
                continue
            keys = list(map(_CDATA, storages))
            n = len(names)
            special: set[int] = set()
            flags = list(map(_REQUIRES_GRAD, tensors))
            if True in flags:  # autograd tensors: leaves with grads, graphs; never .grad of those
                special.update(i for i, f in enumerate(flags) if f)
                plain = [t for t, f in zip(tensors, flags, strict=True) if not f]
            else:
                plain = tensors
            if list(map(_GRAD, plain)).count(None) != len(plain):
                special.update(
                    i for i, t in enumerate(tensors) if i not in special and t.grad is not None
                )
            # (A view whose base is not in the move is fine here: .to() copies just the view.
            # A view whose base, or another view of it, is in the move shares its key.)
            if len(set(keys)) != n or not taken.isdisjoint(keys):
                seen: dict[Any, int] = {}
                for i, key in enumerate(keys):
                    if key in taken:
                        special.add(i)
                    elif key in seen:
                        special.update((i, seen[key]))
                    else:
                        seen[key] = i
            if special:
                for i in sorted(special):
                    self.add(names[i], tensors[i], dest)
                keep = [i for i in range(n) if i not in special]
                names = [names[i] for i in keep]
                tensors = [tensors[i] for i in keep]
                devices = [devices[i] for i in keep]
                storages = [storages[i] for i in keep]
                keys = [keys[i] for i in keep]
            if names:
                nbytes = list(map(_NBYTES, tensors))  # what .to() allocates for each
                fs = _FastSet(dest, names, tensors, devices, storages, keys, nbytes)
                fs.distinct = distinct if not special else set(devices)
                self.fast_sets.append(fs)

    def _module_storage_keys(self) -> set[Any]:
        keys: set[Any] = set()
        for job in self.modules.values():
            for record in job.params:
                for t in (record.data, record.grad_data):
                    if t is not None:
                        keys.add(_storage(t)[0])
            keys.update(key for key, _b, _sub, _k in job.buffers)
        return keys

    # -- memory -----------------------------------------------------------------------------------

    def needed_bytes(self) -> dict[Any, int]:
        """Bytes that will be allocated on each target: each storage once, nothing already there."""
        need: dict[Any, int] = {}
        counted: set[tuple[Any, Any]] = set()
        for job in self.modules.values():
            total = 0
            for record in job.params:
                want = job.target_of(record.param)
                for t in (record.data, record.grad_data):
                    if t is None or t.device == want:
                        continue
                    key, snb, _s = _storage(t)
                    if (key, want) not in counted:
                        counted.add((key, want))
                        need[want] = need.get(want, 0) + snb
                        total += snb
            for key, b, _sub, _k in job.buffers:
                want = job.target_of(b)
                if b.device == want or (key, want) in counted:
                    continue
                counted.add((key, want))
                snb = _storage(b)[1]
                need[want] = need.get(want, 0) + snb
                total += snb
            job.nbytes = total
        for gkey, members in self.groups.items():
            if gkey in counted:  # aliases a module's tensor: lands in the same storage
                continue
            want = gkey[1]
            if len(members) == 1:
                t = members[0][0]
                snb = members[0][2] if t._base is None else _tensor_nbytes(t)
            else:
                snb = members[0][2]
            need[want] = need.get(want, 0) + snb
        for fs in self.fast_sets:
            need[fs.dest] = need.get(fs.dest, 0) + sum(fs.nbytes)
        return need

    def check_memory(self, need: dict[Any, int], free_bytes: int | None) -> None:
        for target, nbytes in need.items():
            if nbytes <= 0:
                continue
            if free_bytes is not None:
                free: int | None = int(free_bytes)
            elif target.type == "meta":
                free = None  # meta stores nothing
            else:
                free = _free_bytes(target)
            if free is not None and nbytes > free:
                raise MoveError(
                    f"needs {format_bytes(nbytes)}, {format_bytes(max(free, 0))} free on "
                    f"{target} — nothing was moved"
                )

    # -- running ----------------------------------------------------------------------------------

    def execute(
        self,
        progress: ProgressCallback | None,
        started: float,
        free_bytes: int | None,
        to_meta: bool,
    ) -> MoveResult:
        self.finalize()
        need = self.needed_bytes()
        self.check_memory(need, free_bytes)  # raises MoveError: nothing touched yet
        total = sum(need.values())
        state = _RunState()
        try:
            self._run(state, _Progress(progress, total) if progress is not None else None, need)
        except BaseException as e:
            problems = self._rollback(state)
            if not isinstance(e, Exception):
                raise  # Ctrl-C: the namespace is back as it was; let the interrupt through
            reason = _reason(e)
            failed = f"{state.current}: {reason}" if state.current else reason
            if problems:
                failed += f" (and could not restore {', '.join(problems)})"
            return MoveResult(
                device=self.label,
                skipped=list(self.skipped),
                failed=_one_line(failed),
                seconds=time.perf_counter() - started,
            )
        items = self.items
        moved = [
            MovedItem(it.name, it.kind, it.nbytes, it.from_devices, it.to_device) for it in items
        ]
        # (generator expressions, not for-loops: a loop variable would keep old tensors alive)
        moved.extend(item for fs in self.fast_sets for item in self._fast_items(fs))
        record = _UndoRecord(self.ns, to_meta, items, self.fast_sets) if moved else None
        held = self._old_storages()
        # Drop every reference the plan holds to the old tensors, then see which storages live on.
        del items, state
        self.items = []
        self.groups = {}
        self.modules = {}
        self.param_records = {}
        self.opt_updates = []
        fast_held = [(fs.storages, fs.keys) for fs in self.fast_sets]
        self.fast_sets = []
        still_held = _still_held(held, fast_held)
        return MoveResult(
            device=self.label,
            moved=moved,
            skipped=list(self.skipped),
            seconds=time.perf_counter() - started,
            bytes_moved=total,
            still_held_bytes=still_held,
            _undo=record,
        )

    def _fast_items(self, fs: _FastSet) -> Iterable[MovedItem]:
        froms = {d: (self.dstr(d),) for d in fs.distinct}
        if len(froms) == 1:
            sources: Iterable[tuple[str, ...]] = repeat(next(iter(froms.values())))
        else:
            sources = map(froms.__getitem__, fs.devices)
        fields = zip(
            fs.names,
            repeat("tensor"),
            fs.nbytes,
            sources,
            repeat(self.dstr(fs.dest)),
            strict=False,  # repeat() is endless
        )
        return map(tuple.__new__, repeat(MovedItem), fields)  # type: ignore[arg-type]

    def _run(self, state: _RunState, report: _Progress | None, need: dict[Any, int]) -> None:
        torch = self.torch
        # 1. Modules and Parameters, in place.
        for job in self.modules.values():
            state.current = job.name
            state.applied.append(job)
            job.apply()
            if report is not None:
                report.add(job.nbytes)
        # 2. Plain tensors: copies, not yet visible.
        new_of = state.new_of
        anchors = self._anchors(new_of) if self.modules and self.groups else {}
        state.current = ""
        for gkey, members in self.groups.items():
            if len(members) == 1 and gkey not in anchors:
                t = members[0][0]
                if id(t) not in new_of:
                    state.current = members[0][1]
                    new_of[id(t)] = _copy_one(t, gkey[1], new_of)
            else:
                state.current = members[0][1]
                _copy_shared(torch, members, gkey[1], anchors.get(gkey), new_of)
            if report is not None:
                report.add(members[0][2])
        to = torch.Tensor.to  # looked up now: tests replace it to inject faults
        for fs in self.fast_sets:
            news = fs.news = []
            try:
                if fs.dest.type == "cuda":
                    news.extend(map(lambda t, d=fs.dest: to(t, d, non_blocking=True), fs.tensors))
                elif report is None:
                    news.extend(map(to, fs.tensors, repeat(fs.dest)))
                else:
                    step = max(len(fs.tensors) // 100, 1)
                    for i in range(0, len(fs.tensors), step):
                        news.extend(map(to, fs.tensors[i : i + step], repeat(fs.dest)))
                        report.add(sum(fs.nbytes[i : i + step]))
            except BaseException:
                state.current = fs.names[len(news)] if len(news) < len(fs.names) else ""
                raise
        # 3. One synchronisation: CUDA copies were issued with non_blocking=True.
        state.current = ""
        cuda = {d for d in need if d.type == "cuda"}
        cuda.update(d for d in self._source_devices() if d.type == "cuda")
        for fs in self.fast_sets:
            cuda.update(d for d in fs.distinct if d.type == "cuda")
        for d in cuda:
            torch.cuda.synchronize(d)
        # 4. New containers, then commit: rebinding names and optimizer state cannot run out of memory.
        rebinds: list[tuple[str, Any]] = []
        memo: dict[int, Any] = {}
        tensor_type = self.types[0]
        for item in self.items:
            if not item.rebind:
                continue
            obj = item.obj
            if item.kind == "tensor":
                new = new_of.get(id(obj), obj)
            else:
                state.current = item.name
                new = _rebuild(obj, 1, new_of, memo, tensor_type)
            if new is not obj:
                rebinds.append((item.name, new))
        ns = self.ns
        committed = state.committed
        for name, new in rebinds:
            state.current = name
            committed.append((name, ns[name]))
            ns[name] = new
        state.current = ""
        plain_dict = type(ns) is dict
        for fs in self.fast_sets:
            if plain_dict:
                state.fast_done.append((fs, len(fs.names)))
                ns.update(zip(fs.names, fs.news, strict=True))  # type: ignore[attr-defined]
            else:
                done = [fs, 0]
                state.fast_done.append(done)  # type: ignore[arg-type]
                for name, new in zip(fs.names, fs.news, strict=True):
                    state.current = name
                    ns[name] = new
                    done[1] += 1
        state.current = ""
        for entry, key, old in self.opt_updates:
            state.opt_done.append((entry, key, old))
            entry[key] = new_of[id(old)]
        if report is not None:
            report.finish()

    def _source_devices(self) -> set[Any]:
        devices: set[Any] = set()
        for item in self.items:
            for name in item.from_devices:
                if name.startswith("cuda"):
                    devices.add(self.torch.device(name))
        return devices

    def _anchors(self, new_of: dict[int, Any]) -> dict[tuple[Any, Any], tuple[Any, Any, int]]:
        """Old storage -> (the tensor that now owns the moved storage, the old object views
        hang from, its old offset) for storages moved in place by modules and Parameters.
        Buffers that ``module.to`` rebound are also mapped by id, so a name bound to a buffer
        follows it."""
        anchors: dict[tuple[Any, Any], tuple[Any, Any, int]] = {}
        for job in self.modules.values():
            for record in job.params:
                p = record.param
                _anchor(anchors, record.data, p, p)
            for _key, b, sub, k in job.buffers:
                nb = sub._buffers.get(k)
                if nb is not None and nb is not b:
                    new_of.setdefault(id(b), nb)
                    _anchor(anchors, b, nb, b)
        return anchors

    def _rollback(self, state: _RunState) -> list[str]:
        problems: list[str] = []
        for entry, key, old in reversed(state.opt_done):
            try:
                entry[key] = old
            except Exception:
                problems.append("optimizer state")
        for fs, count in reversed(state.fast_done):
            try:
                self.ns.update(zip(fs.names[:count], fs.tensors[:count], strict=True))
            except Exception:
                problems.append("names")
        for name, old in reversed(state.committed):
            try:
                self.ns[name] = old
            except Exception:
                problems.append(name)
        for job in reversed(state.applied):
            try:
                job.restore()
            except Exception:
                problems.append(job.name)
        return problems

    def _old_storages(self) -> list[tuple[Any, Any, int]]:
        """(storage, key, bytes) of everything replaced or moved in place: what may stay
        allocated on the old device."""
        out: dict[Any, Any] = {}
        for (key, _want), members in self.groups.items():
            s = members[0][3]
            if s is not None:
                out[key] = s
        for job in self.modules.values():
            for record in job.params:
                want = job.target_of(record.param)
                for t in (record.data, record.grad_data):
                    if t is not None and t.device != want:  # (what was already there stayed)
                        key, _n, s = _storage(t)
                        if s is not None:
                            out.setdefault(key, s)
            for key, b, _sub, _k in job.buffers:
                if b.device != job.target_of(b):
                    s = _storage(b)[2]
                    if s is not None:
                        out.setdefault(key, s)
        return [(s, key, int(s.nbytes())) for key, s in out.items()]


class _FastSet:
    """Plain tensors, each alone in its storage, going to one device with no extra care."""

    __slots__ = (
        "dest",
        "names",
        "tensors",
        "devices",
        "distinct",
        "storages",
        "keys",
        "nbytes",
        "news",
    )

    def __init__(
        self,
        dest: Any,
        names: list[str],
        tensors: list[Any],
        devices: list[Any],
        storages: list[Any],
        keys: list[Any],
        nbytes: list[int],
    ) -> None:
        self.dest = dest
        self.names = names
        self.tensors = tensors
        self.devices = devices
        self.storages = storages
        self.keys = keys
        self.nbytes = nbytes
        self.news: list[Any] = []
        self.distinct: set[Any] = set()


_DEVICE = attrgetter("device")
_IS_CPU = attrgetter("is_cpu")
_REQUIRES_GRAD = attrgetter("requires_grad")
_GRAD = attrgetter("grad")
_NBYTES = attrgetter("nbytes")
_CDATA = attrgetter("_cdata")


class _RunState:
    """What the run did so far: what rollback undoes, and what failed."""

    __slots__ = ("current", "applied", "new_of", "committed", "opt_done", "fast_done")

    def __init__(self) -> None:
        self.current = ""
        self.fast_done: list[tuple[_FastSet, int]] = []
        self.applied: list[_ModuleJob] = []
        self.new_of: dict[int, Any] = {}
        self.committed: list[tuple[str, Any]] = []
        self.opt_done: list[tuple[dict[Any, Any], Any, Any]] = []


def _anchor(anchors: dict[Any, Any], old: Any, new: Any, base_obj: Any) -> None:
    """Record that ``old``'s storage now lives in ``new`` when both cover a whole storage."""
    try:
        key, snb, _s = _storage(old)
        if old.storage_offset() != 0 or not old.is_contiguous() or old.nbytes != snb:
            return  # covers part of its storage: aliases of the rest are copied on their own
        if new.storage_offset() != 0 or _storage(new)[1] != snb:
            return
        anchors.setdefault((key, new.device), (new, base_obj, 0))
    except Exception:
        return


def _module_tensors(m: Any) -> Iterable[Any]:
    for p in m.parameters():
        yield p
        if p.grad is not None:
            yield p.grad
    yield from m.buffers()


def _module_bytes(m: Any) -> int:
    seen: set[Any] = set()
    total = 0
    for t in _module_tensors(m):
        key, snb, _s = _storage(t)
        if key not in seen:
            seen.add(key)
            total += snb
    return total


def _module_layout(m: Any) -> dict[str, Any]:
    layout = {qual: p.device for qual, p in m.named_parameters()}
    layout.update((qual, b.device) for qual, b in m.named_buffers())
    return layout


def _copy_one(t: Any, dest: Any, new_of: dict[int, Any]) -> Any:
    """``t`` on ``dest`` as users expect: a leaf stays a leaf with requires_grad and its grad;
    a tensor inside an autograd graph keeps its graph (like ``t.to``)."""
    nb = dest.type == "cuda"
    if t.requires_grad:
        if not t.is_leaf:
            return t.to(dest, non_blocking=True) if nb else t.to(dest)
        src = t.detach()
        new = (src.to(dest, non_blocking=True) if nb else src.to(dest)).requires_grad_(True)
    else:
        new = t.to(dest, non_blocking=True) if nb else t.to(dest)
    g = t.grad
    if g is not None:
        new.grad = _grad_on(g, dest, new_of)
    return new


def _grad_on(g: Any, dest: Any, new_of: dict[int, Any]) -> Any:
    ng = new_of.get(id(g))
    if ng is None:
        ng = new_of[id(g)] = _copy_one(g, dest, new_of) if g.device != dest else g
    return ng


def _copy_shared(
    torch: Any, members: list[_Member], dest: Any, anchor: Any, new_of: dict[int, Any]
) -> None:
    """Tensors sharing one storage: copy the storage once and rebuild each over it, views as
    views of their (moved) base so ``v._base is b`` still holds."""
    if anchor is not None:
        anchor_new, base_obj, base_offset = anchor
    else:
        anchor_new = base_obj = None
        base_offset = 0
        first, _name, snb, storage = members[0]
        roots: dict[int, Any] = {}
        for t, *_rest in members:
            root = t._base if t._base is not None else t
            roots.setdefault(id(root), root)
        for root in roots.values():  # the first root that spans the storage owns it
            try:
                covers = root.storage_offset() == 0 and root.is_contiguous() and root.nbytes == snb
            except Exception:
                covers = False
            if covers:
                anchor_new = new_of.get(id(root))
                if anchor_new is None:
                    anchor_new = new_of[id(root)] = _copy_one(root, dest, new_of)
                base_obj = root
                break
        if anchor_new is None:
            if storage is None:  # no storage to share (sparse, some subclasses): copy each
                for t, *_rest in members:
                    if id(t) not in new_of:
                        new_of[id(t)] = _copy_one(t, dest, new_of)
                return
            # No single owner: move the raw bytes once and lay every tensor over them.
            flat = torch.empty(0, dtype=torch.uint8, device=first.device)
            flat.set_(storage, 0, (snb,), (1,))
            anchor_new = flat.to(dest, non_blocking=True) if dest.type == "cuda" else flat.to(dest)
    storage_new = None
    for t, *_rest in members:
        if id(t) in new_of:
            continue
        if base_obj is not None and t._base is base_obj and t.dtype == anchor_new.dtype:
            offset = t.storage_offset() - base_offset + anchor_new.storage_offset()
            with torch.set_grad_enabled(t.requires_grad):
                v = anchor_new.as_strided(t.size(), t.stride(), offset)
            if t.requires_grad and not v.requires_grad:
                v.requires_grad_(True)
        else:
            if storage_new is None:
                storage_new = anchor_new.untyped_storage()
            v = _alias(torch, t, anchor_new, storage_new, base_offset)
            if t.requires_grad:
                v.requires_grad_(True)
        if t.is_leaf and v.is_leaf:
            g = t.grad
            if g is not None:
                v.grad = _grad_on(g, dest, new_of)
        new_of[id(t)] = v


def _alias(torch: Any, t: Any, anchor_new: Any, storage_new: Any, base_offset: int) -> Any:
    """A tensor with ``t``'s shape, strides and offset over the moved storage."""
    try:
        v = torch.empty((0,), dtype=t.dtype, device=anchor_new.device)
        return v.set_(storage_new, t.storage_offset(), t.size(), t.stride())
    except RuntimeError:
        if t.dtype != anchor_new.dtype:
            raise
        # Devices whose tensors cannot be re-pointed at a storage (lazy): a detached view.
        offset = t.storage_offset() - base_offset + anchor_new.storage_offset()
        return anchor_new.detach().as_strided(t.size(), t.stride(), offset)


def _still_held(
    held: list[tuple[Any, Any, int]], fast_held: list[tuple[list[Any], list[Any]]]
) -> int:
    """Bytes of old storages that something other than this move still holds.

    Called once the move dropped every tensor it held, keeping only the storages (``held``
    triples of storage, key, bytes; for bulk tensors ``fast_held`` pairs of storage and key
    lists): a storage whose use count is above one (ours) is still referenced elsewhere
    (IPython's ``Out``, an attribute, a ``state_dict()`` alias, a view) and its memory stays
    allocated. Nothing here takes a weak reference to a Parameter (torch refuses to swap
    tensors that have them).
    """
    import torch

    use_count = getattr(torch._C, "_storage_Use_Count", None)
    try:
        if use_count is None:
            return 0
        total = sum(n for _s, key, n in held if use_count(key) > 1)
        for storages, keys in fast_held:
            shared = map((1).__lt__, map(use_count, keys))
            total += sum(map(torch.UntypedStorage.nbytes, compress(storages, shared)))
        return total
    except Exception:
        return 0
    finally:
        held.clear()
        fast_held.clear()


class _Progress:
    """Calls ``callback(done_bytes, total_bytes)`` at the start, every 1%, and at the end."""

    __slots__ = ("callback", "total", "done", "next", "step")

    def __init__(self, callback: ProgressCallback, total: int) -> None:
        self.callback = callback
        self.total = total
        self.done = 0
        self.step = max(total // 100, 1)
        self.next = self.step
        callback(0, total)

    def add(self, n: int) -> None:
        self.done += n
        if self.done >= self.next and self.done < self.total:
            self.callback(self.done, self.total)
            self.next = self.done + self.step

    def finish(self) -> None:
        self.callback(self.total, self.total)


# --------------------------------------------------------------------------------------------
# Undo


class _UndoEntry:
    __slots__ = ("name", "kind", "ref", "oid", "layout")

    def __init__(self, name: str, kind: str, obj: Any, layout: Any) -> None:
        self.name = name
        self.kind = kind
        # Modules and optimizers are weakly referenced, so undo information never keeps a model
        # alive. Tensors and Parameters are checked by id: a weak reference would stop torch
        # from swapping them later (swap_tensors refuses weakly referenced tensors).
        self.ref = weakref.ref(obj) if kind in ("module", "optimizer") else None
        self.oid = id(obj)
        self.layout = layout

    def current(self, namespace: MutableMapping[str, Any]) -> Any:
        """The object if the name still holds what the move left there, else None."""
        try:
            obj = namespace[self.name]
        except KeyError:
            return None
        if self.ref is not None:
            return obj if self.ref() is obj else None
        return obj if id(obj) == self.oid else None


class _UndoRecord:
    """What undo needs: names, the objects the move left there (weakly or by id), and the
    devices everything came from. It never holds a tensor, so it keeps no memory alive."""

    def __init__(
        self,
        namespace: MutableMapping[str, Any],
        to_meta: bool,
        items: list[_Item],
        fast_sets: list[_FastSet],
    ) -> None:
        self.namespace = namespace
        self.to_meta = to_meta
        self.used = False
        self.entries: list[_UndoEntry] = []
        for item in items:
            obj = namespace.get(item.name, item.obj) if item.rebind else item.obj
            self.entries.append(_UndoEntry(item.name, item.kind, obj, item.layout))
        # bulk tensors: (names, ids of the new tensors, devices they came from)
        self.fast = [(fs.names, list(map(id, fs.news)), fs.devices) for fs in fast_sets]


def _undo(record: _UndoRecord, progress: ProgressCallback | None) -> MoveResult:
    started = time.perf_counter()
    plan = _Plan(record.namespace, "", explicit=False)
    ns = record.namespace
    targets: set[str] = set()
    optimizers: list[tuple[_UndoEntry, Any]] = []
    for entry in record.entries:
        obj = entry.current(ns)
        if obj is None:
            plan.skipped.append(
                (entry.name, f"{entry.name} was rebound since the move; left as it is")
            )
            continue
        layout = entry.layout
        if entry.kind in ("tensor", "parameter"):
            targets.add(str(layout))
            plan.add(entry.name, obj, layout)
        elif entry.kind == "module":
            devices = set(layout.values())
            targets.update(str(d) for d in devices)
            if len(devices) == 1:
                plan.add(entry.name, obj, next(iter(devices)))
            else:
                plan.add(entry.name, obj, None, layout)
        elif entry.kind == "container":
            targets.update(str(d) for d in layout)
            plan.add(entry.name, obj, None, layout)
        else:
            optimizers.append((entry, obj))
    tensor_type = plan.types[0]
    missing = object()
    for names, ids, devices in record.fast:
        targets.update(str(d) for d in set(devices))
        for name, oid, dev in zip(names, ids, devices, strict=True):
            obj = ns.get(name, missing)
            if id(obj) == oid and type(obj) is tensor_type:
                plan.add_fast(name, obj, dev)
            else:
                plan.skipped.append((name, f"{name} was rebound since the move; left as it is"))
    for entry, obj in optimizers:  # last: their state follows the parameters planned above
        targets.update(str(d) for d in entry.layout.values())
        plan.add(entry.name, obj, None, entry.layout)
    plan.label = ", ".join(sorted(targets, key=device_sort_key)) or "original devices"
    return plan.execute(progress, started, None, to_meta=False)


# --------------------------------------------------------------------------------------------
# The entry point


def _plan_move(
    namespace: MutableMapping[str, Any], dest: Any, names: Iterable[str] | None
) -> _Plan:
    plan = _Plan(namespace, str(dest), explicit=names is not None)
    tensor_type, module_type, optim_type = plan.types
    selected: list[tuple[str, Any]] = []
    if names is not None:
        if isinstance(names, str):
            names = [names]
        wanted: list[str] = []
        for name in names:
            if not isinstance(name, str):
                raise MoveError(f"names must be strings, got {type(name).__name__}")
            if name not in namespace:
                if "." in name or "[" in name:
                    top = name.split(".")[0].split("[")[0]
                    raise MoveError(
                        f"{name!r} is not a top-level name: move() takes variable names such as {top!r}"
                    )
                raise MoveError(f"no variable named {name!r} in this namespace")
            if name not in wanted:
                wanted.append(name)
        for name in wanted:
            if name in _BOOKKEEPING or _HISTORY_NAME.fullmatch(name):
                plan.skipped.append((name, f"{name} is IPython's history, not a variable"))
            else:
                selected.append((name, namespace[name]))
    else:
        movable = (tensor_type, module_type, optim_type)
        items = namespace.items()
        # Plain tensors are the bulk of a big namespace: picked out with comprehensions.
        fast_names = [
            n
            for n, v in items
            if type(v) is tensor_type and type(n) is str and not is_ipython_bookkeeping(n)
        ]
        if fast_names:
            plan.fast[dest] = (fast_names, list(map(namespace.__getitem__, fast_names)))
        for name, value in [(n, v) for n, v in items if type(v) is not tensor_type]:
            tp = type(value)
            if not isinstance(name, str) or is_ipython_bookkeeping(name):
                continue
            if issubclass(tp, movable) or (
                _container_kind(value) is not None and _has_tensor(value, 1, tensor_type)
            ):
                selected.append((name, value))
    # Modules first (Parameters named on their own then see they move with them), then the
    # rest; optimizers last, because their state follows wherever their parameters end up.
    for name, value in selected:
        if issubclass(type(value), module_type):
            plan.add(name, value, dest)
    for name, value in selected:
        tp = type(value)
        if tp is tensor_type:
            plan.add_fast(name, value, dest)
        elif not issubclass(tp, (module_type, optim_type)):
            plan.add(name, value, dest)
    for name, value in selected:
        if issubclass(type(value), optim_type):
            plan.add(name, value, dest)
    plan.add_followers()
    return plan


def move(
    namespace: MutableMapping[str, Any],
    device: Any,
    names: Iterable[str] | None = None,
    *,
    free_bytes: int | None = None,
    progress: ProgressCallback | None = None,
    allow_meta: bool = True,
) -> MoveResult:
    """Move named objects of ``namespace`` to ``device``, all or nothing, and rebind the names.

    ``names=None`` moves every top-level tensor, module, optimizer and container of tensors
    (IPython's bookkeeping names and names starting with ``_`` are left out). ``free_bytes``
    replaces the target's free-memory figure (tests simulate a full device with it).
    ``progress(done, total)`` is called with byte counts while the move runs.
    ``allow_meta=False`` refuses ``meta`` as a target.

    Raises :class:`MoveError` (a ``ValueError``, one-line message) before touching anything
    for a bad device, an unknown name, an object that must not be moved, or a move that does
    not fit. A failure part-way is rolled back and reported in the result's ``failed``.
    """
    started = time.perf_counter()
    dest = _resolve_device(device, allow_meta)
    plan = _plan_move(namespace, dest, names)
    return plan.execute(progress, started, free_bytes, to_meta=dest.type == "meta")
