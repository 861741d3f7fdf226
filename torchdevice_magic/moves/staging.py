"""Copies to CUDA through pinned memory.

A copy from pageable CPU memory to the GPU is synchronous and slow; from pinned (page-locked)
memory it is a DMA transfer that can run while the CPU prepares the next one. So each tensor
is copied (host memcpy) into a pinned staging buffer and from there to a new device tensor
with ``non_blocking=True``, and the transaction synchronises once at the end.
"""

from __future__ import annotations

from typing import Any


class NoPinnedMemory(Exception):
    """Pinned staging memory could not be allocated (the copy goes the plain way)."""


class PinnedStager:
    """CPU -> one CUDA device through a ring of pinned staging buffers.

    Tensors are packed one after another (64-byte aligned) into a buffer; when the next one
    does not fit, the stager records an event on the device's current stream and takes the
    next buffer of the ring. A buffer is reused only after its event says its copies are done,
    so a move bigger than the ring waits per buffer (every ``CHUNK`` bytes), never per tensor.
    Pinned buffers come from torch's caching host allocator and are reused by the next move.
    """

    CHUNK = 64 << 20  # bytes per staging buffer; bigger tensors are copied directly
    RING = 2  # buffers in flight
    ALIGN = 64  # bytes: each staged tensor starts on this boundary

    def __init__(self, torch: Any, dest: Any) -> None:
        self.torch = torch
        self.dest = dest
        self.buffers: list[Any] = []
        self.events: list[Any] = []  # per buffer: the event after its last copy, or None
        self.current = -1  # the buffer being filled
        self.offset = self.CHUNK  # forces a buffer on first use
        self.usable = True  # False once pinned memory could not be had: plain copies then

    def eligible(self, t: Any) -> bool:
        torch = self.torch
        try:
            return (
                self.usable
                and t.device.type == "cpu"
                and t.layout == torch.strided
                and not t.is_quantized
                and type(t) in (torch.Tensor, torch.nn.Parameter)
                and t.is_contiguous()
                and 0 < t.nbytes <= self.CHUNK
            )
        except Exception:
            return False

    def _next_buffer(self) -> None:
        torch = self.torch
        if self.current >= 0:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.dest))
            self.events[self.current] = event
        self.current = (self.current + 1) % self.RING
        if self.current >= len(self.buffers):
            try:
                buffer = torch.empty(self.CHUNK, dtype=torch.uint8, pin_memory=True)
            except RuntimeError:  # no pinned memory here (limits, containers): plain copies
                self.usable = False
                raise NoPinnedMemory from None
            self.buffers.append(buffer)
            self.events.append(None)
        elif self.events[self.current] is not None:
            self.events[self.current].synchronize()  # its copies are done: the buffer is free
        self.offset = 0

    def to(self, t: Any) -> Any:
        torch = self.torch
        nb = t.nbytes
        offset = -(-self.offset // self.ALIGN) * self.ALIGN
        if offset + nb > self.CHUNK:
            self._next_buffer()
            offset = 0
        staged = self.buffers[self.current][offset : offset + nb].view(t.dtype).view(t.shape)
        staged.copy_(t)
        new = torch.empty(t.shape, dtype=t.dtype, device=self.dest)
        new.copy_(staged, non_blocking=True)
        self.offset = offset + nb
        return new


class Copier:
    """How the transaction copies one tensor to a device: staged through pinned memory for
    CPU -> CUDA, ``t.to(dest)`` otherwise (``non_blocking`` towards CUDA)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.stagers: dict[Any, PinnedStager] = {}
        self.stage = True

    def to(self, t: Any, dest: Any) -> Any:
        if dest.type != "cuda":
            return t.to(dest)
        # (Module._apply hands over Parameters under no_grad: their copies carry no graph)
        if self.stage and (not t.requires_grad or not self.torch.is_grad_enabled()):
            stager = self.stagers.get(dest)
            if stager is None:
                stager = self.stagers[dest] = PinnedStager(self.torch, dest)
            if stager.eligible(t):
                try:
                    return stager.to(t)
                except NoPinnedMemory:
                    pass
        return t.to(dest, non_blocking=True)
