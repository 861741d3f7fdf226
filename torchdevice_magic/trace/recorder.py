"""The recorder: :class:`Tracer` (a context manager) and :func:`trace` (run a cell under it).

The hot path (``Tracer.on_op``, called by the dispatch mode for every aten op) only counts
ops per device and module unless they are interesting; copies, host reads and ops mixing
devices look at the Python stack for the user's line (:mod:`.frames`). The report
(:mod:`.report`) is built when the traced code is done.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from ..units import device_sort_key
from . import modes as _modes
from .frames import _library_prefixes, _loop_lines, _name_in_frame
from .modes import (
    _COPY,
    _HOST_READ,
    _INDEX,
    _READ_NAMES,
    _SEQUENCES,
    _benign_mix,
    _boolean_index,
    _classify,
    _mixed,
    _mode_classes,
    _op_name,
    _output_device,
    _tensors,
)
from .report import _NAMED_COPIES, Divergence, HostRead, TraceReport, Transfer

#: the file name ``trace`` compiles a cell under (tracebacks and the report say "line N")
CELL_FILENAME = "<traced cell>"


_SUPPRESS: Any = object()  # ops of ours or IPython's outside the traced code: not recorded


_OURS, _THEIRS = 1, 2  # library code: this package's / torch's, IPython's, the stdlib's


# -- the recorder -------------------------------------------------------------------------------


class Tracer:
    """Record the ops run inside ``with Tracer(namespace): ...``; then :meth:`report`.

    ``namespace``: where module and variable names are looked up (the user's globals).
    ``source``: the cell's text, and ``filename`` the name its code was compiled under (found
    by itself when omitted: the frame running at module level in ``namespace``).
    ``modules``: attribute ops to module paths (``ModuleTracker``).
    ``file_label``: how to show a file name (IPython: an earlier cell's code file -> ``In[3]``);
    by default its base name.
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
        self._reset()

    def _reset(self) -> None:
        self._kinds: dict[Any, int] = {}
        self._library: dict[CodeType, int] = {}
        self._direct = True
        self._borrowed = False
        self._thread = threading.get_ident()
        self._ops: dict[Any, int] = {}  # (devices key, module) -> count
        self._transfers: dict[Any, list[Any]] = {}  # (code, line, src, dst) -> [n, bytes, ...]
        self._reads: dict[Any, list[Any]] = {}  # (code, line, device) -> [n, ops, module]
        self._divergence: dict[str, Any] | None = None
        self._unattributed = 0
        self._suppress = 0
        self._label: str | None = None
        self._module_stack: list[tuple[str, Any]] = []
        self._stop: FrameType | None = None
        self._internal_errors = 0

    # -- entering and leaving ----------------------------------------------------------------
    def __enter__(self) -> Tracer:
        if self.active:
            raise RuntimeError("this Tracer is already running")
        if "torch" not in sys.modules:  # never import torch on the user's behalf
            self.active = True
            self._modes: list[Any] = []
            return self
        self._reset()
        self._packages, self._stdlib, self._site = _library_prefixes()
        # this package's modules, all of them (the post-execute hook's scan is ours too)
        self._ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
        self._stop = sys._getframe(1)
        self._thread = threading.get_ident()
        function_mode, dispatch_mode, tracker = _mode_classes()
        self._modes = []
        try:
            if self.track_modules and tracker is not None:
                self._enter(tracker(self))
            self._enter(function_mode(self))
            self._enter(dispatch_mode(self))
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
        self._stop = None
        self._module_stack.clear()
        if failure is not None:
            raise failure

    # -- the hot path ---------------------------------------------------------------------------
    def _user_frame(self, frame: FrameType | None) -> Any:
        """The innermost frame that is the user's, or None (other threads) / _SUPPRESS (ops of
        ours or IPython's made outside the traced code, e.g. the post-execute hook's scan).

        Sets ``self._direct``: the user's line called the op without library Python code in
        between (``x.to(d)``, not ``model.to(d)`` copying each parameter)."""
        library = self._library
        stop = self._stop
        direct = True
        while frame is not None:
            code = frame.f_code
            kind = library.get(code)
            if kind is None:
                kind = library[code] = self._library_kind(code)
            if not kind:
                self._direct = direct
                return frame
            if frame is stop:
                return _SUPPRESS
            if kind == _THEIRS:
                direct = False
            frame = frame.f_back
        self._direct = direct
        return None

    def _library_kind(self, code: CodeType) -> int:
        """0: the user's code; _OURS: this package; _THEIRS: torch, IPython, the stdlib..."""
        filename = code.co_filename
        if filename.startswith("<frozen"):
            return _THEIRS
        if filename.startswith("<"):
            return 0  # a cell, exec'd code
        filename = os.path.abspath(filename)
        if filename.startswith(self._ours):
            return _OURS
        if filename.startswith(self._packages):
            return _THEIRS
        if filename.startswith(self._stdlib) and not filename.startswith(self._site):
            return _THEIRS
        return 0

    def _module(self) -> str | None:
        return self._module_stack[-1][0] if self._module_stack else None

    def on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Called by the dispatch mode for each aten op; runs it and records what it did.

        The hot path: most ops read one device per tensor input and bump one counter."""
        __tracebackhide__ = True  # IPython (and pytest) leave this frame out of tracebacks
        if self._suppress:
            return func(*args, **kwargs)
        try:
            kind = self._kinds[func]
        except KeyError:
            kind = self._kinds[func] = _classify(func)
        first = devices = None
        noted = False
        try:
            tensor = _modes._Tensor
            for a in args:
                if isinstance(a, tensor):
                    d = a.device
                    if first is None:
                        first = d
                    elif d != first:
                        devices = _mixed(args, kwargs)
                        break
                elif type(a) in _SEQUENCES and a and isinstance(a[0], tensor):
                    devices = _mixed(args, kwargs)
                    break
            else:
                for a in kwargs.values():  # out=, and the odd tensor passed by keyword
                    if isinstance(a, tensor):
                        d = a.device
                        if first is None:
                            first = d
                        elif d != first:
                            devices = _mixed(args, kwargs)
                            break
            if devices is not None:
                if len(devices) < 2:
                    first = devices[0] if devices else None
                    devices = None
                elif (
                    self._divergence is None
                    and kind != _COPY
                    and not _benign_mix(kind, args, kwargs)
                ):
                    self._note_divergence(func, args, kwargs, devices, raised=False)
                    noted = True
        except Exception:  # a recorder bug must never reach the user's cell
            self._internal_errors += 1
        try:
            out = func(*args, **kwargs)
        except BaseException:
            if devices is not None and kind != _COPY:
                if self._divergence is None:
                    self._note_divergence(func, args, kwargs, devices, raised=True)
                elif noted:  # noted just before it ran; torch refused the mix
                    self._divergence["raised"] = True
                failed: Any = ("+".join(devices), self._module())
                self._ops[failed] = self._ops.get(failed, 0) + 1
            raise
        try:
            if devices is not None:
                first = "+".join(devices)
            elif first is None:
                first = _output_device(out)
            stack = self._module_stack
            key = (first, stack[-1][0]) if stack else first
            ops = self._ops
            ops[key] = ops.get(key, 0) + 1
            if kind:
                if kind == _COPY:
                    self._note_copy(func, args, out)
                elif kind == _HOST_READ or (kind == _INDEX and _boolean_index(args)):
                    label = self._label or _READ_NAMES.get(func.__name__.partition(".")[0])
                    self._note_read(label or _op_name(func), first)
        except Exception:
            self._internal_errors += 1
        return out

    def on_function(
        self, func: Any, entry: tuple[str, bool], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Called by the function mode for every torch function and Tensor method; only what
        dispatch cannot see is recorded (printing, ``.tolist()``, ``.numpy()``), and the
        Python spelling of a scalar read (``float(t)``, ``bool(t)``) is noted for the label."""
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
            tensor = args[0] if args and isinstance(args[0], _modes._Tensor) else None
            if tensor is not None:
                self._note_read(label, tensor.device)
        except Exception:
            self._internal_errors += 1
        self._suppress += 1  # printing runs ops of its own; they are not the user's
        try:
            return func(*args, **kwargs)
        finally:
            self._suppress -= 1

    # -- recording interesting ops --------------------------------------------------------------
    def _locate(self) -> Any:
        # library frames (ours included) are skipped, so where the walk starts is no matter
        frame = self._user_frame(sys._getframe(2))
        self._borrowed = False
        if frame is None and threading.get_ident() != self._thread:
            # autograd runs an accelerator's backward on its own thread, while the thread
            # that entered the tracer waits in loss.backward(): that line is the user's
            waiting = sys._current_frames().get(self._thread)
            frame = self._user_frame(waiting) if waiting is not None else None
            self._borrowed = frame is not None and frame is not _SUPPRESS
        if frame is None or frame is _SUPPRESS:
            return frame
        if self.filename is None:
            self._find_cell_filename(frame)
        return frame

    def _find_cell_filename(self, frame: FrameType | None) -> None:
        namespace = self.namespace
        while frame is not None and frame is not self._stop:
            if frame.f_code.co_name == "<module>" and frame.f_globals is namespace:
                self.filename = frame.f_code.co_filename
                return
            frame = frame.f_back

    def _note_copy(self, func: Any, args: tuple[Any, ...], out: Any) -> None:
        name = func.__name__
        if name.startswith("copy_") or name.startswith("_copy_from"):
            if len(args) < 2 or not isinstance(args[1], _modes._Tensor):
                return
            src, dst = args[1], args[0]
        else:  # _to_copy
            src, dst = args[0], out
        if not isinstance(dst, _modes._Tensor):
            return
        source, target = src.device, dst.device
        if source == target:
            return
        frame = self._locate()
        if frame is _SUPPRESS:
            return
        if frame is None:
            self._unattributed += 1
            key = (None, None, str(source), str(target))
        else:
            key = (frame.f_code, frame.f_lineno, str(source), str(target))
        entry = self._transfers.get(key)
        nbytes = src.numel() * src.element_size()
        if entry is None:
            entry = self._transfers[key] = [0, 0, {}, self._module(), 0]
        entry[0] += 1
        entry[1] += nbytes
        entry[4] += self._direct
        if entry[0] <= _NAMED_COPIES and frame is not None:
            # names of the first few copies (a loop copies the same variable; module.to()
            # copies each parameter): enough to say what moves without a lookup per copy
            name = None if self._borrowed else _name_in_frame(frame, src, self._module_stack)
            if name is not None:
                entry[2].setdefault(name)

    def _note_read(self, label: str, device: Any) -> None:
        frame = self._locate()
        if frame is _SUPPRESS:
            return
        if frame is None:
            self._unattributed += 1
            key = (None, None, str(device))
        else:
            key = (frame.f_code, frame.f_lineno, str(device))
        entry = self._reads.get(key)
        if entry is None:
            self._reads[key] = [1, {label: None}, self._module()]
        else:
            entry[0] += 1
            entry[1].setdefault(label)

    def _note_divergence(
        self,
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        devices: list[str],
        raised: bool,
    ) -> None:
        try:
            frame = self._locate()
            if frame is _SUPPRESS:
                return
            tensors = _tensors(args, kwargs)
            names = tuple(
                _name_in_frame(frame, t, self._module_stack)
                if frame is not None and not self._borrowed
                else None
                for t in tensors
            )
            self._divergence = {
                "op": _op_name(func),
                "code": frame.f_code if frame is not None else None,
                "line": frame.f_lineno if frame is not None else None,
                "module": self._module(),
                "devices": tuple(sorted(devices, key=device_sort_key)),
                "names": names,
                "inputs": tuple(
                    (n, str(t.device), tuple(t.shape)) for n, t in zip(names, tensors, strict=True)
                ),
                "raised": raised,
            }
        except Exception:
            self._internal_errors += 1

    # -- module names -----------------------------------------------------------------------------
    def module_name(self, module: Any) -> str | None:
        """The namespace's name for a module: ``model`` or ``model.encoder.layers.3`` (the
        first top-level module holding it); None when no name reaches it. (ModuleTracker
        caches the answer per module, and names the children of a named module itself.)"""
        nn_module = sys.modules["torch.nn"].Module
        roots = []
        for name, value in list(self.namespace.items()):
            if name.startswith("_"):
                continue
            if value is module:
                return name
            if issubclass(type(value), nn_module):  # type(), not isinstance: no __class__ read
                roots.append((name, value))
        for root_name, root in roots:
            try:
                for path, sub in root.named_modules():
                    if sub is module:
                        return f"{root_name}.{path}"
            except Exception:  # a module of the user's that cannot be walked: not this one
                continue
        return None

    # -- the report -------------------------------------------------------------------------------
    def _file_label(self, filename: str, in_cell: bool) -> str:
        if in_cell or not filename:
            return ""
        if self.file_label is not None:
            try:
                label = self.file_label(filename)
            except Exception:
                label = None
            if label:
                return label
        return filename if filename.startswith("<") else os.path.basename(filename)

    def report(self, error: BaseException | None = None) -> TraceReport:
        error = error if error is not None else self.error
        loops = _loop_lines(self.source) if self.source else set()

        def place(code: CodeType | None, line: int | None) -> tuple[str, str, str, str, bool]:
            """(function, file name, how to show the file, source text, in a loop)"""
            if code is None:
                return "(other thread)", "", "", "", False
            filename = code.co_filename
            in_cell = filename == self.filename
            function = code.co_name
            if function == "<module>" and in_cell:
                function = "<cell>"
            text = ""
            if in_cell and self.source is not None and line:
                lines = self.source.splitlines()
                text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            elif line:
                text = linecache.getline(filename, line).strip()
            return (
                function,
                filename,
                self._file_label(filename, in_cell),
                text,
                (in_cell and line in loops),
            )

        divergence = None
        if self._divergence is not None:
            d = self._divergence
            function, filename, file, text, _ = place(d["code"], d["line"])
            divergence = Divergence(
                op=d["op"],
                function=function,
                line=d["line"],
                module=d["module"],
                devices=d["devices"],
                names=d["names"],
                inputs=d["inputs"],
                filename=filename,
                source=text,
                raised=d["raised"],
                file=file,
            )
        transfers = []
        for (code, line, source, target), entry in self._transfers.items():
            count, nbytes, names, module, direct = entry
            function, filename, file, text, in_loop = place(code, line)
            transfers.append(
                Transfer(
                    line,
                    function,
                    source,
                    target,
                    count,
                    nbytes,
                    tuple(names),
                    module,
                    filename,
                    text,
                    in_loop,
                    direct,
                    file,
                )
            )
        transfers.sort(key=lambda t: (-t.bytes, -t.count, t.line or 0))
        reads = []
        for (code, line, device), (count, ops, module) in self._reads.items():
            function, filename, file, text, in_loop = place(code, line)
            reads.append(
                HostRead(
                    line, function, device, count, tuple(ops), module, filename, text, in_loop, file
                )
            )
        reads.sort(key=lambda r: (-r.syncs, -r.count, r.line or 0))
        by_device: dict[str, int] = {}
        modules: dict[str, int] = {}
        total = 0
        for key, count in self._ops.items():
            device, module = key if type(key) is tuple else (key, None)
            total += count
            if device is not None:
                by_device[str(device)] = by_device.get(str(device), 0) + count
            if module is not None:
                modules[module] = modules.get(module, 0) + count
        return TraceReport(
            first_divergence=divergence,
            transfers=transfers,
            host_reads=reads,
            error=error,
            ops=total,
            ops_by_device=by_device,
            modules=modules,
            unattributed=self._unattributed,
            internal_errors=self._internal_errors,
        )


# -- the function ---------------------------------------------------------------------------------


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
