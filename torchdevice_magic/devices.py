"""The devices this kernel has, found through ``torch.accelerator`` -- never initialising one.

One accelerator type per process is what PyTorch supports (cuda, or ROCm which calls itself cuda,
mps, xpu, hpu, mtia, or an out-of-tree PrivateUse1 backend such as the simulated one in
:mod:`torchdevice_magic.testing`); ``torch.accelerator.current_accelerator()`` names it from build
information alone. So there are no hand-written cuda -> mps -> xpu branches here: every backend is
asked the same questions the same way.

Initialising a device costs memory (a CUDA context is hundreds of MiB) and breaks fork-based
DataLoader workers, so inspection asks only what is safe:
- ``current_accelerator()`` (build information) and ``device_count()`` (NVML on CUDA: no context);
- memory figures only when the device module says it is already initialised.
``is_available()``, ``current_device_index()`` and ``get_device_module()`` without an argument may
initialise or poison fork and are not called while inspecting. A move *to* a device initialises it
anyway; only then is ``get_memory_info`` asked (:func:`free_bytes`).

Works without ``torch.accelerator`` (torch < 2.6) through a small fallback over torch.cuda/mps/xpu.

A rank of a distributed job has a device of its own. A process is a rank when a launcher says so
(``LOCAL_RANK``, which ``torchrun`` and most launchers set) or when it joined a
``torch.distributed`` process group (as ipyparallel engines do from a ``%%px`` cell). Its own
device, first rule that applies (:func:`own_device_index`):

1. the device the default process group is bound to (``init_process_group(device_id=...)``);
2. ``LOCAL_RANK`` (the rank on this machine), when the machine has that many devices;
3. the group rank modulo the device count (ranks numbered machine by machine: what a group
   started without a launcher, such as one across ipyparallel engines, has to go on);
4. otherwise (not a rank) the current device, as for any other process.

An accelerator named without an index ("Move all to cuda") and :func:`best_device` mean that
device: never every rank on ``cuda:0``. ``torch.distributed`` is asked only when the user's code
already imported it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

META_REFUSED = "moving to meta is turned off: meta tensors keep no data"


class DeviceError(ValueError):
    """A device string that does not parse, or names a device this kernel does not have."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


@dataclass(frozen=True, slots=True)
class Target:
    """A device a move may go to, or a reason why it may not."""

    device: str
    enabled: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    """What the device's allocator says (None for what it cannot tell)."""

    allocated: int | None = None
    reserved: int | None = None
    peak: int | None = None
    capacity: int | None = None


def _torch() -> Any:
    return sys.modules.get("torch")


def accelerator_type() -> str | None:
    """The accelerator type this process has (``"cuda"``, ``"mps"``, ``"simdev"``...), or None.

    From build information only; nothing is initialised."""
    torch = _torch()
    if torch is None:
        return None
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "current_accelerator"):
        try:
            device = accelerator.current_accelerator()
        except Exception:  # a broken out-of-tree backend is "no accelerator", not a crash
            return None
        return None if device is None else device.type
    return _legacy_accelerator_type(torch)


def _legacy_accelerator_type(torch: Any) -> str | None:  # torch < 2.6
    if torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None:
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_built():
        return "mps"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and hasattr(xpu, "_is_compiled") and xpu._is_compiled():
        return "xpu"
    return None


def _device_module(device_type: str) -> Any:
    torch = _torch()
    try:
        return torch.get_device_module(device_type)  # with an argument: no initialisation
    except (AttributeError, RuntimeError, ValueError):
        return getattr(torch, device_type, None)


def device_count(device_type: str | None = None) -> int:
    """How many devices of the accelerator type there are (0 when there is none)."""
    kind = device_type or accelerator_type()
    if kind is None or kind != accelerator_type():
        return 0
    torch = _torch()
    try:
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "device_count"):
            return int(accelerator.device_count())
        module = _device_module(kind)
        return int(module.device_count()) if module is not None else 0
    except Exception:
        return 0


def is_initialized(device_type: str) -> bool:
    """Whether this process already initialised ``device_type`` (cpu and meta always are)."""
    if device_type in ("cpu", "meta"):
        return True
    if _torch() is None or device_type != accelerator_type():
        return False
    module = _device_module(device_type)
    check = getattr(module, "is_initialized", None)
    try:
        return bool(check()) if check is not None else False
    except Exception:
        return False


@dataclass(frozen=True, slots=True)
class UsageFigures:
    """What an initialised CUDA device's used memory is made of, as the driver and PyTorch's
    allocator report it: what ``nvidia-smi`` shows as used is ``total - free``."""

    total: int  # the device's memory (mem_get_info)
    free: int  # what the driver says is free (mem_get_info)
    reserved: int  # what PyTorch's caching allocator holds (memory_reserved)
    allocated: int  # of that, what tensors occupy now (memory_allocated)
    #: (pid, bytes) of each process using the device (list_gpu_processes, through NVML), this
    #: one included; None where it cannot be read (no pynvml, another platform)
    processes: tuple[tuple[int, int], ...] | None = None
    pid: int = 0  # this process


_PROCESS_LINE = re.compile(r"process\s+(\d+)\s+uses\s+([\d.]+)\s+MB GPU memory")


def usage_figures(device: str, processes: bool = False) -> UsageFigures | None:
    """The driver's and the allocator's figures for a CUDA device this process has already
    initialised and used (never initialises it, nor opens a context on another GPU: None
    otherwise, and for other device types). ``processes``: also ask NVML who uses it."""
    kind = device.partition(":")[0]
    if kind != "cuda" or not is_initialized(kind):
        return None
    cuda = _torch().cuda
    index = _index(device)
    try:
        reserved, allocated = cuda.memory_reserved(index), cuda.memory_allocated(index)
        if not reserved and index != cuda.current_device():
            return None  # mem_get_info would open a CUDA context on a GPU this process never used
        free, total = cuda.mem_get_info(index)
    except Exception:
        return None
    found = None
    with contextlib.suppress(Exception):  # NVML is optional (pynvml / nvidia-ml-py)
        printout = str(cuda.list_gpu_processes(index)) if processes else ""
        listed = _PROCESS_LINE.findall(printout)
        if processes and (listed or "no processes are running" in printout):
            found = tuple((int(pid), int(float(mb) * 1024 * 1024)) for pid, mb in listed)
    return UsageFigures(int(total), int(free), int(reserved), int(allocated), found, os.getpid())


def _index(device: Any) -> int:
    text = str(device)
    return int(text.partition(":")[2] or 0)


def memory_figures(device: str) -> MemoryFigures:
    """The allocator's figures for ``device`` -- only when its type is already initialised
    (reading them otherwise would initialise it). Empty figures where a backend has none."""
    kind = device.partition(":")[0]
    if kind in ("cpu", "meta") or not is_initialized(kind):
        return MemoryFigures()
    torch = _torch()
    accelerator = getattr(torch, "accelerator", None)
    module = (
        accelerator
        if accelerator is not None and hasattr(accelerator, "memory_allocated")
        else _device_module(kind)
    )
    index = _index(device)

    def ask(name: str) -> int | None:
        function = getattr(module, name, None)
        if function is None:
            return None
        try:
            return int(function(index))
        except Exception:  # backends without an allocator (the simulated one) have no figures
            return None

    capacity = None
    with contextlib.suppress(Exception):  # not every backend has device properties
        capacity = int(_device_module(kind).get_device_properties(index).total_memory)
    return MemoryFigures(
        ask("memory_allocated"), ask("memory_reserved"), ask("max_memory_allocated"), capacity
    )


def reset_peak(device: str) -> bool:
    """Reset the process-wide peak counter of ``device`` if it is initialised; True if it was."""
    kind = device.partition(":")[0]
    if kind in ("cpu", "meta") or not is_initialized(kind):
        return False
    torch = _torch()
    accelerator = getattr(torch, "accelerator", None)
    module = (
        accelerator
        if accelerator is not None and hasattr(accelerator, "reset_peak_memory_stats")
        else _device_module(kind)
    )
    try:
        module.reset_peak_memory_stats(_index(device))
        return True
    except Exception:
        return False


def available_targets(allow_meta: bool) -> list[Target]:
    """cpu, each device of the accelerator, and meta -- each enabled or with its reason."""
    targets = [Target("cpu", True)]
    kind = accelerator_type()
    count = device_count(kind) if kind is not None else 0
    if kind is not None and count:
        targets.extend(Target(f"{kind}:{i}", True) for i in range(count))
    elif kind is not None:
        targets.append(Target(kind, False, f"{kind.upper()} is built in but no device is visible"))
    else:
        targets.append(
            Target("cuda", False, "this kernel has no accelerator (CPU-only torch build)")
        )
    targets.append(Target("meta", True) if allow_meta else Target("meta", False, META_REFUSED))
    return targets


def resolve_device(device: Any, allow_meta: bool) -> Any:
    """The ``torch.device`` a user typed, validated: it parses and exists in this kernel.

    Raises :class:`DeviceError` with one line otherwise. Never initialises a device."""
    import torch

    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, str):
        try:
            dev = torch.device(device.strip())
        except (RuntimeError, ValueError, TypeError) as error:
            raise DeviceError(f"{device!r} is not a device: {error}") from None
    else:
        raise DeviceError(f"{device!r} is not a device: expected a string such as 'cuda:0'")
    kind, index = dev.type, dev.index
    if kind == "cpu":
        if index not in (None, 0):
            raise DeviceError(f"{dev} does not exist; this kernel sees cpu")
        return torch.device("cpu")
    if kind == "meta":
        if not allow_meta:
            raise DeviceError(META_REFUSED)
        return torch.device("meta")
    accelerator = accelerator_type()
    if kind != accelerator:
        has = f"its accelerator is {accelerator}" if accelerator else "it has no accelerator"
        raise DeviceError(f"{kind} is not available in this kernel ({has})")
    count = device_count(kind)
    if count == 0:
        raise DeviceError(f"{kind} is built in but no device is visible")
    if index is None:
        index = own_index(kind, count)
    if index >= count:
        seen = ", ".join(f"{kind}:{i}" for i in range(count))
        raise DeviceError(f"{kind}:{index} does not exist; this kernel sees {seen}")
    return torch.device(kind, index)


def _current_index(kind: str) -> int:
    """The current device index if the device is initialised (asking otherwise initialises)."""
    if not is_initialized(kind):
        return 0
    module = _device_module(kind)
    try:
        return int(module.current_device())
    except Exception:
        return 0


def own_index(kind: str, count: int) -> int:
    """This process's own device index among ``count`` devices of ``kind``: a rank's local
    device (the rule in this module's docstring), else the current device: what "Move all to
    cuda" means here."""
    return own_device_index(rank_info(), count, _current_index(kind))


def full_device_name(name: str) -> str:
    """A device's one spelling, for comparing two of them: ``cuda`` means the current device
    (``cuda:0`` unless torch already knows another current device), ``cpu`` and ``meta`` are one
    device each (``cpu:0`` is ``cpu``). Never initialises a device to find out: an
    uninitialised accelerator's current device is its first."""
    name = name.strip()
    kind, colon, index = name.partition(":")
    if kind in ("cpu", "meta"):
        return kind
    if colon:
        return name
    return f"{kind}:{_current_index(kind)}"


def same_device(a: str, b: str) -> bool:
    """Whether two device strings name the same device (see :func:`full_device_name`): the
    one rule for "same device" -- the view's buttons and the diagnosis both ask it."""
    return a == b or full_device_name(a) == full_device_name(b)


def best_device() -> str:
    """The accelerator's device this process should use if it has one (a rank's own local
    device, else the current device), else cpu."""
    kind = accelerator_type()
    count = device_count(kind) if kind is not None else 0
    if kind is not None and count:
        return f"{kind}:{own_index(kind, count)}"
    return "cpu"


def free_bytes(device: Any) -> int | None:
    """Free memory on ``device`` in bytes (what the caching allocator holds unused counts as
    free), or None when it cannot be known. Asked only just before a move puts bytes there,
    which initialises the device anyway."""
    kind = str(device).partition(":")[0]
    if kind == "cpu":
        return _host_available()
    if kind == "meta":
        return None
    torch = _torch()
    index = _index(device)
    accelerator = getattr(torch, "accelerator", None)
    try:
        if accelerator is not None and hasattr(accelerator, "get_memory_info"):
            free, _total = accelerator.get_memory_info(index)
        else:
            free, _total = _device_module(kind).mem_get_info(index)
    except Exception:  # the backend has no allocator figures (mps before 2.x, simulated)
        return None
    figures = memory_figures(f"{kind}:{index}")
    cached = (figures.reserved or 0) - (figures.allocated or 0)
    return int(free) + max(cached, 0)


def _host_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# --------------------------------------------------------------------------------------------
# A rank's own device

LOCAL_RANK_VARIABLE = "LOCAL_RANK"


@dataclass(frozen=True, slots=True)
class RankInfo:
    """What this process knows about its place in a distributed job."""

    #: rank in the default process group (None without one)
    rank: int | None
    #: processes in the default process group (None without one)
    world_size: int | None
    #: ``LOCAL_RANK`` as the launcher set it (None when unset or not a number)
    local_rank: int | None
    #: the device index the default process group is bound to (None when unbound)
    bound_index: int | None = None

    @property
    def is_rank(self) -> bool:
        return self.rank is not None or self.local_rank is not None

    def label(self) -> str:
        """``rank 1 of 2`` (or ``local rank 1`` from the launcher alone)."""
        if self.rank is not None:
            return f"rank {self.rank} of {self.world_size}"
        return f"local rank {self.local_rank}"


def rank_info(environ: Any = None) -> RankInfo:
    """This process's :class:`RankInfo`, from ``environ`` (default ``os.environ``) and the
    default process group when ``torch.distributed`` is imported and initialised."""
    environ = os.environ if environ is None else environ
    local = environ.get(LOCAL_RANK_VARIABLE)
    local_rank = int(local) if local is not None and local.strip().isdigit() else None
    rank = world = bound = None
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            rank, world = int(distributed.get_rank()), int(distributed.get_world_size())
            device = getattr(distributed.group.WORLD, "bound_device_id", None)
            if device is not None and device.index is not None:
                bound = int(device.index)
    except Exception:  # a group being torn down, or a torch without these calls
        rank = world = bound = None
    return RankInfo(rank, world, local_rank, bound)


def own_device_index(info: RankInfo, count: int, current: int) -> int:
    """The device index this process should use among ``count`` devices of its accelerator
    (``current``: the current device, what a process that is no rank uses)."""
    if count <= 0:
        return current
    if info.bound_index is not None and info.bound_index < count:
        return info.bound_index
    if info.local_rank is not None and info.local_rank < count:
        return info.local_rank
    if info.rank is not None:
        return info.rank % count
    return current
