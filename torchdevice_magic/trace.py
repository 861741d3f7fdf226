"""Where do the devices diverge, and how much is copied between host and device, per line?

:func:`trace` runs a cell's code under a lean ``TorchDispatchMode`` that sees every aten op
(its tensors' devices, copies between devices, values read back to the host) and a
``TorchFunctionMode`` only for what dispatch cannot see (``.tolist()``, ``.numpy()``, printing
a tensor). Each interesting op is attributed to the user's source line, the innermost Python
frame that is not torch's (nor the standard library's, IPython's or ours), and, through
``torch.utils.module_tracker.ModuleTracker``, to the module it ran in under the name the
namespace gives it (``model.encoder.layers.3.attn``). :class:`Tracer` is the same recorder as
a context manager, for callers that run the code themselves (``%%devicecheck --trace`` runs
the cell through IPython).

Pure core: no IPython import, and torch is imported only when the caller already did.

Why it stays cheap: ops are only counted (per device and module) unless they are interesting;
only copies, host reads and ops mixing devices look at the Python stack, walking
``f_back`` with a per-code-object cache of "is this library code?" (no ``traceback``), and
they keep ``(code object, line)`` pairs: file names, function names and source text are
looked up when the report is built. Nothing the cell computes is touched: each op runs
exactly as it would have (``func(*args, **kwargs)``), so values are identical with and
without tracing.
"""

from __future__ import annotations

import ast
import html
import linecache
import os
import sys
import sysconfig
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

from .units import device_sort_key, format_bytes

#: the file name ``trace`` compiles a cell under (tracebacks and the report say "line N")
CELL_FILENAME = "<traced cell>"

# kinds of ops (cached per OpOverload)
_PLAIN, _COPY, _HOST_READ, _INDEX, _INDEX_PUT = 0, 1, 2, 3, 4

_SUPPRESS: Any = object()  # ops of ours or IPython's outside the traced code: not recorded
_OURS, _THEIRS = 1, 2  # library code: this package's / torch's, IPython's, the stdlib's


# -- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    """The first op whose tensor inputs sat on more than one device."""

    op: str  # aten name, e.g. "add.Tensor"
    function: str  # "<cell>" or the user function's name
    line: int | None
    module: str | None  # "model.encoder.layers.3.attn" when inside a module's forward
    devices: tuple[str, ...]
    names: tuple[str | None, ...]  # per tensor input: its variable name in that frame, or None
    inputs: tuple[tuple[str | None, str, tuple[int, ...]], ...]  # (name, device, shape)
    filename: str = ""
    source: str = ""  # the text of that line
    raised: bool = False  # the op itself failed (torch refused the mix)
    file: str = ""  # where the function lives, as shown ("" for the cell, "In[3]", "train.py")

    @property
    def where(self) -> str:
        return _where(self.function, self.line, self.file)

    def describe(self) -> str:
        parts = []
        for name, device, shape in self.inputs:
            size = "×".join(map(str, shape)) if shape else "scalar"
            parts.append(f"{name or 'a temporary'} ({size}) on {device}")
        inside = f" in {self.module}" if self.module else ""
        verb = "failed mixing" if self.raised else "mixed"
        return f"{self.where}{inside}: {self.op} {verb} " + ", ".join(parts)


@dataclass(frozen=True)
class Transfer:
    """Copies between two devices made by one line, aggregated."""

    line: int | None
    function: str
    source: str  # device, "cpu"
    target: str  # device, "cuda:0"
    count: int
    bytes: int
    names: tuple[str, ...] = ()  # variables copied (of the first few copies), when found
    module: str | None = None
    filename: str = ""
    code: str = ""  # the text of the line
    in_loop: bool = False  # the line sits in a for/while loop of the cell
    direct: int = 0  # copies the line made itself (x.to(d)), not through library code
    file: str = ""  # where the function lives, as shown ("" for the cell, "In[3]", "train.py")

    @property
    def name(self) -> str | None:
        if not self.names:
            return None
        # only the first few copies are looked up: more names may hide behind a full list
        more = ", ..." if len(self.names) >= _NAMED_COPIES and self.count > len(self.names) else ""
        return ", ".join(self.names) + more

    @property
    def where(self) -> str:
        return _where(self.function, self.line, self.file)

    @property
    def repeated(self) -> bool:
        """The line ran again and again (a loop, or a function called in one), rather than
        copying many tensors once (``model.to()`` copies each parameter, through torch's code;
        ``a, b = x.to(d), y.to(d)`` copies two variables)."""
        if self.count < 2:
            return False
        return self.in_loop or self.direct > max(1, len(self.names))

    def hint(self) -> str | None:
        """Advice when one line copies again and again."""
        if not self.repeated:
            return None
        what = self.name or "a tensor"
        head = (
            f"{self.where} copies {what} from {self.source} to {self.target} "
            f"{self.count} times, {format_bytes(self.bytes)}"
        )
        if self.source == "cpu":
            return f"{head}: move the dataset once, or use pin_memory + non_blocking"
        if self.target == "cpu":
            return f"{head}: keep it on {self.source} and read it back once, after the loop"
        return f"{head}: keep what this line uses on one device"


@dataclass(frozen=True)
class HostRead:
    """Ops that need a tensor's values on the host (on an accelerator each one waits for it)."""

    line: int | None
    function: str
    device: str
    count: int
    ops: tuple[str, ...]  # user-facing names: ".item()", "nonzero", "print", ...
    module: str | None = None
    filename: str = ""
    code: str = ""
    in_loop: bool = False
    file: str = ""  # where the function lives, as shown ("" for the cell, "In[3]", "train.py")

    @property
    def where(self) -> str:
        return _where(self.function, self.line, self.file)

    @property
    def syncs(self) -> bool:
        """cpu and meta never wait for a device."""
        return self.device.partition(":")[0] not in ("cpu", "meta")


@dataclass
class TraceReport:
    """What :func:`trace` saw; ``text()`` and ``_repr_html_()`` render it."""

    first_divergence: Divergence | None
    transfers: list[Transfer]
    host_reads: list[HostRead]
    error: BaseException | None = None
    ops: int = 0  # aten ops run while tracing
    ops_by_device: dict[str, int] = field(default_factory=dict)  # "cpu" / "cpu+cuda:0"
    modules: dict[str, int] = field(default_factory=dict)  # ops per module path
    unattributed: int = 0  # interesting ops seen on other threads (no user frame)
    internal_errors: int = 0  # ops the recorder failed to record (they ran all the same)

    @property
    def transfer_bytes(self) -> int:
        return sum(t.bytes for t in self.transfers)

    def hints(self) -> list[str]:
        hints = [h for t in self.transfers if (h := t.hint())]
        for r in self.host_reads:
            if r.count >= 2 and r.syncs:
                hints.append(
                    f"{r.where} reads values from {r.device} to the host {r.count} times "
                    f"({', '.join(r.ops)}): each one waits for the device; keep results on "
                    "the device and read them once"
                )
        return hints

    def text(self) -> str:
        out = [self._headline()]
        d = self.first_divergence
        if d is not None:
            out.append(f"First divergence: {d.describe()}")
            if d.source:
                out.append(f"    {d.source}")
        elif self.error is None or len(self.ops_by_device) <= 1:
            out.append("No op mixed devices.")
        if self.transfers:
            out.append("Transfers (biggest first):")
            for t in self.transfers:
                name = f" {t.name}" if t.name else ""
                copies = "copy" if t.count == 1 else "copies"
                out.append(
                    f"  {t.where:<10} {t.source} -> {t.target}{name}: {t.count} {copies}, "
                    f"{format_bytes(t.bytes)}"
                )
        if self.host_reads:
            out.append("Host reads (values read back to Python):")
            for r in self.host_reads:
                out.append(f"  {r.where:<10} {r.count} on {r.device} ({', '.join(r.ops)})")
        if self.unattributed:
            out.append(
                f"{self.unattributed} copies/host reads ran on other threads (no line of "
                "yours on their stack: autograd's device threads, for one)"
            )
        if self.internal_errors:
            out.append(f"({self.internal_errors} ops could not be recorded; they ran as usual)")
        hints = self.hints()
        for h in hints:
            out.append(f"Hint: {h}")
        if self.error is not None:
            out.append(f"The cell raised {type(self.error).__name__}: {_first_line(self.error)}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.text()

    def _headline(self) -> str:
        devices = sorted(
            {d for key in self.ops_by_device for d in key.split("+")}, key=device_sort_key
        )
        on = f" on {', '.join(devices)}" if devices else ""
        copies = sum(t.count for t in self.transfers)
        reads = sum(r.count for r in self.host_reads)
        return (
            f"Trace: {self.ops} ops{on}; {copies} transfers "
            f"({format_bytes(self.transfer_bytes)}); {reads} host reads"
        )

    def _repr_html_(self) -> str:
        e = html.escape
        parts = [f"<p><b>{e(self._headline())}</b></p>"]
        d = self.first_divergence
        if d is not None:
            parts.append(f"<p><b>First divergence</b>: {e(d.describe())}</p>")
            if d.source:
                parts.append(f"<pre>{e(d.source)}</pre>")
        if self.transfers:
            rows = "".join(
                f"<tr><td>{e(t.where)}</td><td>{e(t.name or '')}</td><td>{e(t.source)}</td>"
                f"<td>{e(t.target)}</td><td>{t.count}</td><td>{e(format_bytes(t.bytes))}</td></tr>"
                for t in self.transfers
            )
            parts.append(
                "<table><tr><th>where</th><th>tensor</th><th>from</th><th>to</th>"
                f"<th>count</th><th>bytes</th></tr>{rows}</table>"
            )
        if self.host_reads:
            rows = "".join(
                f"<tr><td>{e(r.where)}</td><td>{e(r.device)}</td><td>{r.count}</td>"
                f"<td>{e(', '.join(r.ops))}</td></tr>"
                for r in self.host_reads
            )
            parts.append(
                "<table><tr><th>where</th><th>device</th><th>host reads</th><th>ops</th></tr>"
                f"{rows}</table>"
            )
        parts.extend(f"<p>Hint: {e(h)}</p>" for h in self.hints())
        if self.error is not None:
            parts.append(
                f"<p>The cell raised <code>{e(type(self.error).__name__)}</code>: "
                f"{e(_first_line(self.error))}</p>"
            )
        return f'<div class="torchdevice-magic-trace">{"".join(parts)}</div>'

    def to_dict(self) -> dict[str, Any]:
        return {
            "first_divergence": _asdict(self.first_divergence),
            "transfers": [_asdict(t) for t in self.transfers],
            "host_reads": [_asdict(r) for r in self.host_reads],
            "error": None if self.error is None else _first_line(self.error),
            "ops": self.ops,
            "ops_by_device": dict(self.ops_by_device),
            "modules": dict(self.modules),
        }


def _asdict(obj: Any) -> Any:
    if obj is None:
        return None
    from dataclasses import asdict

    return asdict(obj)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else ""


def _where(function: str, line: int | None, file: str) -> str:
    if line is None:
        return "(no line)"
    if function == "<cell>":
        return f"line {line}"
    place = f" {file}" if file else ""
    return f"{function}(){place} line {line}"


# -- what counts as library code (not the user's line) ------------------------------------------


def _library_prefixes() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Directories whose code is never "the user's line": (packages, stdlib, site-packages
    inside stdlib, which is the user's again: system Pythons put it there)."""
    packages = []
    for name in ("torch", "IPython", "ipykernel", "traitlets", "numpy"):
        path = getattr(sys.modules.get(name), "__file__", None)
        if path:
            packages.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    paths = sysconfig.get_paths()
    stdlib = {os.path.abspath(paths[k]) + os.sep for k in ("stdlib", "platstdlib") if paths.get(k)}
    site = {os.path.abspath(paths[k]) + os.sep for k in ("purelib", "platlib") if paths.get(k)}
    return tuple(packages), tuple(stdlib), tuple(site)


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
        self._ours = os.path.dirname(os.path.abspath(__file__)) + os.sep
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
            tensor = _Tensor
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
            tensor = args[0] if args and isinstance(args[0], _Tensor) else None
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
            if len(args) < 2 or not isinstance(args[1], _Tensor):
                return
            src, dst = args[1], args[0]
        else:  # _to_copy
            src, dst = args[0], out
        if not isinstance(dst, _Tensor):
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


# -- helpers of the hot path (torch-dependent names bound by _mode_classes) ----------------------

_Tensor: Any = None
#: torch functions the function mode looks at: (label, is a host read dispatch cannot see)
_FUNCTIONS: dict[Any, tuple[str, bool]] = {}
_NAMED_COPIES = 3
_SEQUENCES = (list, tuple)
_READ_NAMES = {
    "_local_scalar_dense": ".item()",
    "item": ".item()",
    "equal": "torch.equal",
    "nonzero": "nonzero",
    "masked_select": "masked_select",
    "index": "boolean mask",
    "_unique2": "unique",
    "_unique": "unique",
    "unique_dim": "unique",
    "unique_consecutive": "unique_consecutive",
    "repeat_interleave": "repeat_interleave",
    "bincount": "bincount",
    "one_hot": "one_hot",
}


def _classify(func: Any) -> int:
    torch = sys.modules["torch"]
    name = func.__name__  # "add.Tensor"
    base = name.partition(".")[0]
    if base in ("_to_copy", "copy_", "_copy_from", "_copy_from_and_resize"):
        return _COPY
    if base == "index":
        return _INDEX
    if base in ("index_put", "index_put_", "_index_put_impl_"):
        return _INDEX_PUT
    tags = getattr(func, "tags", ())
    if (
        torch.Tag.data_dependent_output in tags
        or torch.Tag.dynamic_output_shape in tags
        or base == "equal"
    ):
        return _HOST_READ
    return _PLAIN


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", str(func))
    return name.removesuffix(".default")


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    found = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, _Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(b for b in a if isinstance(b, _Tensor))
    return found


def _mixed(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """The distinct devices of the tensor inputs, as strings (only called when they differ)."""
    seen: dict[str, None] = {}
    for t in _tensors(args, kwargs):
        seen.setdefault(str(t.device))
    return list(seen)


def _benign_mix(kind: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Mixes torch accepts by design: 0-dim cpu tensors beside accelerator tensors (scalars),
    and cpu index tensors indexing an accelerator tensor (``x[idx]``, ``x[idx] = v``)."""
    tensors = _tensors(args, kwargs)
    devices = {str(t.device) for t in tensors if not (t.device.type == "cpu" and t.dim() == 0)}
    if len(devices) < 2:
        return True
    if kind not in (_INDEX, _INDEX_PUT) or len(args) < 2 or not isinstance(args[0], _Tensor):
        return False
    own = str(args[0].device)
    indices = args[1] if isinstance(args[1], (list, tuple)) else ()
    if any(isinstance(i, _Tensor) and str(i.device) not in (own, "cpu") for i in indices):
        return False
    rest = _tensors(args[2:], kwargs)  # index_put's values: its own device, or a cpu scalar
    return all(str(t.device) == own or (t.device.type == "cpu" and t.dim() == 0) for t in rest)


def _boolean_index(args: tuple[Any, ...]) -> bool:
    if len(args) < 2 or not isinstance(args[1], (list, tuple)):
        return False
    torch = sys.modules["torch"]
    return any(isinstance(i, _Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])


def _output_device(out: Any) -> Any:
    if isinstance(out, _Tensor):
        return out.device
    if isinstance(out, (list, tuple)):
        for o in out:
            if isinstance(o, _Tensor):
                return o.device
    return None


def _name_in_frame(frame: FrameType, tensor: Any, modules: list[tuple[str, Any]]) -> str | None:
    """The name that holds ``tensor`` (by identity) seen from ``frame``: a local variable, a
    parameter/buffer/tensor attribute of the module the op runs in (``model.fc.weight``) or
    of a module the frame holds (``self.scale``); a view is named after its base."""
    name = _holder_name(frame, tensor, modules)
    if name is None:
        base = getattr(tensor, "_base", None)  # a view: x.t(), x[0], x.view(...)
        if base is not None:
            name = _holder_name(frame, base, modules)
            if name is not None:
                name = f"{name} (a view)"
    return name


def _holder_name(frame: FrameType, tensor: Any, modules: list[tuple[str, Any]]) -> str | None:
    try:
        scope = frame.f_locals
    except Exception:
        return None
    nn_module = getattr(sys.modules.get("torch.nn"), "Module", None)
    private = None
    holders = [modules[-1]] if modules else []
    for name, value in scope.items():
        if value is tensor:
            if not name.startswith("_"):
                return name
            private = private or name  # _ / _12 / __x only when nothing better holds it
        elif nn_module is not None and issubclass(type(value), nn_module):
            holders.append((name, value))
    for prefix, module in holders:
        found = _name_in_module(module, tensor)
        if found is not None:
            return f"{prefix}.{found}"
    return private


def _name_in_module(module: Any, tensor: Any) -> str | None:
    # parameters and buffers through torch's own accessors; plain tensor attributes through
    # the instance dict (never calling properties of the user's object)
    for name, value in module.named_parameters():
        if value is tensor:
            return name
    for name, value in module.named_buffers():
        if value is tensor:
            return name
    try:
        attributes = vars(module)
    except TypeError:
        return None
    for name, value in attributes.items():
        if value is tensor:
            return name
    return None


def _loop_lines(source: str) -> set[int]:
    """Lines of ``source`` inside a for/while loop (or a comprehension)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


_MODE_CLASSES: tuple[Any, Any, Any] | None = None


def _dynamo_skipper() -> Any:
    """A function marking a code object "never compile this frame nor what it calls", or
    None where this torch has no such (private) API."""
    try:
        from torch._C._dynamo.eval_frame import (
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )
    except Exception:
        return None

    def skip(code: CodeType) -> None:
        strategy = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
        set_code_exec_strategy(code, strategy)

    return skip


def _mode_classes() -> tuple[Any, Any, Any]:
    """The mode classes, built on first use (importing this module never imports torch)."""
    global _MODE_CLASSES, _Tensor
    if _MODE_CLASSES is not None:
        return _MODE_CLASSES
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    _Tensor = torch.Tensor
    _FUNCTIONS.update(
        {
            torch.Tensor.tolist: (".tolist()", True),
            torch.Tensor.numpy: (".numpy()", True),
            torch.Tensor.__array__: ("numpy.asarray", True),
            torch.Tensor.__repr__: ("print/repr", True),
            torch.Tensor.__format__: ("format", True),
            torch.Tensor.item: (".item()", False),
            torch.Tensor.__bool__: ("bool()", False),
            torch.Tensor.__float__: ("float()", False),
            torch.Tensor.__int__: ("int()", False),
            torch.Tensor.__index__: ("as an index", False),
        }
    )

    skip_dynamo = _dynamo_skipper()

    class _DispatchRecorder(TorchDispatchMode):
        def __init__(self, tracer: Tracer) -> None:
            super().__init__()
            self.tracer = tracer

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps __torch_dispatch__ in torch._disable_dynamo (~3 µs per op, as much
            # as the recording); marking our code "skip, recursively" keeps torch.compile out
            # of it at no cost per op. Without that API, keep torch's wrapper.
            return skip_dynamo is None

        def __torch_dispatch__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            __tracebackhide__ = True
            return self.tracer.on_op(func, args, kwargs or {})

    class _FunctionRecorder(TorchFunctionMode):
        def __init__(self, tracer: Tracer) -> None:
            super().__init__()
            self.tracer = tracer

        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            # called for every torch function, method and attribute: decide here, in one
            # dict lookup, that it is none of ours
            __tracebackhide__ = True
            if kwargs is None:
                kwargs = {}
            try:
                entry = _FUNCTIONS.get(func)
            except TypeError:  # an unhashable callable: nothing of ours
                entry = None
            if entry is None:
                return func(*args, **kwargs)
            return self.tracer.on_function(func, entry, args, kwargs)

    if skip_dynamo is not None:
        skip_dynamo(_DispatchRecorder.__dict__["__torch_dispatch__"].__code__)
        skip_dynamo(_FunctionRecorder.__dict__["__torch_function__"].__code__)

    tracker_class = None
    try:
        from torch.utils.module_tracker import ModuleTracker
    except ImportError:  # older torch: no module paths
        pass
    else:

        class _ModuleRecorder(ModuleTracker):
            """ModuleTracker naming roots by the namespace (``model`` instead of ``Net``),
            plus a stack, so the innermost module is known (``parents`` is a set)."""

            def __init__(self, tracer: Tracer) -> None:
                super().__init__()
                self.tracer = tracer

            def _get_mod_name(self, mod: Any) -> str:
                if mod not in self._known_modules:
                    name = self.tracer.module_name(mod)
                    if name is not None:
                        self._known_modules[mod] = name
                return super()._get_mod_name(mod)

            # ModuleTracker's own hooks also register a multi-grad hook on every forward's
            # inputs and outputs to follow the backward pass: 5x the cost of a traced training
            # step, for backward attribution the report does not make. The forward part
            # (names, ``parents``) is kept; backward ops get no module.
            # (hooks run inside the user's forward: they never raise into it)
            def _fw_pre_hook(self, mod: Any, input: Any) -> None:
                try:
                    name = self._get_mod_name(mod)
                except Exception:
                    self.tracer._internal_errors += 1
                    name = type(mod).__name__
                self.parents.add(name)
                self.tracer._module_stack.append((name, mod))

            def _fw_post_hook(self, mod: Any, input: Any, output: Any) -> None:
                stack = self.tracer._module_stack
                # pop up to this module (a forward that raised, caught by the user, left its
                # entry behind)
                for i in range(len(stack) - 1, -1, -1):
                    if stack[i][1] is mod:
                        self.parents.discard(stack[i][0])
                        del stack[i:]
                        break

        tracker_class = _ModuleRecorder

    _MODE_CLASSES = (_FunctionRecorder, _DispatchRecorder, tracker_class)
    return _MODE_CLASSES


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
