"""What the recorder found while the traced code ran, kept as cheap keys (code objects, line
numbers, device strings) until the report is built: op counts per device and module, copies
between devices and host reads per line, the first op whose inputs spanned devices.
"""

from __future__ import annotations

import sys
from typing import Any

from ..units import device_sort_key
from .frames import name_in_frame
from .locate import OUTSIDE, FrameLocator
from .ops import op_name, tensors
from .report import NAMED_COPIES

# the walk for the user's frame starts at the frame that called the noting method (the
# recorder's handler of the op); library frames, ours included, are skipped from there
_NOTING_DEPTH = 2


class Findings:
    """The counts and notes of one run of the recorder.

    ``ops``: ``device`` or ``(device, module)`` -> ops counted. ``transfers``: ``(file, code,
    line, source, target)`` -> ``[count, bytes, {names}, module, direct count]``. ``reads``:
    ``(file, code, line, device)`` -> ``[count, {labels}, module]``. The file leads each key:
    code objects that differ in their file only compare equal. ``divergence``: the first op
    mixing devices, as a dict of plain values; ``meta_mix`` the same for the first op computing
    with a meta tensor beside a real one. ``module_stack``: ``(name, module)`` of the
    forwards running, innermost last. ``filename``: the cell's file name, found from the first
    frame noted when the caller did not give it.
    """

    def __init__(
        self, locator: FrameLocator, namespace: dict[str, Any], filename: str | None
    ) -> None:
        self.locator = locator
        self.namespace = namespace
        self.filename = filename
        self.ops: dict[Any, int] = {}
        self.transfers: dict[Any, list[Any]] = {}
        self.reads: dict[Any, list[Any]] = {}
        self.divergence: dict[str, Any] | None = None
        self.meta_mix: dict[str, Any] | None = None
        self.module_stack: list[tuple[str, Any]] = []
        self.unattributed = 0
        self.internal_errors = 0

    def module(self) -> str | None:
        """The innermost module running, by name."""
        return self.module_stack[-1][0] if self.module_stack else None

    def count_failed_op(self, devices: list[str]) -> None:
        """An op mixing ``devices`` raised: counted under the mix."""
        failed: Any = ("+".join(devices), self.module())
        self.ops[failed] = self.ops.get(failed, 0) + 1

    def _locate(self) -> Any:
        frame = self.locator.locate(sys._getframe(_NOTING_DEPTH))
        if frame is not None and frame is not OUTSIDE and self.filename is None:
            self.filename = self.locator.cell_filename(frame, self.namespace)
        return frame

    def note_copy(self, func: Any, args: tuple[Any, ...], out: Any, tensor_class: Any) -> None:
        """A copy op ran: when it crossed devices, count it (and its bytes) on its line."""
        name = func.__name__
        if name.startswith("copy_") or name.startswith("_copy_from"):
            if len(args) < 2 or not isinstance(args[1], tensor_class):
                return
            src, dst = args[1], args[0]
        else:  # _to_copy
            src, dst = args[0], out
        if not isinstance(dst, tensor_class):
            return
        source, target = src.device, dst.device
        if source == target:
            return
        frame = self._locate()
        if frame is OUTSIDE:
            return
        if frame is None:
            self.unattributed += 1
            key = (None, None, None, str(source), str(target))
        else:
            code = frame.f_code
            key = (code.co_filename, code, frame.f_lineno, str(source), str(target))
        entry = self.transfers.get(key)
        nbytes = src.numel() * src.element_size()
        if entry is None:
            entry = self.transfers[key] = [0, 0, {}, self.module(), 0]
        entry[0] += 1
        entry[1] += nbytes
        entry[4] += self.locator.direct
        if entry[0] <= NAMED_COPIES and frame is not None:
            # names of the first few copies (a loop copies the same variable; module.to()
            # copies each parameter): enough to say what moves without a lookup per copy
            borrowed = self.locator.borrowed
            name = None if borrowed else name_in_frame(frame, src, self.module_stack)
            if name is not None:
                entry[2].setdefault(name)

    def note_read(self, label: str, device: Any) -> None:
        """A value was read back to the host: count it on its line, under ``label``."""
        frame = self._locate()
        if frame is OUTSIDE:
            return
        if frame is None:
            self.unattributed += 1
            key = (None, None, None, str(device))
        else:
            code = frame.f_code
            key = (code.co_filename, code, frame.f_lineno, str(device))
        entry = self.reads.get(key)
        if entry is None:
            self.reads[key] = [1, {label: None}, self.module()]
        else:
            entry[0] += 1
            entry[1].setdefault(label)

    def note_divergence(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        devices: list[str],
        raised: bool,
    ) -> None:
        """The first op whose inputs span ``devices``: its line, module, inputs' names."""
        noted = self._mixing_op(func, args, kwargs, devices, raised)
        if noted is not None:
            self.divergence = noted

    def note_meta_mix(
        self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], devices: list[str]
    ) -> None:
        """The first op computing with a meta tensor beside a real one (before it runs: one
        that then raises is marked ``raised``)."""
        noted = self._mixing_op(func, args, kwargs, devices, False)
        if noted is not None:
            self.meta_mix = noted

    def _mixing_op(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        devices: list[str],
        raised: bool,
    ) -> dict[str, Any] | None:
        """An op mixing ``devices`` as plain values: its line, module, inputs' names; None
        outside the traced code."""
        try:
            frame = self._locate()
            if frame is OUTSIDE:
                return None
            found = tensors(args, kwargs)
            names = tuple(
                name_in_frame(frame, t, self.module_stack)
                if frame is not None and not self.locator.borrowed
                else None
                for t in found
            )
            return {
                "op": op_name(func),
                "code": frame.f_code if frame is not None else None,
                "line": frame.f_lineno if frame is not None else None,
                "module": self.module(),
                "devices": tuple(sorted(devices, key=device_sort_key)),
                "names": names,
                "inputs": tuple(
                    (n, str(t.device), tuple(t.shape)) for n, t in zip(names, found, strict=True)
                ),
                "raised": raised,
            }
        except Exception:
            self.internal_errors += 1
            return None
