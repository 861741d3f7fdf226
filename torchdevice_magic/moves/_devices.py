"""Device discovery for moves (stand-in until torchdevice_magic/devices.py lands)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .result import MoveError
from .result import one_line as _one_line

if TYPE_CHECKING:
    import torch


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
