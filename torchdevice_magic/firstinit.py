"""Where the accelerator was first initialised in this kernel, and the fork errors that need it.

A forked process cannot use CUDA once its parent has initialised it: accelerate's
``notebook_launcher`` then fails with "CUDA has been initialized before the `notebook_launcher`
could create a forked subprocess" and a fork-based worker with torch's "Cannot re-initialize CUDA
in forked subprocess". The user has to find which earlier cell touched CUDA; we run after every
cell, so we know.

:class:`FirstInit` notes the first cell after which the device type is initialised (reading
``torch.<type>.is_initialized()``, which never initialises it), and, cheaply, the line: it wraps
``_lazy_init`` (the entry torch's C++ and Python sides call to initialise the device) with a
recorder that notes the first user frame and puts the original back as soon as the device is
initialised. It wraps it wherever it is held: on the device module, and in the modules that
imported it by name (``torch.cuda.memory``, ``torch.cuda.random``: their
``set_per_process_memory_fraction`` or ``get_rng_state`` call their own copy, never
``torch.cuda._lazy_init``). The recorder runs only when torch itself initialises the device: a
kernel that never touches CUDA never calls it, and one that has costs nothing more.
Pure core: no IPython; torch only from ``sys.modules``.
"""

from __future__ import annotations

import linecache
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import Any

from .sourcefiles import code_owner

#: the device types watched: CUDA (ROCm calls itself cuda too) and XPU use the same lazy init
WATCHED = ("cuda", "xpu")

#: accelerate/launchers.py (notebook_launcher) and torch/cuda/__init__.py (_lazy_init), as they
#: word them; the device type is a group (CUDA, XPU...)
FORK_MESSAGES = (
    re.compile(
        r"(\w+) has been initialized before the `notebook_launcher` could create a forked "
        r"subprocess"
    ),
    re.compile(r"Cannot re-initialize (\w+) in forked subprocess"),
)


@dataclass(frozen=True, slots=True)
class InitSite:
    """Where a device type was first initialised: the cell, and the line when it was caught."""

    device_type: str
    cell: int | None  # the [n] of the cell after which it was initialised; None: before we looked
    filename: str | None = None
    line: int | None = None
    source: str = ""  # the line's text, stripped

    def text(self) -> str:
        """One line for ``%devices``: "CUDA was first initialised by cell [3], line 2: ..."."""
        name = self.device_type.upper()
        if self.cell is None:
            return f"{name} was already initialised when torchdevice_magic started watching"
        where = f"{name} was first initialised by cell [{self.cell}]"
        if self.line is not None:
            where += f", line {self.line}"
            if self.source:
                where += f": {self.source}"
        return where


def _is_user_frame(filename: str) -> bool:
    """A notebook cell or the user's own file: not the standard library, an installed package
    (torch, accelerate) or this extension."""
    return code_owner(filename).is_users


class FirstInit:
    """Notes, once per device type, where it was first initialised. ``after_cell`` is called
    after every cell (cheap: one ``is_initialized()`` per watched type until it is noted)."""

    def __init__(self, is_user_frame: Callable[[str], bool] = _is_user_frame) -> None:
        self.sites: dict[str, InitSite] = {}
        self._is_user_frame = is_user_frame
        #: device type -> (the original _lazy_init, the recorder) while the recorder is in place
        self._wrapped: dict[str, tuple[Any, Any]] = {}
        #: device type -> (filename, line) the recorder caught, until the cell ends
        self._caught: dict[str, tuple[str, int]] = {}
        self._started = False

    def start(self) -> None:
        """Note what is already initialised (before we could see a cell) and put the line
        recorder in place for the rest. Called once torch is imported; never initialises."""
        if self._started or sys.modules.get("torch") is None:
            return
        self._started = True
        for kind in WATCHED:
            module = _device_module(kind)
            if module is None:
                continue
            if _initialized(module):
                self.sites[kind] = InitSite(kind, None)
            else:
                self._wrap(kind, module)

    def stop(self) -> None:
        """Put every original ``_lazy_init`` back (the extension is unloaded)."""
        for kind in list(self._wrapped):
            self._unwrap(kind)

    def after_cell(self, number: int | None) -> list[InitSite]:
        """The sites first noted after cell ``number`` (usually none)."""
        self.start()
        found = []
        for kind in WATCHED:
            if kind in self.sites or (module := _device_module(kind)) is None:
                continue
            if not _initialized(module):
                continue
            filename, line = self._caught.pop(kind, (None, None))
            source = ""
            if filename is not None and line is not None:
                source = linecache.getline(filename, line).strip()
            site = InitSite(kind, number, filename, line, source)
            self.sites[kind] = site
            self._unwrap(kind)
            found.append(site)
        return found

    def lines(self) -> list[str]:
        return [site.text() for site in self.sites.values()]

    def _wrap(self, kind: str, module: Any) -> None:
        original = getattr(module, "_lazy_init", None)
        if original is None or kind in self._wrapped:
            return
        caught = self._caught
        is_user = self._is_user_frame
        unwrap = self._unwrap

        def _lazy_init(*args: Any, **kwargs: Any) -> Any:
            frame: FrameType | None = sys._getframe(1)
            while frame is not None and not is_user(frame.f_code.co_filename):
                frame = frame.f_back
            site = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else None
            del frame
            result = original(*args, **kwargs)  # a failed attempt raises: nothing is noted
            if _initialized(module):  # noted once, then the original is back: no cost after
                if site is not None:
                    caught.setdefault(kind, site)
                unwrap(kind)
            return result

        _lazy_init.__wrapped__ = original  # type: ignore[attr-defined]
        self._wrapped[kind] = (original, _lazy_init)
        for holder in _holders_of(original):
            setattr(holder, "_lazy_init", _lazy_init)  # noqa: B010

    def _unwrap(self, kind: str) -> None:
        original, recorder = self._wrapped.pop(kind, (None, None))
        if recorder is None:
            return
        # a module imported while the recorder was in place took it by name too
        for holder in _holders_of(recorder):
            setattr(holder, "_lazy_init", original)  # noqa: B010


def _holders_of(function: Any) -> list[ModuleType]:
    """Every imported module whose ``_lazy_init`` is ``function`` (read from the module's
    ``__dict__``: no module ``__getattr__`` runs)."""
    found = []
    for module in list(sys.modules.values()):
        if isinstance(module, ModuleType) and module.__dict__.get("_lazy_init") is function:
            found.append(module)
    return found


def fork_error_advice(error: BaseException, sites: dict[str, InitSite]) -> str | None:
    """For a fork / notebook_launcher error (anywhere in the exception chain): which cell first
    initialised the device, and the fixes. None for any other error."""
    kind = None
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and kind is None:
        seen.add(id(current))
        text = str(current.args[0]) if current.args else str(current)
        for pattern in FORK_MESSAGES:
            match = pattern.search(text)
            if match:
                kind = match.group(1).lower()
                break
        current = current.__cause__ or current.__context__
    if kind is None:
        return None
    name = kind.upper()
    site = sites.get(kind)
    if site is None:
        where = f"{name} was initialised in this kernel, by a cell torchdevice_magic did not see"
        keep = f"keep {name} out of every cell before the launcher"
    elif site.cell is None:
        where = site.text()
        keep = f"keep {name} out of every cell before the launcher"
    else:
        where = site.text()
        keep = (
            f"keep {name} out of the cells before the launcher (cell [{site.cell}] and what it "
            f"calls: do that work inside the launched function)"
        )
    return (
        f"{where}. A forked process cannot use {name} once its parent has initialised it. "
        f"Fix: restart the kernel and {keep}; or start the processes with 'spawn' "
        f"(torch.multiprocessing.spawn, or multiprocessing.set_start_method('spawn')), which "
        f"does not inherit the parent's {name} state."
    )


def _device_module(kind: str) -> Any:
    torch = sys.modules.get("torch")
    return getattr(torch, kind, None) if torch is not None else None


def _initialized(module: Any) -> bool:
    check = getattr(module, "is_initialized", None)
    try:
        return bool(check()) if check is not None else False
    except Exception:
        return False
