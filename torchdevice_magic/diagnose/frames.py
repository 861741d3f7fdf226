"""Which traceback frames are the user's, and how to show a traceback without torch's insides.

Pure: whose code a file is comes from :mod:`..sourcefiles`, the one rule for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ..sourcefiles import CodeKind, code_owner

__all__ = [
    "collapse_library_frames",
    "is_cell_code",
    "is_library_filename",
    "is_user_filename",
    "library_frames",
    "traceback_entries",
    "user_frames",
]

#: a traceback longer than this is a loop (a hand-built one), not a call stack
_MOST_ENTRIES = 10_000


def traceback_entries(tb: Any) -> Iterator[tuple[Any, Any, int]]:
    """``(frame, code, line)`` of each entry of a traceback, outermost first; an entry whose
    frame cannot be read is skipped, and the walk ends where the next one cannot be reached."""
    steps = 0
    while tb is not None and steps < _MOST_ENTRIES:
        steps += 1
        try:
            frame = tb.tb_frame
            entry = (frame, frame.f_code, tb.tb_lineno)
        except Exception:
            entry = None
        if entry is not None:
            yield entry
        try:
            tb = tb.tb_next
        except Exception:
            return


def is_user_filename(filename: str) -> bool:
    """True for the user's code: notebook cells and their own files, not torch/stdlib/libs."""
    return code_owner(filename).is_users


#: (file name, function name) of the functions a timing magic wraps the user's code in:
#: ``%%timeit`` runs the cell's body inside ``inner`` of ``<magic-timeit>``.
_WRAPPER_FUNCTIONS = frozenset({("<magic-timeit>", "inner")})


def is_cell_code(code: Any) -> bool:
    """Whether a code object runs a cell's own code (module level: the cell, the code a
    timing magic compiled, a ``%run`` script), not a function the user defined."""
    try:
        name, filename = code.co_name, code.co_filename
    except Exception:
        return False
    return name == "<module>" or (filename, name) in _WRAPPER_FUNCTIONS


def user_frames(tb: Any, limit: int = 3) -> list[Any]:
    """The innermost ``limit`` user function frames (outermost first); cell code skipped."""
    frames = [
        frame
        for frame, code, _ in traceback_entries(tb)
        if is_user_filename(code.co_filename) and not is_cell_code(code)
    ]
    return frames[-limit:]


def is_library_filename(filename: str) -> bool:
    """An installed package's file (site-packages), neither torch's, this package's, nor the
    standard library's: its code made the mismatch where the user's code only called it."""
    # a generated pseudo-file (``<decorator-gen-3>``) has no line to show
    return code_owner(filename).kind is CodeKind.PACKAGE and not filename.startswith("<")


def library_frames(tb: Any, limit: int = 3) -> list[Any]:
    """The innermost ``limit`` third-party library frames below the last user frame
    (outermost first): where a library module read its own plain tensor attribute, or made a
    tensor without ``device=``."""
    frames: list[Any] = []
    for frame, code, _ in traceback_entries(tb):
        if is_user_filename(code.co_filename):
            frames = []  # only what runs below the user's last frame
        elif is_library_filename(code.co_filename) and code.co_name != "<module>":
            frames.append(frame)
    return frames[-limit:]


def is_torch_filename(filename: str) -> bool:
    """torch's own code or this package's: frames there are collapsed."""
    return code_owner(filename).kind in (CodeKind.TORCH, CodeKind.EXTENSION)


#: the trace package's op recorders: a failing op's frames there are the extension's own plumbing
#: (their locals are cleared when the op fails, ``__tracebackhide__`` with them)
_RECORDER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "trace")


def _is_recorder_filename(filename: str) -> bool:
    return os.path.dirname(filename) == _RECORDER_DIR


def collapse_library_frames(tb: Any) -> tuple[list[Any], int]:
    """The traceback entries to show: the user's frames, each run of torch frames replaced by
    its first entry (where the user's call entered torch). Returns (tb objects, hidden count)."""
    shown: list[Any] = []
    hidden = 0
    in_torch = False
    steps = 0
    while tb is not None and steps < 10_000:
        steps += 1
        try:
            filename = tb.tb_frame.f_code.co_filename
            # IPython's (and pytest's) convention: a frame that asks to stay out of tracebacks
            hide = bool(tb.tb_frame.f_locals.get("__tracebackhide__", False))
            hide = hide or _is_recorder_filename(filename)
        except Exception:
            filename, hide = "", False
        if hide:
            pass  # left out, as IPython leaves it out of a full traceback
        elif is_torch_filename(filename):
            if in_torch:
                hidden += 1
            else:
                shown.append(tb)
            in_torch = True
        else:
            shown.append(tb)
            in_torch = False
        tb = tb.tb_next
    return shown, hidden
