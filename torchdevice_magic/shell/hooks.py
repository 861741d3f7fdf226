"""What the extension adds to one IPython shell: :class:`DeviceSession`.

It owns the shell's hooks (``pre_run_cell``, ``post_run_cell``, the custom exception handler
that puts a diagnosis above a short traceback) and shows what they produce; the work is the
controller's (:class:`torchdevice_magic.app.DeviceController`, ``session.app``): the hook asks
it to scan after the cell, to record the cell's memory and to diagnose an error, then shows the
diagnosis and, under it, the fix button, whose move goes back through the controller. The
extension (:mod:`.extension`) makes one session per shell and takes all of it away again.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..app import DeviceController
from ..diagnose import ShownErrors, traceback_cell, wrapped_cell
from ..memory import reset_peaks
from .config import TorchDeviceMagic
from .engine import widgets_render

if TYPE_CHECKING:  # comm.py imports the ``comm`` package: loaded only by the extension
    from .comm import SidebarChannel
    from .engine import EngineReplies

log = logging.getLogger("torchdevice_magic")


class DeviceSession:
    """Everything torchdevice_magic keeps for one shell: its settings, its controller, its
    hooks and the sidebar's channel."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.config = TorchDeviceMagic(parent=shell)
        self.app = DeviceController(
            shell.user_ns,
            self.config,
            parse_cell=self.parse_cell,
            cell_number=self.cell_number,
        )
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
        #: the running cell's ExecutionInfo (pre_run_cell): its source and cell id; None between
        #: cells and during a silent run (which fires no hooks)
        self.running: Any = None
        #: the error the custom exception handler already explained (not explained twice)
        self._explained: BaseException | None = None
        self._previous_custom_exc: tuple[Any, Any] | None = None
        #: errors a magic caught and showed itself (%run): explained after the cell
        self.shown_errors = ShownErrors()
        #: cells running inside cells (%%capture runs its body as a cell), and the display of
        #: the outermost one: a diagnosis is shown there, not into the capture
        self._cell_depth = 0
        self._outer_display: Any = None
        self._outer_cell: Any = None
        #: the sidebar's comm channel (set by the extension)
        self.channel: SidebarChannel | None = None
        #: on an ipyparallel engine: names the engine, sends the diagnosis with the error reply
        self.engine: EngineReplies | None = None
        #: the widgets shown (tables, fix buttons), closed on unload; held weakly: ipywidgets
        #: keeps an open widget alive, and one the frontend closed is gone from here too
        self.shown_widgets: weakref.WeakSet[Any] = weakref.WeakSet()
        self._peak_from_cell_start = False
        self.config.observe(self._config_changed)

    @property
    def namespace(self) -> dict[str, Any]:
        return self.shell.user_ns

    def parse_cell(self, cell: str) -> Any:
        """The cell's parse, with this shell's transforms (magics turned into code first)."""
        from ..diagnose import parse_cell

        return parse_cell(cell, self.shell)

    def cell_number(self) -> int | None:
        """The ``[n]`` of the cell running now (IPython counts the cell before running it)."""
        count = getattr(self.shell, "execution_count", None)
        return count - 1 if isinstance(count, int) and count > 1 else None

    # -- the hooks ----------------------------------------------------------------------------
    def pre_run_cell(self, info: Any = None) -> None:
        """Before every cell: remember it (the exception handler explains errors with its
        source), and reset the accelerator's peak counters (config ``track_peak``) so the
        memory timeline can show this cell's peak. Never initialises a device; never raises."""
        self.running = info
        self._explained = None
        if self._cell_depth == 0:
            self._outer_display = getattr(self.shell, "display_pub", None)
            self._outer_cell = info
            self.shown_errors.cell_started()
        self._cell_depth += 1
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
        self._cell_depth = max(0, self._cell_depth - 1)
        if self._cell_depth == 0:
            # a silent run (ipyparallel's execute) fires no pre_run_cell: left here, this
            # cell's source would explain that run's error
            self.running = None
        if "torch" not in sys.modules:
            return  # nothing can hold a tensor yet, and we never import torch ourselves
        try:
            self._after_cell(result)
        except Exception:
            if not self._hook_failed:
                self._hook_failed = True
                log.exception("torchdevice_magic: the post-execute hook failed; it carries on")

    def _after_cell(self, result: Any) -> None:
        app = self.app
        info = getattr(result, "info", None)
        cell = getattr(info, "raw_cell", None) or ""
        names, inventory = app.scan_after_cell(cell)
        error = self.shown_errors.error_of(result)
        if error is None and getattr(result, "error_before_exec", None) is None:
            from .fixbutton import keep_trial

            keep_trial(app)  # a one-click move the cell's run proved
        number = int(
            getattr(result, "execution_count", None)
            or getattr(self.shell, "execution_count", 0)
            or 0
        )
        app.note_first_init(number)
        for warning in app.record_memory(number, names, inventory, self._peak_from_cell_start):
            print(f"⚠ torchdevice_magic: {warning}", file=sys.stderr)
        explained = error is not None and error is self._explained
        self._explained = None
        if (
            error is not None
            and not explained
            and self.config.auto_diagnose
            and not self.suppress_auto_diagnosis
            # a device mismatch is explained by .diagnose; an out-of-memory error by .memory
            and self.show_diagnosis(error, cell, cell_id=getattr(info, "cell_id", None)) is None
            and self.show_oom(error) is None
        ):
            self._advise_on_fork_error(error)  # an error a magic showed itself: %run's
        # a failed cell's error is explained; %%devicecheck explains meta mixes itself
        told_elsewhere = getattr(result, "error_in_exec", None) is not None or bool(
            self.suppress_auto_diagnosis
        )
        check = self.config.check_meta_calls
        for warning in app.meta_call_warnings(inventory, check, told_elsewhere):
            print(f"⚠ torchdevice_magic: {warning}", file=sys.stderr)
        if self.config.warn_on_mixed:
            for warning in app.new_mixed_warnings(inventory):
                print(f"⚠ torchdevice_magic: {warning}", file=sys.stderr)
        if app.has_views():
            app.refresh_views()

    # -- showing diagnoses ------------------------------------------------------------------------
    def show_diagnosis(
        self,
        error: BaseException,
        cell: str,
        target: str | None = None,
        cell_id: str | None = None,
        target_reason: str = "as asked",
    ) -> Any:
        diagnosis = self.app.diagnose(error, cell, target=target, target_reason=target_reason)
        if diagnosis is not None:
            self.show_diagnosis_result(diagnosis, cell_id)
        return diagnosis

    def show_diagnosis_result(self, diagnosis: Any, cell_id: str | None = None) -> None:
        from .fixbutton import settle_trial

        diagnosis = settle_trial(self.app, diagnosis, cell_id)  # a failed one-click move: undone
        if self.engine is not None:
            diagnosis = self.engine.named(diagnosis)
        with self.outermost_output():
            # text for terminals and logs, escaped HTML where a notebook renders it
            self.publish({"text/plain": diagnosis.text(), "text/html": diagnosis._repr_html_()})
            if diagnosis.action is not None and widgets_render(self.shell):
                from .fixbutton import fix_button

                # the button outlives %unload_ext in the output: it must not keep this session
                rerun = functools.partial(_request_rerun, weakref.ref(self))
                button = fix_button(self.app, diagnosis.action, cell_id, rerun)
                if button is not None:
                    self.show(button)

    @contextlib.contextmanager
    def outermost_output(self) -> Iterator[None]:
        """Inside a cell run by a cell (``%%capture`` runs its body as a cell), show what we
        show where the outermost cell shows its output, as its traceback is: a diagnosis and
        its fix button captured into a variable would never be seen."""
        shell, inner = self.shell, getattr(self.shell, "display_pub", None)
        # >= 1: the inner cell's post_run_cell has counted it finished, its capture still on
        outer = self._outer_display if self._cell_depth >= 1 else None
        if outer is None or outer is inner:
            yield
            return
        shell.display_pub = outer
        try:
            yield
        finally:
            shell.display_pub = inner

    def show_oom(self, error: BaseException) -> Any:
        explanation = self.app.explain_oom(error)
        if explanation is not None:
            with self.outermost_output():
                data = {"text/plain": explanation.text(), "text/html": explanation._repr_html_()}
                self.publish(data)
        return explanation

    def request_rerun(self, cell_id: str | None) -> bool:
        """Ask the notebook (through the sidebar's comm) to run the cell ``cell_id`` again;
        False where no labextension is listening."""
        channel = self.channel
        if not cell_id or channel is None:
            return False
        return channel.send_rerun(cell_id)

    def show(self, obj: Any) -> None:
        """Display through this session's own shell (not whichever shell is global)."""
        data, metadata = self.shell.display_formatter.format(obj)
        self.publish(data, metadata)
        widgets = sys.modules.get("ipywidgets")
        if widgets is not None and isinstance(obj, widgets.Widget):
            self.shown_widgets.add(obj)

    def close_widgets(self) -> None:
        """Close every widget this session showed, with its parts (the extension is unloaded:
        a table or a fix button left open would keep its comm, and the frontend its view, of
        an extension that is gone)."""
        from .tableparts import close_widgets

        shown = list(self.shown_widgets)
        self.shown_widgets.clear()
        for widget in shown:
            try:
                close_widgets((), [widget])
            except Exception:
                log.debug("torchdevice_magic: closing a widget failed", exc_info=True)

    def publish(self, data: dict[str, Any], metadata: dict[str, Any] | None = None) -> None:
        self.shell.display_pub.publish(data=data, metadata=metadata or {})

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
                    diagnosis = self.app.diagnose(value, cell, target=target, target_reason=reason)
                    cell_id = None  # the magic's inner run is not a notebook cell
                else:
                    running = self.running
                    cell = getattr(running, "raw_cell", None) or ""
                    if running is None:  # a silent run: its code is where IPython cached it
                        cell = traceback_cell(value)
                    if self._cell_depth > 1:  # %%capture's body: the user wrote the outer cell
                        outer = getattr(self._outer_cell, "raw_cell", None) or ""
                        if wrapped_cell(outer, cell) is outer:
                            cell, running = outer, self._outer_cell
                    diagnosis = self.app.diagnose(value, cell)
                    cell_id = getattr(running, "cell_id", None)
                if diagnosis is not None:
                    self.show_diagnosis_result(diagnosis, cell_id)
                    self._explained = value
                    if checking is not None:
                        self.checked_error = value
            except Exception:
                log.exception("torchdevice_magic: explaining the error failed")
                diagnosis = None
        if diagnosis is None and checking is None:
            self._advise_on_fork_error(value)
        # an ipyparallel error renders the engines' own (already shortened) tracebacks
        remote = hasattr(value, "_render_traceback_")
        if diagnosis is None or self.config.show_full_traceback or remote:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
            return None
        keep_for_debugging(etype, value, tb)
        stb = short_traceback(shell, etype, value, tb, tb_offset)
        shell._showtraceback(etype, value, stb)
        return None

    def _advise_on_fork_error(self, error: BaseException) -> None:
        """A notebook_launcher / forked-worker error: which cell first initialised the device,
        and the fixes, above the traceback (where a user reads first), as a diagnosis is; after
        the cell for an error a magic showed itself (%run's), where the outermost cell shows
        its output."""
        if not self.config.auto_diagnose or self.suppress_auto_diagnosis:
            return
        try:
            advice = self.app.explain_fork_error(error)
            if advice is None:
                return
            with self.outermost_output():
                self.publish({"text/plain": f"torchdevice_magic: {advice}"})
            self._explained = error
        except Exception:
            log.exception("torchdevice_magic: explaining the error failed")

    def _config_changed(self, change: dict[str, Any]) -> None:
        if change.get("name") in {"allow_meta_target", "include_hidden", "default_device"}:
            self.app.settings_changed()


def _request_rerun(session: weakref.ref[DeviceSession], cell_id: str | None) -> bool:
    alive = session()
    return alive is not None and alive.request_rerun(cell_id)


def keep_for_debugging(etype: Any, value: Any, tb: Any) -> None:
    """Keep the error where ``%debug``, ``%tb`` and the holders look for it, as IPython's own
    ``showtraceback`` does (a custom handler's error is otherwise kept nowhere but the last
    execution result, so ``%debug`` finds nothing and ``holders()`` misses its frames)."""
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = value


#: where :func:`.extension.load` keeps a shell's session
SESSION_ATTRIBUTE = "_torchdevice_magic_session"


def get_session(shell: Any) -> DeviceSession | None:
    """The extension's session of ``shell`` (None while it is not loaded there)."""
    return getattr(shell, SESSION_ATTRIBUTE, None)


def cell_names(cell: str, shell: Any = None) -> tuple[str, ...]:
    """The global names a cell mentions, with ``shell``'s transforms (see
    :meth:`torchdevice_magic.app.DeviceController.cell_names`)."""
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


__all__ = ["DeviceSession", "cell_names", "short_traceback"]
