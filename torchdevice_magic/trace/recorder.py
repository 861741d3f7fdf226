"""The recorder: :class:`Tracer` (a context manager) and :func:`trace` (run a cell under it).

The hot path (``Tracer.on_op``, called by the dispatch mode for every aten op) only counts
ops per device and module unless they are interesting; copies, host reads and ops mixing
devices are noted with the user's line (:mod:`.findings`, :mod:`.locate`). The report is
assembled when the traced code is done (:mod:`.assembly`).
"""

from __future__ import annotations

import linecache
import sys
import threading
from collections.abc import Callable
from typing import Any

from .assembly import Places, assemble_report
from .findings import Findings
from .frames import module_path
from .locate import FrameLocator
from .modes import Recorder, mode_classes
from .ops import (
    COPY,
    HOST_READ,
    INDEX,
    SEQUENCES,
    benign_mix,
    boolean_index,
    classify,
    meta_mix,
    mixed_devices,
    op_name,
    output_device,
    read_label,
    shape_only,
)
from .report import TraceReport

#: per aten op, ``id(op)`` -> (its kind, how to run it). The op runs through its C++ callable
#: (what ``OpOverload.__call__`` calls, one Python call fewer per op); the dict is keyed by id
#: because ``OpOverload.__hash__`` is Python code. Ops are made once per process: the cache is
#: shared by every recorder, and keeps the ops it has seen alive so their ids stay theirs.
_OP_KINDS: dict[int, tuple[int, Any]] = {}
_OPS_SEEN: list[Any] = []


def _classify(func: Any) -> tuple[int, Any]:
    run = func._op if type(func) is sys.modules["torch._ops"].OpOverload else func
    _OPS_SEEN.append(func)
    entry = _OP_KINDS[id(func)] = (classify(func), run)
    return entry


#: the file name ``trace`` compiles a cell under (tracebacks and the report say "line N")
CELL_FILENAME = "<traced cell>"


class Tracer:
    """Record the ops run inside ``with Tracer(namespace): ...``; then :meth:`report`.

    ``namespace``: where module and variable names are looked up (the user's globals).
    ``source``: the cell's text, and ``filename`` the name its code was compiled under (found
    by itself when omitted: the frame running at module level in ``namespace``).
    ``modules``: attribute ops to module paths (``ModuleTracker``).
    ``file_label``: how to show a file name (IPython: an earlier cell's code file -> ``In[3]``);
    by default its base name.

    It is the :class:`~torchdevice_magic.trace.modes.Recorder` its modes report to.
    """

    def __init__(
        self,
        namespace: dict[str, Any] | None = None,
        source: str | None = None,
        filename: str | None = None,
        modules: bool = True,
        file_label: Callable[[str], str | None] | None = None,
    ) -> None:
        self.namespace = namespace if namespace is not None else {}
        self.source = source
        self.filename = filename
        self.file_label = file_label
        self.track_modules = modules
        self.active = False
        self.error: BaseException | None = None
        self._modes: list[Any] = []
        self._reset(None)

    def _reset(self, stop: Any) -> None:
        locator = FrameLocator(stop, threading.get_ident())
        self._findings = Findings(locator, self.namespace, self.filename)
        # the hot path's state, read as attributes of the recorder itself
        self._ops = self._findings.ops
        self._module_stack = self._findings.module_stack
        self._tensor: Any = None
        self._suppress = 0  # > 0: ops run by a function we noted (printing): not the user's
        self._label: str | None = None  # the Python spelling of the scalar read running
        self._meta_noted = False  # the op running was noted as the first meta mix

    # -- entering and leaving ----------------------------------------------------------------
    def __enter__(self) -> Tracer:
        if self.active:
            raise RuntimeError("this Tracer is already running")
        if "torch" not in sys.modules:  # never import torch on the user's behalf
            self.active = True
            self._modes = []
            return self
        self._reset(sys._getframe(1))
        modes = mode_classes()
        self._tensor = sys.modules["torch"].Tensor
        self._modes = []
        recorder: Recorder = self  # the modes' side of the recorder, checked by mypy
        try:
            if self.track_modules and modes.tracker is not None:
                self._enter(modes.tracker(recorder))
            self._enter(modes.function(recorder))
            self._enter(modes.dispatch(recorder))
        except BaseException:
            self._exit_all(None, None, None)
            raise
        self.active = True
        return self

    def _enter(self, mode: Any) -> None:
        mode.__enter__()
        self._modes.append(mode)

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        self._exit_all(kind, value, tb)
        if value is not None and self.error is None:
            self.error = value

    def _exit_all(self, kind: Any, value: Any, tb: Any) -> None:
        # innermost first; every mode comes off even if one of them fails to
        failure: BaseException | None = None
        while self._modes:
            mode = self._modes.pop()
            try:
                mode.__exit__(kind, value, tb)
            except BaseException as error:  # noqa: BLE001 - re-raised below, after the rest
                failure = failure or error
        self.active = False
        self._findings.locator.stop = None
        self._module_stack.clear()
        if self.filename is None:
            self.filename = self._findings.filename
        if failure is not None:
            raise failure

    # -- the hot path ---------------------------------------------------------------------------
    def on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Called by the dispatch mode for each aten op; runs it and records what it did.

        The hot path: most ops read one device per tensor input and bump one counter."""
        __tracebackhide__ = True  # IPython (and pytest) leave this frame out of tracebacks
        try:
            kind, run = _OP_KINDS[id(func)]
        except KeyError:
            kind, run = _classify(func)
        if self._suppress:
            return run(*args, **kwargs)
        first = devices = None
        noted = False
        try:
            tensor = self._tensor
            for a in args:
                if isinstance(a, tensor):
                    d = a.device
                    if first is None:
                        first = d
                    elif d != first:
                        devices = mixed_devices(args, kwargs)
                        break
                elif type(a) in SEQUENCES and a and isinstance(a[0], tensor):
                    devices = mixed_devices(args, kwargs)
                    break
            else:
                for a in kwargs.values() if kwargs else ():  # out=, a tensor by keyword
                    if isinstance(a, tensor):
                        d = a.device
                        if first is None:
                            first = d
                        elif d != first:
                            devices = mixed_devices(args, kwargs)
                            break
            if devices is not None:
                noted = self._mixed(func, kind, args, kwargs, devices)
                if len(devices) < 2:
                    first = devices[0] if devices else None
                    devices = None
        except Exception:  # a recorder bug must never reach the user's cell
            self._findings.internal_errors += 1
        try:
            out = run(*args, **kwargs)
        except BaseException:
            if devices is not None and kind != COPY:
                self._failed(func, args, kwargs, devices, noted)
            raise
        try:
            if devices is not None:
                first = "+".join(devices)
            elif first is None:
                first = output_device(out)
            stack = self._module_stack
            key = (first, stack[-1][0]) if stack else first
            ops = self._ops
            ops[key] = ops.get(key, 0) + 1
            if kind:
                self._note(func, kind, args, out, first)
        except Exception:
            self._findings.internal_errors += 1
        return out

    def _mixed(
        self,
        func: Any,
        kind: int,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        devices: list[str],
    ) -> bool:
        """The op's inputs span ``devices``: note it when it is the first divergence (a copy or
        a mix torch accepts by design is none), and when it is the first op computing with a
        meta tensor beside a real one; True when noted as the divergence."""
        findings = self._findings
        self._meta_noted = False
        if len(devices) < 2 or kind == COPY:
            return False
        if findings.meta_mix is None and "meta" in devices and meta_mix(func, args, kwargs):
            findings.note_meta_mix(func, args, kwargs, devices)
            self._meta_noted = findings.meta_mix is not None
        if findings.divergence is not None or shape_only(func) or benign_mix(kind, args, kwargs):
            return False
        findings.note_divergence(func, args, kwargs, devices, raised=False)
        return True

    def _failed(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        devices: list[str],
        noted: bool,
    ) -> None:
        """An op whose inputs span ``devices`` raised (torch refused the mix)."""
        findings = self._findings
        if findings.divergence is None:
            findings.note_divergence(func, args, kwargs, devices, raised=True)
        elif noted:  # noted just before it ran
            findings.divergence["raised"] = True
        if self._meta_noted:
            # torch refused this meta mix: the error says so; a later silent one is still news
            findings.meta_mix = None
            self._meta_noted = False
        findings.count_failed_op(devices)

    def _note(self, func: Any, kind: int, args: tuple[Any, ...], out: Any, device: Any) -> None:
        """A copy or a host read ran: note it on the user's line."""
        if kind == COPY:
            self._findings.note_copy(func, args, out, self._tensor)
        elif kind == HOST_READ or (kind == INDEX and boolean_index(args)):
            label = self._label or read_label(func)
            self._findings.note_read(label or op_name(func), device)

    def on_function(
        self, func: Any, entry: tuple[str, bool], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Called by the function mode for the torch functions it lists; only what dispatch
        cannot see is recorded (printing, ``.tolist()``, ``.numpy()``), and the Python
        spelling of a scalar read (``float(t)``, ``bool(t)``) is noted for the label."""
        __tracebackhide__ = True
        if self._suppress:
            return func(*args, **kwargs)
        label, is_read = entry
        if not is_read:  # item/float/bool/int: dispatch sees the read; give it its name
            outer, self._label = self._label, label
            try:
                return func(*args, **kwargs)
            finally:
                self._label = outer
        try:
            tensor = args[0] if args and isinstance(args[0], self._tensor) else None
            if tensor is not None:
                self._findings.note_read(label, tensor.device)
        except Exception:
            self._findings.internal_errors += 1
        self._suppress += 1  # printing runs ops of its own; they are not the user's
        try:
            return func(*args, **kwargs)
        finally:
            self._suppress -= 1

    # -- modules ----------------------------------------------------------------------------------
    def module_entered(self, name: str, module: Any) -> None:
        self._module_stack.append((name, module))

    def module_left(self, module: Any) -> list[str]:
        # pop up to this module (a forward that raised, caught by the user, left its entry
        # behind)
        stack = self._module_stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][1] is module:
                closed = [name for name, _ in stack[i:]]
                del stack[i:]
                return closed
        return []

    def internal_error(self) -> None:
        self._findings.internal_errors += 1

    def module_name(self, module: Any) -> str | None:
        """The namespace's name for a module: ``model`` or ``model.encoder.layers.3`` (the
        first top-level module holding it); None when no name reaches it. (ModuleTracker
        caches the answer per module, and names the children of a named module itself.)"""
        return module_path(self.namespace, module)

    # -- the report -------------------------------------------------------------------------------
    def report(self, error: BaseException | None = None) -> TraceReport:
        """What the traced code did (``error``: the exception it raised, if not kept)."""
        error = error if error is not None else self.error
        filename = self.filename if self.filename is not None else self._findings.filename
        places = Places(self.source, filename, self.file_label)
        return assemble_report(self._findings, places, error)


def trace(
    cell: str,
    namespace: dict[str, Any] | None = None,
    *,
    filename: str = CELL_FILENAME,
    modules: bool = True,
) -> TraceReport:
    """Run ``cell`` (Python source) in ``namespace`` under the recorder; return what it saw.

    An exception the cell raises is kept in ``report.error`` (everything up to it is still
    reported); ``KeyboardInterrupt`` and other non-``Exception`` errors propagate after the
    modes are removed. A ``SyntaxError`` is raised as is: nothing ran.
    """
    namespace = namespace if namespace is not None else {}
    code = compile(cell, filename, "exec")
    # tracebacks and the report quote the cell's lines
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    tracer = Tracer(namespace, source=cell, filename=filename, modules=modules)
    try:
        with tracer:
            exec(code, namespace)  # noqa: S102 - running the user's cell is the point
    except Exception as error:  # noqa: BLE001 - the report carries it
        return tracer.report(error)
    return tracer.report()
