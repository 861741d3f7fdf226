"""A cell run under a magic: the user's own code, its failing line in the user's numbering, and
where its names live -- so a device error inside ``%%time`` is explained as in a plain cell.

IPython's timing, profiling and capturing magics run the user's code as code of their own:
``%%time``/``%time`` compile it as ``<timed exec>``/``<timed eval>``, ``%%timeit``/``%timeit``
inside a function ``inner`` of ``<magic-timeit>``, ``%%prun``/``%prun`` through
``profile.runctx`` as ``<string>``, ``%%capture`` as a nested cell of its own (explained there),
``%run`` as the script's module (``-i``: in the user's namespace). Their frames number lines from
their own first line, and the cell IPython ran is one call (``get_ipython().run_cell_magic(...)``)
that reads none of the user's names. :func:`unwrap_run` takes the magic off: the code as the user
wrote it (:func:`user_code`: a wrapper's header line blanked, ``%time stmt`` read as ``stmt``, the
script of ``%run``), the failing line in the user's numbering, and the namespace the code ran in.

:class:`ShownErrors` finds the error a magic caught and showed itself (``%run`` does: the cell
then ends without an error). Pure: the standard library only; nothing of IPython is imported.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .frames import is_cell_code, is_user_filename, traceback_entries

__all__ = [
    "WRAPPERS",
    "CellRun",
    "ShownErrors",
    "Wrapper",
    "traceback_cell",
    "unwrap_run",
    "user_code",
    "wrapped_cell",
]


@dataclass(frozen=True)
class Wrapper:
    """A magic that runs the user's code, as ``%name [options] code`` or ``%%name [options]``
    followed by the code."""

    #: the magic's name
    name: str
    #: its short options as getopt letters (``n:`` takes a value)
    options: str = ""
    #: its long options that take no value (``--no-raise-error``)
    flags: tuple[str, ...] = ()
    #: in the cell form, what follows the options on the header line is code that runs first
    #: (``%%timeit`` setup, ``%%prun``); otherwise it is not code (``%%capture out``)
    header_is_code: bool = False
    #: in the cell form, the code that runs starts with the header's code (``%%prun`` runs the
    #: header's code, a newline and the body), so where there is some its line 1 is the cell's
    #: line 1; otherwise (or where the header holds no code: IPython drops leading empty lines)
    #: its line 1 is the body's first line, the cell's line 2
    runs_header_line: bool = False
    #: only the cell form runs code (``%capture`` is no line magic)
    cell_only: bool = False
    #: the code runs inside a function (timeit's ``inner``), where assigning a name makes it a
    #: local: a fix that rebinds a name belongs in a cell before, said in this note
    note: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"wrapper name {self.name!r} is not an identifier")
        if self.runs_header_line and not self.header_is_code:
            raise ValueError(f"wrapper {self.name}: a header line that runs holds code")
        if any(not flag.startswith("--") for flag in self.flags):
            raise ValueError(f"wrapper {self.name}: long options start with --")


#: The magics whose code is the user's, by name.
WRAPPERS: dict[str, Wrapper] = {
    wrapper.name: wrapper
    for wrapper in (
        Wrapper("time", flags=("--no-raise-error",)),
        Wrapper(
            "timeit",
            options="n:r:tcp:qo",
            header_is_code=True,
            note="timeit runs the code inside a function, where assigning a name makes it a "
            "local: run the fix in a cell before the timed one (moving data once is no part "
            "of what is timed).",
        ),
        Wrapper("prun", options="D:l:rs:T:q", header_is_code=True, runs_header_line=True),
        Wrapper("capture", flags=("--no-stderr", "--no-stdout", "--no-display"), cell_only=True),
    )
}

_LINE_MAGIC = re.compile(r"^(?P<indent>\s*)%(?P<name>\w+)(?P<rest>.*)$")
_CELL_MAGIC = re.compile(r"^\s*%%(?P<name>\w+)(?P<rest>.*)$")


def _code_after_options(rest: str, wrapper: Wrapper) -> str:
    """``-n1 -r 3 out = f(x)`` -> ``out = f(x)``: the wrapper's options taken off."""
    text = rest.strip()
    while text.startswith("-"):
        token, _, after = text.partition(" ")
        if token in wrapper.flags:
            text = after.lstrip()
            continue
        letter = token[1:2]
        at = wrapper.options.find(letter) if letter.isalpha() else -1
        if token.startswith("--") or at < 0:
            break  # not an option of this magic: the code itself (``-x`` is an expression)
        takes_value = wrapper.options[at + 1 : at + 2] == ":"
        if takes_value and len(token) == 2:
            _, _, after = after.lstrip().partition(" ")  # ``-n 1``: the value is the next token
        text = after.lstrip()
    return text


def user_code(source: str) -> str:
    """The cell as the user's code, line for line: a wrapper's ``%%name`` header read as
    ``pass`` (or as the code it runs), each ``%name [options] stmt`` line of a wrapper read as
    ``stmt``. Other magics and ``!`` lines stay for IPython's transform. (``pass``, not an
    empty line: IPython's transform drops leading empty lines, and the lines would shift.)"""
    lines = source.split("\n")
    start = 0
    head = _CELL_MAGIC.match(lines[0]) if lines else None
    if head is not None and head.group("name") in WRAPPERS:
        cell_wrapper = WRAPPERS[head.group("name")]
        code = _code_after_options(head.group("rest"), cell_wrapper)
        lines[0] = (code if cell_wrapper.header_is_code else "") or "pass"
        start = 1
    for i in range(start, len(lines)):
        m = _LINE_MAGIC.match(lines[i])
        wrapper = WRAPPERS.get(m.group("name")) if m is not None else None
        if m is not None and wrapper is not None and not wrapper.cell_only:
            lines[i] = m.group("indent") + _code_after_options(m.group("rest"), wrapper)
    return "\n".join(lines)


@dataclass(frozen=True)
class CellRun:
    """The code that failed, as the user wrote it, once the magic around it is taken off."""

    #: the user's code: the cell (:func:`user_code`) or the script ``%run`` ran
    source: str
    #: the failing line of ``source`` (None where the traceback holds no frame of it)
    lineno: int | None
    #: where the code's names live (the session's namespace; a script's globals; timeit's
    #: locals over the globals)
    namespace: Mapping[str, Any] | None
    #: how a line of ``source`` is named after its number: "" for the cell, `` of train.py``
    in_file: str = ""
    #: what the magic means for the fix (the wrapper's note), or ""
    note: str = ""


def _cell_frames(err: BaseException, chain: list[BaseException]) -> list[tuple[Any, int]]:
    """(frame, line) of each frame that runs cell code (module level, or a timing wrapper's
    function), outermost first, from the first exception of the chain that has any."""
    for e in [err, *chain]:
        found = [
            (frame, line)
            for frame, code, line in traceback_entries(getattr(e, "__traceback__", None))
            if is_user_filename(code.co_filename) and is_cell_code(code)
        ]
        if found:
            return found
    return []


def traceback_cell(err: BaseException) -> str:
    """The source of the cell that raised ``err``, read back from where the shell compiled it
    (IPython caches every cell's code in ``linecache`` under its cell file name): the cell of
    the outermost cell frame on the traceback, or "" where there is none (code run by
    ``exec``, a function called by an ipyparallel ``apply``). A silent run (ipyparallel's
    ``execute``, ``run_cell(silent=True)``) fires no ``pre_run_cell`` hook, so this is the only
    place its source can be read from."""
    frames = _cell_frames(err, [])
    if not frames:
        return ""
    try:
        return "".join(linecache.getlines(frames[0][0].f_code.co_filename))
    except Exception:
        return ""


def unwrap_run(
    err: BaseException,
    chain: list[BaseException],
    source: str,
    namespace: Mapping[str, Any] | None,
) -> CellRun:
    """The user's code that raised ``err``, its failing line and its namespace, for a cell
    ``source`` run plainly or under a magic (see the module docstring)."""
    code = user_code(source)
    frames = _cell_frames(err, chain)
    if not frames:
        return CellRun(code, None, namespace)
    outer, outer_line = frames[0]
    if _runs_script(source, outer.f_code.co_filename):
        # %run caught the error itself: its traceback starts in IPython, at the script
        return _script_run(outer, outer_line)
    if len(frames) == 1:
        # a plain cell; or a wrapper's body run as a cell of its own (%%capture), numbered
        # from the body's first line
        return CellRun(code, outer_line + _body_shift(source), namespace)
    inner, inner_line = frames[1]  # the code the magic compiled (what it ran may go deeper)
    if _runs_script(source, inner.f_code.co_filename):
        return _script_run(inner, inner_line)
    wrapper, line = _wrapper_and_line(source, outer_line, inner_line)
    note = wrapper.note if wrapper is not None else ""
    return CellRun(code, line, _namespace_of(inner, namespace), note=note)


_RUN_LINE = re.compile(r"^\s*%run\s+(?:-\S+\s+)*(?P<path>\S+)", re.MULTILINE)


def _runs_script(source: str, filename: str) -> bool:
    """Whether ``filename`` is a script a ``%run`` line of the cell runs (a file of that name;
    the cell itself is a file too in a notebook kernel, but no ``%run`` names it)."""
    if filename.startswith("<"):
        return False
    name = os.path.basename(filename)
    for m in _RUN_LINE.finditer(source):
        path = os.path.basename(m.group("path").strip("'\""))
        if name in (path, path + ".py"):
            return True
    return False


def _script_run(frame: Any, line: int) -> CellRun:
    """``%run script.py``: the script is the code, its module's globals the namespace."""
    filename = frame.f_code.co_filename
    script = "".join(linecache.getlines(filename))
    name = os.path.basename(filename)
    note = f"the error is in {name}, line {line}: the fix goes into {name}, above that line."
    return CellRun(script, line, frame.f_globals, f" of {name}", note)


def _wrapper_and_line(source: str, outer_line: int, inner_line: int) -> tuple[Wrapper | None, int]:
    """The wrapper that ran line ``inner_line`` of its code from the cell's line
    ``outer_line``, and the cell's line that is."""
    lines = source.split("\n")
    wrapper = _cell_wrapper(source)
    if wrapper is not None:
        return wrapper, inner_line + _body_shift(source)
    calling = lines[outer_line - 1] if 0 < outer_line <= len(lines) else ""
    m = _LINE_MAGIC.match(calling)
    if m is not None and m.group("name") in WRAPPERS:
        return WRAPPERS[m.group("name")], outer_line + inner_line - 1
    return None, outer_line  # code of another kind (exec): the cell's line that ran it


def _cell_wrapper(source: str) -> Wrapper | None:
    """The wrapper whose ``%%name`` header opens the cell, if any."""
    head = _CELL_MAGIC.match(source.split("\n", 1)[0])
    return WRAPPERS.get(head.group("name")) if head is not None else None


def _body_shift(source: str) -> int:
    """How many lines above line 1 of the code a ``%%wrapper`` ran its first line is: 1 where
    the code is the body, 0 where it starts with the header's own code; 0 for a plain cell."""
    wrapper = _cell_wrapper(source)
    if wrapper is None:
        return 0
    header = _CELL_MAGIC.match(source.split("\n", 1)[0])
    rest = header.group("rest") if header is not None else ""
    runs_header = wrapper.runs_header_line and _code_after_options(rest, wrapper).strip()
    return 0 if runs_header else 1


def wrapped_cell(outer: str, inner: str) -> str:
    """The cell the user wrote, for a cell run inside another: ``%%capture`` runs its body as
    a cell of its own, and the user wrote the outer cell. Any other nested cell (code that
    calls ``run_cell``) is its own."""
    wrapper = _cell_wrapper(outer)
    body = outer.split("\n", 1)[1] if "\n" in outer else ""
    if wrapper is not None and body.strip() == inner.strip():
        return outer
    return inner


def _namespace_of(frame: Any, namespace: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """Where the wrapped code's names live: timeit runs the body inside a function, whose
    locals (what the body assigned) come before the globals."""
    try:
        if frame.f_code.co_name == "<module>":
            return namespace if namespace is not None else frame.f_globals
        local_values = dict(frame.f_locals)
    except Exception:
        return namespace
    return ChainMap(local_values, dict(namespace if namespace is not None else frame.f_globals))


class ShownErrors:
    """The error a magic caught and showed itself: ``%run`` shows the script's traceback and
    the cell ends without an error. IPython records every error it shows as
    ``sys.last_value``; one that appeared since the cell started is new. Only its ``id`` is
    kept here, so no traceback (and no tensor its frames hold) is kept alive."""

    def __init__(self) -> None:
        self._last = id(getattr(sys, "last_value", None))

    def cell_started(self) -> None:
        """Errors shown before this cell (between cells: an ipyparallel engine's ``apply``
        shows its error with no cell around it) are not this cell's."""
        self._last = id(getattr(sys, "last_value", None))

    def error_of(self, result: Any) -> BaseException | None:
        """The error of a finished cell: the one it raised, else one a magic showed during it."""
        shown = getattr(sys, "last_value", None)
        new = shown if isinstance(shown, BaseException) and id(shown) != self._last else None
        self._last = id(shown)
        raised = getattr(result, "error_in_exec", None)
        return raised if isinstance(raised, BaseException) else new
