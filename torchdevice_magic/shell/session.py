"""Per-shell state: the post-execute hook, the live views, the shared move/undo history, config.

One :class:`DeviceSession` per IPython shell owns everything the extension adds (like
autoreload's single object owning its hooks), so ``%unload_ext`` can take all of it away again.
The widget, the sidebar comm and the magics are thin views over it; the work is in the pure core
(:mod:`.inventory`, :mod:`.moving`, :mod:`.diagnose`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from traitlets import Bool, Int, TraitError, Unicode, validate
from traitlets.config import Configurable

from .. import protocol, viewmodel
from ..memory import Timeline, device_figures, reset_peaks
from ..scan import Inventory, Scanner, orphan_warning

if TYPE_CHECKING:  # comm.py imports the ``comm`` package: loaded only by load()
    from .comm import SidebarChannel

log = logging.getLogger("torchdevice_magic")

_SESSION_ATTRIBUTE = "_torchdevice_magic_session"


class TorchDeviceMagic(Configurable):
    """Settings of torchdevice_magic (``c.TorchDeviceMagic.<name>`` in ipython_config.py, or
    ``%config TorchDeviceMagic.<name> = value`` in a running kernel)."""

    auto_diagnose = Bool(
        True, help="Explain device-mismatch errors above the traceback of any cell."
    ).tag(config=True)
    warn_on_mixed = Bool(
        True,
        help="Print a one-line warning when a module spans devices or an optimizer's state "
        "sits on a device other than its parameters.",
    ).tag(config=True)
    default_device = Unicode(
        "",
        help="The device fixes and moves suggest by default; empty: moves offer the best "
        "available (cuda -> mps -> xpu -> cpu), fixes follow the model.",
    ).tag(config=True)

    @validate("default_device")
    def _check_default_device(self, proposal: dict[str, Any]) -> str:
        value = proposal["value"].strip()
        if value and "torch" in sys.modules:  # checked against this kernel's devices
            from ..moves import MoveError, resolve_device

            try:
                return str(resolve_device(value, allow_meta=True))
            except MoveError as error:
                raise TraitError(f"default_device {value!r}: {error}") from None
        return value

    allow_meta_target = Bool(
        False,
        help="Offer 'meta' as a move target (it discards data: for demos and tests on "
        "machines without an accelerator).",
    ).tag(config=True)
    include_hidden = Bool(
        False, help="Also list tensors kept alive only by the output history (Out, _)."
    ).tag(config=True)
    row_limit = Int(
        200, help="Rows a table shows per page (the sidebar asks for its own windows)."
    ).tag(config=True)
    show_full_traceback = Bool(
        False,
        help="After a device-mismatch error, show every traceback frame (by default torch's "
        "own frames are collapsed under the diagnosis).",
    ).tag(config=True)
    track_peak = Bool(
        True,
        help="Measure each cell's peak CUDA memory: before every cell, reset the process-wide "
        "peak counters (torch.cuda.reset_peak_memory_stats), so other code reading "
        "max_memory_allocated sees the peak since the last cell. Only when CUDA is already "
        "initialised (it is never initialised for this).",
    ).tag(config=True)


class DeviceSession:
    """Everything torchdevice_magic keeps for one shell."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.config = TorchDeviceMagic(parent=shell)
        #: the incremental scan state; ``inventory`` is its latest (immutable) result
        self.scanner = Scanner()
        self.inventory: Inventory | None = None
        self.undo_stack: list[Any] = []
        self.last_action: dict[str, Any] | None = None
        self.seq = 0
        #: counts moves, undos and refreshes: a view that saw fewer must redraw its header
        self.actions = 0
        #: False after a move to meta (which cannot be undone and cleared the history)
        self.last_undoable = True
        self._views: weakref.WeakSet[Any] = weakref.WeakSet()
        self._listeners: list[Callable[[DeviceSession], None]] = []
        self._warned: set[tuple[Any, ...]] = set()
        self._hook_failed = False
        self.suppress_auto_diagnosis = 0
        #: set by %%devicecheck while its cell runs: (cell, fix target, why that target, what to
        #: show before the diagnosis: the --trace report); the exception handler then explains
        #: an error with them, before the short traceback
        self.checking: (
            tuple[str, str | None, str, Callable[[BaseException], None] | None] | None
        ) = None
        #: the error the handler explained for %%devicecheck (the magic does not explain it twice)
        self.checked_error: BaseException | None = None
        #: the running cell's ExecutionInfo (pre_run_cell): its source and cell id
        self.running: Any = None
        #: the error the custom exception handler already explained (not explained twice)
        self._explained: BaseException | None = None
        #: the last error the exception handler showed (a holder of memory while IPython keeps
        #: its traceback for %debug)
        self._last_handled_error: BaseException | None = None
        self._previous_custom_exc: tuple[Any, Any] | None = None
        #: the sidebar's comm channel (set by :func:`load`)
        self.channel: SidebarChannel | None = None
        self.timeline = Timeline(last_error=self._last_cell_error)
        #: a one-click move waiting for its cell's re-run (see fixbutton.FixTrial)
        self.pending_fix: Any = None
        self._peak_from_cell_start = False
        self.config.observe(self._config_changed)

    # -- the namespace ---------------------------------------------------------------------
    @property
    def namespace(self) -> dict[str, Any]:
        return self.shell.user_ns

    def rescan(self, changed: tuple[str, ...] | list[str] = (), recheck: bool = True) -> Inventory:
        self.scanner.last = self.inventory  # whatever the session last showed
        self.inventory = self.scanner.scan(
            self.namespace,
            include_hidden=self.config.include_hidden,
            changed=changed,
            recheck=recheck,
        )
        return self.inventory

    def full_scan(self, include_hidden: bool | None = None) -> Inventory:
        hidden = self.config.include_hidden if include_hidden is None else include_hidden
        self.inventory = self.scanner.scan(self.namespace, include_hidden=hidden, full=True)
        return self.inventory

    def cell_number(self) -> int | None:
        """The ``[n]`` of the cell running now (IPython counts the cell before running it)."""
        count = getattr(self.shell, "execution_count", None)
        return count - 1 if isinstance(count, int) and count > 1 else None

    def current_inventory(self) -> Inventory:
        if self.inventory is None or (not self.inventory.torch_imported and "torch" in sys.modules):
            return self.rescan()
        return self.inventory

    # -- targets ---------------------------------------------------------------------------
    def targets(self) -> list[viewmodel.Target]:
        if "torch" not in sys.modules:
            return []
        from ..moves import available_devices

        return [
            viewmodel.Target(device, enabled, reason)
            for device, enabled, reason in available_devices(self.config.allow_meta_target)
        ]

    def choose_target(self, wanted: str | None = None) -> str | None:
        """The target a view shows: ``wanted`` while it is enabled, else the default."""
        return viewmodel.choose_target(self.targets(), wanted, self.default_target())

    def header(
        self,
        target: str | None = None,
        *,
        inventory: Inventory | None = None,
        counts: viewmodel.Tally | None = None,
        busy: bool = False,
    ) -> viewmodel.Header:
        """The view model's header for this session (totals, targets, buttons and reasons)."""
        return viewmodel.header(
            inventory if inventory is not None else self.current_inventory(),
            self.targets(),
            target=target,
            default_target=self.default_target(),
            undo_summary=self.undo_stack[-1].summary() if self.undo_stack else None,
            last_undoable=self.last_undoable,
            busy=busy,
            counts=counts,
        )

    def default_target(self) -> str | None:
        if "torch" not in sys.modules:
            return None
        if self.config.default_device:
            return self.config.default_device
        from ..moves import best_device

        best = best_device()
        # meta is only ever enabled to stand in for a missing accelerator: make it the default
        if best == "cpu" and self.config.allow_meta_target:
            return "meta"
        return best

    # -- actions shared by the widget, the sidebar and %%devicecheck --to -------------------
    def move(
        self,
        device: str,
        names: list[str] | tuple[str, ...] | None = None,
        progress: Callable[[int, int], None] | None = None,
        allow_meta: bool | None = None,
    ) -> Any:
        """Move through the all-or-nothing engine; remember the result for undo.

        ``allow_meta``: None follows the config (one-click moves); a device the user typed
        (``%%devicecheck --to meta``) passes True.
        """
        from ..moves import move

        result = move(
            self.namespace,
            device,
            names,
            allow_meta=self.config.allow_meta_target if allow_meta is None else allow_meta,
            progress=progress,
        )
        summary = result.summary()
        if result.ok and result.moved:
            if result.can_undo:
                self.undo_stack.append(result)
                self.last_undoable = True
            else:
                # nothing moved to meta can come back, so no earlier move can be undone either
                self.undo_stack.clear()
                self.last_undoable = False
                summary += " (cannot be undone: meta keeps no data)"
        self.last_action = _outcome("move", result.ok, summary, result.skipped)
        self.after_action()
        return result

    def undo(self, progress: Callable[[int, int], None] | None = None) -> Any:
        if not self.undo_stack:
            from ..moves import MoveError

            raise MoveError("nothing to undo")
        result = self.undo_stack[-1].undo(progress=progress)
        if result.ok:
            self.undo_stack.pop()
        self.last_action = _outcome("undo", result.ok, result.summary(), result.skipped)
        self.after_action()
        return result

    def after_action(self) -> None:
        # a move rebinds names and moves modules in place: look at everything again
        self.actions += 1
        self.full_scan()
        self.refresh_views()

    # -- live views --------------------------------------------------------------------------
    def add_view(self, view: Any) -> None:
        """A view has ``refresh(session)``; it is held weakly (a closed widget just goes)."""
        self._views.add(view)

    def add_listener(self, listener: Callable[[DeviceSession], None]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[DeviceSession], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def has_views(self) -> bool:
        return bool(self._listeners) or len(self._views) > 0

    def refresh_views(self) -> None:
        if self.inventory is None:
            self.rescan()
        self.seq += 1
        for view in list(self._views):
            _quietly(view.refresh, self)
        for listener in list(self._listeners):
            _quietly(listener, self)

    # -- the hooks ----------------------------------------------------------------------------
    def pre_run_cell(self, info: Any = None) -> None:
        """Before every cell: remember it (the exception handler explains errors with its
        source), and reset the accelerator's peak counters (config ``track_peak``) so the
        memory timeline can show this cell's peak. Never initialises a device; never raises."""
        self.running = info
        self._explained = None
        self._peak_from_cell_start = False
        if "torch" not in sys.modules:
            return
        try:
            if self.config.track_peak:
                reset = reset_peaks()
                # None: not initialised yet, so a peak read after the cell is this cell's
                self._peak_from_cell_start = reset is None or reset
        except Exception:
            log.debug("torchdevice_magic: could not reset the peak counters", exc_info=True)

    def post_run_cell(self, result: Any) -> None:
        """After every (non-silent) cell. Never raises into the user's session."""
        if "torch" not in sys.modules:
            return  # nothing can hold a tensor yet, and we never import torch ourselves
        try:
            self._after_cell(result)
        except Exception:
            if not self._hook_failed:
                self._hook_failed = True
                log.exception("torchdevice_magic: the post-execute hook failed; it carries on")

    def _after_cell(self, result: Any) -> None:
        from .fixbutton import keep_trial

        info = getattr(result, "info", None)
        cell = getattr(info, "raw_cell", None) or ""
        names = cell_names(cell, self.shell)
        only_data = touches_only_data(names, self.namespace, self.inventory)
        inventory = self.rescan(names, recheck=not only_data)
        error = getattr(result, "error_in_exec", None)
        if error is None and getattr(result, "error_before_exec", None) is None:
            keep_trial(self)  # a one-click move the cell's run proved
        self.record_memory(result, names, inventory)
        explained = error is not None and error is self._explained
        self._explained = None
        if (
            error is not None
            and not explained
            and self.config.auto_diagnose
            and not self.suppress_auto_diagnosis
            # a device mismatch is explained by .diagnose; an out-of-memory error by .memory
            and self.show_diagnosis(error, cell, cell_id=getattr(info, "cell_id", None)) is None
        ):
            self.show_oom(error)
        if self.config.warn_on_mixed:
            self._warn_new_mixed(inventory)
        if self.has_views():
            self.refresh_views()

    def diagnose(
        self,
        error: BaseException,
        cell: str,
        target: str | None = None,
        target_reason: str = "as asked",
    ) -> Any:
        from ..diagnose import diagnose, parse_cell

        return diagnose(
            error,
            self.namespace,
            parse_cell(cell, self.shell),
            target=target,
            allow_meta=self.config.allow_meta_target,
            target_reason=target_reason,
        )

    def show_diagnosis(
        self,
        error: BaseException,
        cell: str,
        target: str | None = None,
        cell_id: str | None = None,
        target_reason: str = "as asked",
    ) -> Any:
        diagnosis = self.diagnose(error, cell, target=target, target_reason=target_reason)
        if diagnosis is not None:
            self.show_diagnosis_result(diagnosis, cell_id)
        return diagnosis

    # -- memory: per-cell timeline, holders, out-of-memory (logic in .memory) ------------------
    def record_memory(self, result: Any, names: tuple[str, ...], inventory: Inventory) -> None:
        """Add this cell to the memory timeline (reusing the hook's scan); warn about leaks."""
        cell = int(
            getattr(result, "execution_count", None)
            or getattr(self.shell, "execution_count", 0)
            or 0
        )
        try:
            figures = device_figures()
            if not self._peak_from_cell_start:  # the peak is since some earlier cell: not shown
                figures = {d: (a, r, None) for d, (a, r, _) in figures.items()}
            _, warnings = self.timeline.record(cell, inventory, self.namespace, names, cuda=figures)
        except Exception:  # the timeline must never cost the user the diagnosis
            log.exception("torchdevice_magic: recording this cell's memory failed")
            return
        for warning in warnings:
            print(f"⚠ torchdevice_magic: {warning}", file=sys.stderr)

    def holders(self, device: str | None = None) -> list[Any]:
        from ..memory import HolderList, holders

        inventory = self.full_scan()
        found = holders(
            self.namespace,
            device,
            inventory=inventory,
            forgotten=self.timeline.forgotten,
            output_refs=self._drop_output_refs,
            last_error=self._last_cell_error,
        )
        return HolderList(found)

    def _last_cell_error(self) -> BaseException | None:
        """The last failing cell's exception while IPython keeps it (until the next cell
        ends): a device error shown with the short traceback leaves ``sys.last_value`` as it
        was, yet its frames still hold the failed function's locals."""
        result = getattr(self.shell, "last_execution_result", None)
        error = getattr(result, "error_in_exec", None)
        if isinstance(error, BaseException):
            return error
        # After later cells, IPython still keeps the last traceback for %debug
        # (InteractiveTB.tb); its frames hold the failed function's locals as long as it does.
        kept = self._last_handled_error
        kept_tb = getattr(getattr(self.shell, "InteractiveTB", None), "tb", None)
        if kept is None or kept_tb is None:
            return None
        tb, steps = kept.__traceback__, 0
        while tb is not None and steps < 10_000:
            if tb is kept_tb:
                return kept
            tb, steps = tb.tb_next, steps + 1
        self._last_handled_error = None  # IPython moved on: do not keep it alive ourselves
        return None

    def _drop_output_refs(self, value: Any) -> None:
        """A released ``Out`` entry is also kept by IPython's displayhook (its ``_``/``__``/
        ``___``), by ``user_ns_hidden`` and by the last execution result: drop those too."""
        shell = self.shell
        hook = getattr(shell, "displayhook", None)
        for attribute in ("_", "__", "___"):
            if getattr(hook, attribute, None) is value:
                setattr(hook, attribute, "")
        hidden = getattr(shell, "user_ns_hidden", None)
        if isinstance(hidden, dict):
            for name in [n for n, v in hidden.items() if v is value]:
                del hidden[name]
        last = getattr(shell, "last_execution_result", None)
        if last is not None and getattr(last, "result", None) is value:
            last.result = None

    def timeline_message(self) -> dict[str, Any] | None:
        """The sidebar's ``timeline`` message (None before any cell was recorded)."""
        if not self.timeline.rows:
            return None
        return protocol.timeline(self.timeline.to_json(protocol.TIMELINE_ROWS), seq=self.seq)

    def show_oom(self, error: BaseException) -> Any:
        from ..memory import explain_oom

        explanation = explain_oom(
            error,
            self.namespace,
            inventory=self.inventory,
            forgotten=self.timeline.forgotten,
            last_error=self._last_cell_error,
        )
        if explanation is not None:
            self.publish({"text/plain": explanation.text(), "text/html": explanation._repr_html_()})
        return explanation

    def show_diagnosis_result(self, diagnosis: Any, cell_id: str | None = None) -> None:
        from .fixbutton import settle_trial

        diagnosis = settle_trial(self, diagnosis, cell_id)  # a failed one-click move: undone
        # text for terminals and logs, escaped HTML where a notebook renders it
        self.publish({"text/plain": diagnosis.text(), "text/html": diagnosis._repr_html_()})
        if diagnosis.action is not None and getattr(self.shell, "kernel", None) is not None:
            from .fixbutton import fix_button

            button = fix_button(self, diagnosis.action, cell_id)
            if button is not None:
                self.show(button)

    def can_move(self, device: str, names: tuple[str, ...] | list[str]) -> str | None:
        """None when the move engine accepts this move (planned, nothing done), else why not."""
        try:
            from ..moves import resolve_device
            from ..moves.plan import plan_move

            dest = resolve_device(device, self.config.allow_meta_target)
            plan_move(self.namespace, dest, list(names))
        except Exception as error:  # MoveError: the planner refused, with its reason
            return str(error) or type(error).__name__
        return None

    def request_rerun(self, cell_id: str | None) -> bool:
        """Ask the notebook (through the sidebar's comm) to run the cell ``cell_id`` again;
        False where no labextension is listening."""
        channel = getattr(self, "channel", None)
        if not cell_id or channel is None:
            return False
        return channel.send_rerun(cell_id)

    # -- device errors: the diagnosis first, then a short traceback ------------------------------
    def install_exception_handler(self) -> None:
        shell = self.shell
        if not hasattr(shell, "set_custom_exc"):
            return
        self._previous_custom_exc = (
            getattr(shell, "custom_exceptions", ()),
            getattr(shell, "CustomTB", None),
        )
        shell.set_custom_exc((Exception,), self._handle_exception)

    def remove_exception_handler(self) -> None:
        shell = self.shell
        previous = self._previous_custom_exc
        if previous is None or not hasattr(shell, "set_custom_exc"):
            return
        self._previous_custom_exc = None
        exc_tuple, handler = previous
        if exc_tuple:
            shell.custom_exceptions, shell.CustomTB = exc_tuple, handler
        else:
            shell.set_custom_exc((), None)

    def _handle_exception(
        self, shell: Any, etype: Any, value: Any, tb: Any, tb_offset: Any = None
    ) -> None:
        """IPython's custom exception handler (called for every error a cell raises)."""
        # held only as long as IPython keeps the same traceback (see _last_cell_error)
        self._last_handled_error = value if isinstance(value, BaseException) else None
        previous = self._previous_custom_exc
        if previous and previous[0] and isinstance(value, previous[0]) and previous[1]:
            return previous[1](etype, value, tb, tb_offset)  # another extension's handler
        diagnosis = None
        checking = self.checking
        if checking is not None or (self.config.auto_diagnose and not self.suppress_auto_diagnosis):
            try:
                if checking is not None:  # %%devicecheck: its cell, its fix target
                    cell, target, reason, preface = checking
                    if preface is not None:
                        preface(value)
                    diagnosis = self.diagnose(value, cell, target=target, target_reason=reason)
                    cell_id = None  # the magic's inner run is not a notebook cell
                else:
                    running = self.running
                    cell = getattr(running, "raw_cell", None) or ""
                    diagnosis = self.diagnose(value, cell)
                    cell_id = getattr(running, "cell_id", None)
                if diagnosis is not None:
                    self.show_diagnosis_result(diagnosis, cell_id)
                    self._explained = value
                    if checking is not None:
                        self.checked_error = value
            except Exception:
                log.exception("torchdevice_magic: explaining the error failed")
                diagnosis = None
        if diagnosis is None or self.config.show_full_traceback:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
            return None
        stb = short_traceback(shell, etype, value, tb, tb_offset)
        shell._showtraceback(etype, value, stb)
        return None

    def show(self, obj: Any) -> None:
        """Display through this session's own shell (not whichever shell is global)."""
        data, metadata = self.shell.display_formatter.format(obj)
        self.publish(data, metadata)

    def publish(self, data: dict[str, Any], metadata: dict[str, Any] | None = None) -> None:
        self.shell.display_pub.publish(data=data, metadata=metadata or {})

    def _warn_new_mixed(self, inventory: Inventory) -> None:
        if inventory.objects_changed:  # only a new or changed module/optimizer can orphan one
            for orphan in inventory.orphaned_optimizers():
                if ("orphan", *orphan) not in self._warned:
                    self._warned.add(("orphan", *orphan))
                    print(f"⚠ torchdevice_magic: {orphan_warning(*orphan)}", file=sys.stderr)
        for record in inventory.mixed_records():
            key = (record.name, record.devices, record.note)
            if key in self._warned:
                continue
            self._warned.add(key)
            if record.kind == "optimizer":
                message = f"{record.name}: {record.note}"
            else:
                message = f"{record.name} ({record.type}) spans {', '.join(record.devices)}"
            print(f"⚠ torchdevice_magic: {message}", file=sys.stderr)

    def _config_changed(self, change: dict[str, Any]) -> None:
        if change.get("name") in {"allow_meta_target", "include_hidden", "default_device"}:
            if "torch" in sys.modules:
                self.full_scan()
            self.refresh_views()


def _outcome(action: str, ok: bool, message: str, skipped: Any = ()) -> dict[str, Any]:
    # "already on cpu" is what a move-all says of everything in place: not worth a line
    reasons = [(name, why) for name, why in skipped if not str(why).startswith("already on")]
    return protocol.outcome(action, ok, message, reasons, time.time())


def _quietly(function: Callable[..., Any], *args: Any) -> None:
    try:
        function(*args)
    except Exception:
        log.exception("torchdevice_magic: a live view failed to refresh")


def cell_names(cell: str, shell: Any = None) -> tuple[str, ...]:
    """The global names a cell mentions (a superset of those it binds), from its bytecode.

    The hook rescans tensors among these even when the id is unchanged: a freed tensor's id can
    be reused by the new one the cell created under the same name. The cell is parsed once
    (:func:`.diagnose.parse_cell`); a diagnosis of the same cell reuses the parse.
    """
    if not cell:
        return ()
    from ..diagnose import parse_cell

    return parse_cell(cell, shell).global_names


def short_traceback(shell: Any, etype: Any, value: Any, tb: Any, tb_offset: Any) -> list[str]:
    """The structured traceback with each run of torch's frames collapsed to its first frame
    (where the user's code called into torch), in the current ``%xmode``."""
    import types

    from ..diagnose import collapse_library_frames

    shown, hidden = collapse_library_frames(tb)
    if hidden:
        rebuilt = None
        for entry in reversed(shown):
            rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
        tb = rebuilt
    stb = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    if hidden:
        stb = [
            *stb[:-1],
            f"[torchdevice_magic: {hidden} frame{'s' if hidden != 1 else ''} inside torch "
            "hidden; %config TorchDeviceMagic.show_full_traceback = True shows them]",
            *stb[-1:],
        ]
    return stb


#: Builtins that reach objects by name or run arbitrary code: a cell using one may have
#: touched any module or optimizer.
_REFLECTIVE_BUILTINS = frozenset(
    {"eval", "exec", "compile", "globals", "locals", "vars", "getattr", "setattr", "delattr"}
    | {"__import__", "breakpoint", "get_ipython", "exit", "quit", "open", "input", "help"}
)
_PLAIN_VALUE_TYPES = (int, float, complex, str, bytes, bool, type(None))


def touches_only_data(
    names: tuple[str, ...], namespace: dict[str, Any], inventory: Inventory | None
) -> bool:
    """Whether a cell that mentions only these global names cannot have reached a module or an
    optimizer: Python code changes an object only through a reference to it, so if every name
    is a plain value, a plain tensor that cannot backpropagate, or torch's own modules, and no
    reflective builtin is used, then no module's parameters or optimizer's state can have
    moved. The hook then skips their signature checks (the costly part of a rescan)."""
    torch = sys.modules.get("torch")
    if torch is None or inventory is None:
        return False
    tensor_type = torch.Tensor
    for name in names:
        if name in _REFLECTIVE_BUILTINS:
            return False
        if name not in namespace:
            continue  # an attribute name, a harmless builtin, or a name the cell deleted
        value = namespace[name]
        kind = type(value)
        if kind in _PLAIN_VALUE_TYPES:
            continue
        if kind is tensor_type and not value.requires_grad and not inventory.held_by_modules(name):
            # plain data: backward() needs requires_grad, a Parameter is not this type, and
            # its storage is no module's buffer (whose .data a cell could swap)
            continue
        if kind is ModuleType and value.__name__.partition(".")[0] == "torch":
            continue  # torch's functions reach a model only through arguments, named here
        return False
    return True


# -- loading and unloading ----------------------------------------------------------------------


def get_session(shell: Any) -> DeviceSession | None:
    return getattr(shell, _SESSION_ATTRIBUTE, None)


def load(shell: Any) -> DeviceSession:
    """Register magics, the hook, the config object and the comm target — once."""
    session = get_session(shell)
    if session is not None:
        return session
    from .comm import SidebarChannel
    from .magics import DeviceMagics

    session = DeviceSession(shell)
    setattr(shell, _SESSION_ATTRIBUTE, session)
    shell.register_magics(DeviceMagics(shell, session))
    shell.events.register("pre_run_cell", session.pre_run_cell)
    shell.events.register("post_run_cell", session.post_run_cell)
    session.install_exception_handler()
    if session.config not in shell.configurables:
        shell.configurables.append(session.config)
    session.channel = SidebarChannel(session)
    session.channel.register()
    return session


def unload(shell: Any) -> None:
    """Remove every hook, magic, config object and comm target :func:`load` added."""
    session = get_session(shell)
    if session is None:
        return
    from .magics import MAGIC_NAMES

    with contextlib.suppress(ValueError):
        shell.events.unregister("post_run_cell", session.post_run_cell)
    with contextlib.suppress(ValueError):
        shell.events.unregister("pre_run_cell", session.pre_run_cell)
    session.remove_exception_handler()
    for kind, names in MAGIC_NAMES.items():
        for name in names:
            shell.magics_manager.magics[kind].pop(name, None)
    shell.magics_manager.registry.pop("DeviceMagics", None)
    if session.config in shell.configurables:
        shell.configurables.remove(session.config)
    if session.channel is not None:
        session.channel.unregister()
    delattr(shell, _SESSION_ATTRIBUTE)
