"""What a dry run found: the device error the cell would raise (explained as the real run's
diagnosis is), its memory per device, whether that fits, and where the prediction stopped.

Data here, rendering in ``text()`` / ``_repr_html_()``; sizes through :func:`.units.format_bytes`.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ..units import device_sort_key, format_bytes

__all__ = ["DryRunReport", "Fit", "Stop"]

#: how much of the real run's message the text shows (a message can quote a whole tensor)
_MESSAGE_CHARS = 300


@dataclass(frozen=True)
class Stop:
    """Where the shadow run stopped before the cell's end, and why nothing after it is known."""

    #: the cell's line (1-based), or None when the stop is not inside the cell's own code
    line: int | None
    #: ``data-dependent``, ``dynamic shape``, ``side effect``, ``not copied``, ``unsupported``,
    #: ``error`` (the cell raised something other than a device error on fake tensors)
    kind: str
    #: what the cell did there, in words
    reason: str
    #: the exception's own text
    detail: str = ""

    def text(self) -> str:
        where = f"line {self.line}" if self.line is not None else "outside the cell's code"
        detail = f" ({self.detail})" if self.detail else ""
        return f"Stopped at {where}: {self.reason}{detail}; predicted up to that line."


@dataclass(frozen=True)
class Fit:
    """Whether what the cell needs on one device beyond what it already holds fits there."""

    device: str
    #: bytes the cell allocates beyond those allocated when it starts (peak - start)
    need: int
    #: the device's free bytes (or the figure the caller gave), None where unknown
    free: int | None

    @property
    def fits(self) -> bool:
        return self.free is None or self.need <= self.free

    def text(self) -> str:
        free = "free memory unknown" if self.free is None else f"{format_bytes(self.free)} free"
        return f"would need {format_bytes(self.need)} on {self.device}, {free}"


@dataclass(repr=False)
class DryRunReport:
    """The result of :func:`~torchdevice_magic.dryrun.dry_run`."""

    cell: str
    #: the device error the cell would raise (raised by the fake run), or None
    error: BaseException | None = None
    #: the diagnosis of ``error``, made as the real run's is (:func:`..diagnose.diagnose`)
    diagnosis: Any = None
    #: the line the device error is on
    error_line: int | None = None
    #: where the prediction stopped short of the cell's end (None: it ran to the end or to
    #: the device error)
    stopped: Stop | None = None
    #: the memory forecast (:class:`.memory.MemoryForecast`), None when the run did not start
    memory: Any = None
    #: one per device the cell allocates on
    fits: tuple[Fit, ...] = ()
    #: other things worth knowing (names shared instead of copied, containers changed)
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: seconds the dry run took
    seconds: float = 0.0

    @property
    def device_error(self) -> bool:
        return self.diagnosis is not None

    @property
    def refused(self) -> tuple[Fit, ...]:
        """The devices where the cell would not fit: run for real, it would run out of memory."""
        return tuple(fit for fit in self.fits if not fit.fits)

    @property
    def completed(self) -> bool:
        """The shadow run reached the cell's end (or the device error it predicts)."""
        return self.stopped is None

    # -- rendering ----------------------------------------------------------------------------
    def lines(self) -> list[str]:
        out = [f"Dry run on fake tensors ({self.seconds:.2f} s; nothing real was touched)"]
        if self.memory is None and self.stopped is not None:  # the shadow run never started
            stop = self.stopped
            detail = f" ({stop.detail})" if stop.detail else ""
            return [*out, f"Nothing predicted: {stop.reason}{detail}."]
        if self.diagnosis is not None:
            out += self._error_lines()
        elif self.stopped is None:
            out.append("✓ No device error.")
        else:
            out.append("✓ No device error up to where the prediction stopped.")
        out += self._memory_lines()
        for fit in self.fits:
            if not fit.fits:
                out.append(f"✗ Would run out of memory: {fit.text()}.")
            elif fit.free is not None and not fit.device.startswith("cpu"):
                # the host's free memory is rarely the question: only its refusal gets a line
                out.append(f"✓ Fits: {fit.text()}.")
        if self.stopped is not None:
            out.append(self.stopped.text())
        out += [f"Note: {note}" for note in self.notes]
        return out

    def _error_lines(self) -> list[str]:
        """The device error: where (line, operator, argument), its diagnosis, and the message
        the real run would print, for matching the prediction to the traceback."""
        diagnosis = self.diagnosis
        where = f" on line {self.error_line}" if self.error_line is not None else ""
        if diagnosis.operator:
            argument = f" (argument {diagnosis.argument})" if diagnosis.argument else ""
            where += f", in {diagnosis.operator}{argument}"
        out = [f"✗ The cell would raise a device error{where}:"]
        out += ["  " + line for line in diagnosis.text().splitlines()]
        message = str(diagnosis.message).strip().splitlines()
        if message:
            out.append(f"  The real run's message: {message[0][:_MESSAGE_CHARS]}")
        return out

    def _memory_lines(self) -> list[str]:
        memory = self.memory
        if memory is None or not memory.peak:
            return []
        out = ["Memory per device (peak during the cell / left after it / at its start):"]
        for device in sorted(memory.peak, key=device_sort_key):
            out.append(
                f"  {device}: peak {format_bytes(memory.peak[device])}, left "
                f"{format_bytes(memory.left.get(device, 0))}, at start "
                f"{format_bytes(memory.start.get(device, 0))}"
            )
        for allocation in memory.biggest:
            where = f"line {allocation.line}" if allocation.line is not None else "before the cell"
            held = f", held by {allocation.variable}" if allocation.variable else ""
            out.append(
                f"  biggest: {format_bytes(allocation.nbytes)} on {allocation.device}, "
                f"{where}{held}"
            )
        return out

    def text(self) -> str:
        return "\n".join(self.lines())

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        lines = self.lines()
        diagnosis = ""
        if self.diagnosis is not None:
            # the diagnosis drawn as the real run's is (culprits, fix lines, the message)
            shown = len(self._error_lines())
            lines = [lines[0], lines[1], *lines[1 + shown :]]
            diagnosis = self.diagnosis._repr_html_()
        head, *rest = (html.escape(line) for line in lines)
        pre = '<pre style="white-space:pre-wrap">'
        first = rest[:1] if diagnosis else []
        after = rest[1:] if diagnosis else rest
        return (
            f'<div class="torchdevice-magic-dryrun"><p><b>{head}</b></p>'
            f"{pre}{chr(10).join(first)}</pre>{diagnosis}{pre}{chr(10).join(after)}</pre></div>"
        )
