"""What a move reports: :class:`MoveResult` (and its ``undo()``), :class:`MovedItem`,
:class:`MoveError` for refusals. Data only; no torch import, and nothing of the engine: the
undo record a result carries brings its own ``take_back`` (:mod:`.undo`), so every other module
of the package may import this one and this one imports none of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from ..units import format_bytes

ProgressCallback = Callable[[int, int], None]


class Undoable(Protocol):
    """What a move leaves to be taken back (:class:`~.undo.UndoRecord`)."""

    used: bool  # taken back already
    to_meta: bool  # the move went to meta: nothing to take back (meta keeps no data)

    def take_back(self, progress: ProgressCallback | None) -> MoveResult: ...


def one_line(text: object) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def reason(error: BaseException, limit: int = 240) -> str:
    """``Type: first line of the message``, cut short (torch's dispatcher errors list every
    backend on one very long line)."""
    text = one_line(error)
    out = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return out if len(out) <= limit else out[: limit - 1].rstrip() + "…"


def format_seconds(seconds: float) -> str:
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.1f} s"


class MoveError(ValueError):
    """A move was refused before anything was touched; the message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class MovedItem(NamedTuple):
    """One top-level name that was moved (a named tuple: cheap to make by the ten thousand)."""

    name: str
    kind: str  # "tensor", "parameter", "module", "optimizer", "container" or "object"
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
    #: What the memory pre-check predicted the move allocates on its target(s): each storage
    #: once, on CUDA rounded up to the caching allocator's 512-byte blocks.
    predicted_bytes: int = 0
    #: Plain tensor attributes of moved modules (``model.pos.pe``, not a buffer) that stay
    #: where they are, as ``module.to()`` leaves them: "model.pos.pe on cpu".
    left_behind: list[str] = field(default_factory=list)
    _undo: Undoable | None = field(default=None, repr=False, compare=False)

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
            return one_line(f"Nothing was moved: {self.failed}")
        skipped = _skipped_text(self.skipped)
        if not self.moved:
            return f"Nothing to move to {self.device}{skipped}{self._left_behind_text()}"
        n = len(self.moved)
        text = (
            f"Moved {n} object{'s' if n != 1 else ''} ({format_bytes(self.bytes_moved)}) "
            f"to {self.device} in {format_seconds(self.seconds)}{skipped}"
        )
        if self.still_held_bytes:
            held = format_bytes(self.still_held_bytes)
            text += (
                f"; {held} still held on the old device by other references "
                "(%devices --holders names them)"
            )
        return text + self._left_behind_text()

    def _left_behind_text(self) -> str:
        if not self.left_behind:
            return ""
        shown = ", ".join(self.left_behind[:3])
        more = f" and {len(self.left_behind) - 3} more" if len(self.left_behind) > 3 else ""
        one = len(self.left_behind) == 1
        what = "a plain tensor attribute" if one else "plain tensor attributes"
        it, its = ("it", "its") if one else ("them", "their")
        return (
            f"; left {shown}{more}: {what}, which .to() does not move "
            f"(register_buffer in {its} class makes {it} move with the module)"
        )

    def undo(self, *, progress: ProgressCallback | None = None) -> MoveResult:
        """Move everything this move moved back where it was, each object to its own device(s).

        Modules and Parameters move back in place; tensors are put back where they were found.
        Optimizer state follows its parameters back, including state created after the move.
        A name rebound since the move is skipped. Raises :class:`MoveError` for a move to
        ``meta`` (meta tensors keep no data), a failed move, or a move already undone.
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
        result = record.take_back(progress)
        if result.failed is None:
            record.used = True
        return result


def _skipped_text(skipped: list[tuple[str, str]], shown: int = 3) -> str:
    """What was left where it was, in words: ``; skipped model (already on cuda:0)``."""
    if not skipped:
        return ""
    parts = [f"{name} ({reason})" for name, reason in skipped[:shown]]
    if len(skipped) > shown:
        parts.append(f"{len(skipped) - shown} more")
    return "; skipped " + ", ".join(parts)
