"""Which traceback frames are the user's, and how to show a traceback without torch's insides.

Pure: the standard library only (torch's directory is read from ``sys.modules`` when imported).
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterator
from typing import Any

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


def _torch() -> Any:
    return sys.modules.get("torch")


_STD_DIRS: tuple[str, ...] | None = None
_STD_DIRS_WITH_TORCH = False


def _library_dirs() -> tuple[str, ...]:
    """Directories whose frames are library code, not the user's."""
    global _STD_DIRS, _STD_DIRS_WITH_TORCH
    with_torch = _torch() is not None
    if _STD_DIRS is not None and with_torch == _STD_DIRS_WITH_TORCH:
        return _STD_DIRS
    dirs: set[str] = set()
    try:
        paths = sysconfig.get_paths()
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            if paths.get(key):
                dirs.add(paths[key])
    except Exception:
        pass
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        dirs.add(os.path.join(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}"))
    torch = _torch()
    try:
        if torch is not None and getattr(torch, "__file__", None):
            dirs.add(os.path.dirname(torch.__file__))
    except Exception:
        pass
    dirs.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    expanded: set[str] = set()
    for d in dirs:
        for variant in (d, os.path.realpath(d)):
            expanded.add(os.path.normcase(os.path.abspath(variant)).rstrip(os.sep) + os.sep)
    _STD_DIRS = tuple(sorted(expanded))
    _STD_DIRS_WITH_TORCH = with_torch  # recompute once torch (maybe a source checkout) arrives
    return _STD_DIRS


def is_user_filename(filename: str) -> bool:
    """True for the user's code: notebook cells and their own files, not torch/stdlib/libs."""
    if not filename:
        return False
    if filename.startswith("<"):
        # ``<ipython-input-3-...>`` and ``<string>`` are user code; ``<frozen ...>`` is not.
        return not filename.startswith(("<frozen", "<__array_function__"))
    norm = os.path.normcase(os.path.abspath(filename))
    parts = norm.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    return not any(norm.startswith(d) for d in _library_dirs())


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
    """A third-party package's file (site-packages), neither torch's, this package's, nor the
    standard library's: its code made the mismatch where the user's code only called it."""
    if not filename or filename.startswith("<") or is_torch_filename(filename):
        return False
    parts = os.path.normcase(os.path.abspath(filename)).split(os.sep)
    return "site-packages" in parts or "dist-packages" in parts


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


def torch_dirs() -> tuple[str, ...]:
    """torch's own directories (and this package's): frames there are collapsed."""
    dirs = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    torch = _torch()
    try:
        if torch is not None and getattr(torch, "__file__", None):
            dirs.append(os.path.dirname(torch.__file__))
    except Exception:
        pass
    out = []
    for d in dirs:
        for variant in (d, os.path.realpath(d)):
            out.append(os.path.normcase(os.path.abspath(variant)).rstrip(os.sep) + os.sep)
    return tuple(out)


def is_torch_filename(filename: str) -> bool:
    if not filename or filename.startswith("<"):
        return False
    norm = os.path.normcase(os.path.abspath(filename))
    return any(norm.startswith(d) for d in torch_dirs())


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
