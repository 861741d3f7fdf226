"""Out-of-memory errors explained: :func:`parse_oom` reads torch's messages (CPU allocator,
CUDA caching allocator, XPU, MPS) into :class:`OOMFacts`; :func:`explain_oom` says it in the
user's names (biggest objects, holders, next steps) as an :class:`OOMExplanation`. Frees
nothing by itself.

Pure core: no IPython, no ipywidgets, torch never imported here.
"""

from __future__ import annotations

import html
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..scan import Inventory, scan
from ..units import format_bytes
from .base import ErrorGetter, Keys
from .holding import Holder, _device_matches, holders

_SIZE = r"([\d.]+)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)"
_UNIT = {
    "bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
    "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40,
}  # fmt: skip
_CPU_OOM = re.compile(
    r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes"
)
_ACCEL_OOM = re.compile(
    r"(CUDA|XPU|MLU|HIP) out of memory\. Tried to allocate "
    + _SIZE
    + r"\.? ?\(?(?:GPU|Device|MLU) (\d+)"
)
_OLD_CUDA = re.compile(
    r"Tried to allocate "
    + _SIZE
    + r" \(GPU (\d+); "
    + _SIZE
    + r" total capacity; "
    + _SIZE
    + r" already allocated; "
    + _SIZE
    + r" free; "
    + _SIZE
    + r" reserved in total"
)
_TOTAL = re.compile(r"total capac(?:i)?ty of " + _SIZE + r" of which " + _SIZE + r" is free")
_PROCESS = re.compile(r"this process has " + _SIZE + r" memory in use")
_OTHERS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_ALLOCATED = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch")
_UNALLOCATED = re.compile(r"and " + _SIZE + r" is reserved by PyTorch but unallocated")
_PRIVATE = re.compile(r"with " + _SIZE + r" allocated in private pools")
_ALLOWED = re.compile(_SIZE + r" allowed;")
_MPS = re.compile(
    r"MPS backend out of memory \(MPS allocated: "
    + _SIZE
    + r", other allocations: "
    + _SIZE
    + r", max allowed: "
    + _SIZE
    + r"\)\. Tried to allocate "
    + _SIZE
)
_HUGE = re.compile(r"Tried to allocate more than 1EB memory")
_CUDA_ERROR = re.compile(r"CUDA error: out of memory")


def _size(number: str, unit: str) -> int:
    return int(round(float(number) * _UNIT[unit]))


@dataclass
class OOMFacts:
    """What an out-of-memory message says (sizes in bytes; None where it says nothing)."""

    device: str
    request: int | None
    total: int | None = None
    free: int | None = None
    process: int | None = None
    allocated: int | None = None
    reserved_unallocated: int | None = None
    other_processes: int | None = None
    private_pools: int | None = None
    allowed: int | None = None

    @property
    def non_pytorch(self) -> int | None:
        """Memory this process uses outside PyTorch's allocator (CUDA context, libraries)."""
        if self.process is None or self.allocated is None or self.reserved_unallocated is None:
            return None
        return max(0, self.process - self.allocated - self.reserved_unallocated)


def parse_oom(message: str) -> OOMFacts | None:
    """Parse torch's out-of-memory texts: the CPU allocator's, and the CUDA caching allocator's
    of torch 2.1-2.14 (and the older ``(GPU 0; ... total capacity; ...)`` form), XPU, MPS."""
    match = _CPU_OOM.search(message)
    if match:
        return OOMFacts("cpu", int(match.group(1)))
    match = _OLD_CUDA.search(message)
    if match:
        g = match.groups()
        facts = OOMFacts(f"cuda:{g[2]}", _size(g[0], g[1]), total=_size(g[3], g[4]))
        facts.allocated = _size(g[5], g[6])
        facts.free = _size(g[7], g[8])
        facts.reserved_unallocated = max(0, _size(g[9], g[10]) - facts.allocated)
        return facts
    match = _ACCEL_OOM.search(message)
    if match:
        backend, number, unit, index = match.groups()
        kind = {"CUDA": "cuda", "HIP": "cuda", "XPU": "xpu", "MLU": "mlu"}[backend]
        facts = OOMFacts(f"{kind}:{index}", _size(number, unit))
        if m := _TOTAL.search(message):
            facts.total, facts.free = _size(*m.groups()[:2]), _size(*m.groups()[2:])
        if m := _PROCESS.search(message):
            facts.process = _size(*m.groups())
        others = [_size(n, u) for _, n, u in _OTHERS.findall(message)]
        facts.other_processes = sum(others) if others else None
        if m := _ALLOCATED.search(message):
            facts.allocated = _size(*m.groups())
        if m := _UNALLOCATED.search(message):
            facts.reserved_unallocated = _size(*m.groups())
        if m := _PRIVATE.search(message):
            facts.private_pools = _size(*m.groups())
        if m := _ALLOWED.search(message):
            facts.allowed = _size(*m.groups())
        return facts
    match = _MPS.search(message)
    if match:
        g = match.groups()
        facts = OOMFacts("mps", _size(g[6], g[7]), allocated=_size(g[0], g[1]))
        facts.allowed = _size(g[4], g[5])
        return facts
    if _HUGE.search(message):
        return OOMFacts("cuda", None)
    if _CUDA_ERROR.search(message):
        return OOMFacts("cuda", None)
    return None


@dataclass
class OOMExplanation:
    """The automatic explanation of an out-of-memory error. Frees nothing by itself."""

    facts: OOMFacts
    biggest: list[tuple[str, int]]  # (name, bytes on that device)
    holders: list[Holder]
    steps: list[str]
    machine_memory: int | None = None
    live: dict[str, int] = field(default_factory=dict)  # allocator figures read just now

    def lines(self) -> list[str]:
        facts = self.facts
        request = format_bytes(facts.request) if facts.request is not None else "an unknown size"
        lines = [f"Out of memory on {facts.device}: the request was {request}."]
        if facts.total is not None:
            free = f", {format_bytes(facts.free)} free" if facts.free is not None else ""
            lines.append(f"  {facts.device} has {format_bytes(facts.total)} in all{free}.")
        if self.machine_memory and facts.device == "cpu":
            lines.append(f"  This machine has {format_bytes(self.machine_memory)} of memory.")
        if facts.allocated is not None:
            lines.append(f"  Allocated by PyTorch: {format_bytes(facts.allocated)}.")
        if facts.reserved_unallocated is not None:
            lines.append(
                "  Reserved by PyTorch but unallocated (cached blocks): "
                f"{format_bytes(facts.reserved_unallocated)}."
            )
        if facts.non_pytorch is not None:
            lines.append(
                "  This process outside PyTorch's allocator (CUDA context, libraries): "
                f"{format_bytes(facts.non_pytorch)}."
            )
        if facts.other_processes:
            lines.append(f"  Other processes on it: {format_bytes(facts.other_processes)}.")
        for label, value in self.live.items():
            lines.append(f"  Now {label}: {format_bytes(value)}.")
        if self.biggest:
            lines.append(f"Biggest named objects on {facts.device}:")
            lines.extend(f"  {name}: {format_bytes(size)}" for name, size in self.biggest)
        if self.holders:
            lines.append(f"Held outside named variables on {facts.device}:")
            lines.extend(
                f"  [{i}] {h.where}: {format_bytes(h.bytes)} -> %devices --release {i}"
                for i, h in enumerate(self.holders)
            )
        if self.steps:
            lines.append("Next steps (nothing was freed for you):")
            lines.extend(f"  - {step}" for step in self.steps)
        return lines

    def text(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        body = html.escape(self.text())
        return (
            '<pre class="torchdevice-magic-oom" style="border-left:3px solid #c60;'
            f'padding-left:8px">{body}</pre>'
        )


def _machine_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def explain_oom(
    exc: BaseException,
    namespace: Mapping[str, Any],
    *,
    inventory: Inventory | None = None,
    forgotten: Mapping[str, Keys] | None = None,
    last_error: ErrorGetter | None = None,
    limit: int = 5,
) -> OOMExplanation | None:
    """Explain an out-of-memory error in the user's names, or None for any other error.

    Shows the request and device (from the message), the biggest named objects on that
    device, what holds memory there outside named variables (with the release call), on CUDA
    the reserved-but-unallocated and non-PyTorch memory, and safe next steps. Frees nothing.
    """
    message = str(exc) if isinstance(exc, BaseException) else ""
    facts = parse_oom(message)
    if facts is None:
        return None
    if "torch" not in sys.modules:
        return OOMExplanation(facts, [], [], [])
    if inventory is None:
        inventory = scan(namespace)
    device = facts.device
    sizes: dict[str, int] = {}
    for record in inventory.records:
        if record.hidden:
            continue
        for dev, nbytes in record.bytes_by_device.items():
            if _device_matches(dev, device) and nbytes:
                root = record.root or record.name
                sizes[root] = sizes.get(root, 0) + nbytes
    biggest = sorted(sizes.items(), key=lambda item: -item[1])[:limit]
    found = holders(
        namespace, device, inventory=inventory, forgotten=forgotten, last_error=last_error
    )[:limit]
    live: dict[str, int] = {}
    if device not in ("cpu", "meta"):
        from ..devices import memory_figures

        figures = memory_figures(device if ":" in device else f"{device}:0")
        if figures.allocated is not None and figures.reserved is not None:
            live = {
                "allocated": figures.allocated,
                "reserved but unallocated": figures.reserved - figures.allocated,
            }
    machine = _machine_memory() if device == "cpu" else None
    steps = _next_steps(facts, biggest, found, machine)
    return OOMExplanation(facts, biggest, found, steps, machine, live)


def _next_steps(
    facts: OOMFacts,
    biggest: list[tuple[str, int]],
    found: list[Holder],
    machine: int | None,
) -> list[str]:
    steps = []
    capacity = facts.total or (machine if facts.device == "cpu" else None)
    if facts.request is not None and capacity is not None and facts.request > capacity:
        steps.append(
            f"the request alone ({format_bytes(facts.request)}) is more than "
            f"{facts.device} has ({format_bytes(capacity)}): freeing memory cannot help; "
            "make it smaller (a smaller batch or size, a smaller dtype, or chunks)"
        )
    if found:
        calls = ", ".join(f"%devices --release {i}" for i in range(len(found)))
        held = format_bytes(sum(h.bytes for h in found))
        steps.append(f"release what is held outside your variables ({held}): {calls}")
    if biggest:
        names = ", ".join(name for name, _ in biggest[:3])
        steps.append(f"del the names you no longer need (biggest: {names})")
    if facts.reserved_unallocated and facts.request and facts.reserved_unallocated >= facts.request:
        steps.append(
            "much memory is reserved but unallocated (fragmentation): torch.cuda.empty_cache(), "
            "or restart with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        )
    if not steps or not any("smaller" in s for s in steps):
        steps.append("then retry with a smaller batch")
    return steps
