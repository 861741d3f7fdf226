"""The controller: what the extension does for one namespace, without IPython.

:class:`DeviceController` owns the incremental scan, the shared move/undo history, the move
targets, the view model's header, the memory timeline and the live views that follow it. The
IPython layer (:mod:`torchdevice_magic.shell`) adapts a shell to it: the post-execute hook
calls :meth:`DeviceController.scan_after_cell`, the sidebar's comm and the widget ask for
headers and call :meth:`DeviceController.move`, a diagnosis comes from
:meth:`DeviceController.diagnose`. Like IPython's autoreload (the logic in a plain class, the
magics a thin wrapper), nothing here imports IPython, traitlets, ipywidgets or comm, so a
script or a test drives it with a plain dict and a :class:`Settings`.

Torch is never imported here: every method that needs it runs only once the user did.
"""

from __future__ import annotations

import logging
import sys
import time
import weakref
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from . import devices, protocol, ranks, viewmodel
from .firstinit import FirstInit, InitSite, fork_error_advice
from .memory import (
    HolderList,
    Timeline,
    device_figures,
    follow,
    holders_changed,
    shell_references,
)
from .objects import LOADER_DATA_STAYS
from .scan import Inventory, Scanner, orphan_warning, spans_warning
from .trace import MetaCallCheck
from .units import device_sort_key

log = logging.getLogger("torchdevice_magic")


class Settings(Protocol):
    """What the controller reads of the user's settings (the shell's traitlets config is one;
    :class:`PlainSettings` another)."""

    allow_meta_target: bool
    include_hidden: bool
    default_device: str


@dataclass
class PlainSettings:
    """:class:`Settings` for a controller without a shell (scripts, tests)."""

    allow_meta_target: bool = False
    include_hidden: bool = False
    default_device: str = ""


class View(Protocol):
    """A live view (the ``%devices --live`` table): redrawn after every cell and action."""

    def refresh(self, controller: DeviceController) -> None: ...


Listener = Callable[["DeviceController"], None]
CellParser = Callable[[str], Any]


def _parse_plain(cell: str) -> Any:
    from .diagnose import parse_cell

    return parse_cell(cell)


class DeviceController:
    """Scan, move/undo history, targets, header, memory and listeners for one namespace.

    ``parse_cell(source)``: the cell's parse (the shell's own transforms turn magics into
    code first); ``cell_number()``: the ``[n]`` of the cell running now, where there is one.
    What a shell keeps besides the namespace (outputs, the last error) is found from the
    namespace itself (:mod:`torchdevice_magic.memory.interactive`).
    """

    def __init__(
        self,
        namespace: MutableMapping[str, Any],
        settings: Settings | None = None,
        *,
        parse_cell: CellParser = _parse_plain,
        cell_number: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.namespace = namespace
        self.settings: Settings = settings if settings is not None else PlainSettings()
        self.parse_cell = parse_cell
        self.cell_number = cell_number
        #: the incremental scan state; ``inventory`` is its latest (immutable) result
        self.scanner = Scanner()
        self.inventory: Inventory | None = None
        self.undo_stack: list[Any] = []
        #: a one-click move waiting for its cell's re-run (shell/fixbutton.FixTrial)
        self.pending_fix: Any = None
        self.last_action: dict[str, Any] | None = None
        #: counts view refreshes (the protocol's sequence number of a timeline message)
        self.seq = 0
        #: counts moves, undos and refreshes: a view that saw fewer must redraw its header
        self.actions = 0
        #: False after a move to meta (which cannot be undone and cleared the history)
        self.last_undoable = True
        # the error a shell keeps, asked after every cell (found once, here)
        self.timeline = Timeline(last_error=shell_references(namespace)[1])
        #: holders(namespace) names second names from this timeline too, as long as it lives
        self._following = follow(namespace, self.timeline.forgotten)
        self._views: weakref.WeakSet[Any] = weakref.WeakSet()
        self._listeners: list[Listener] = []
        self._warned: set[tuple[Any, ...]] = set()
        #: where the accelerator was first initialised (noted after each cell)
        self.first_init = FirstInit()
        #: the always-on check of modules with meta tensors called with real inputs
        self.meta_calls = MetaCallCheck()

    # -- scanning --------------------------------------------------------------------------
    def rescan(
        self,
        changed: tuple[str, ...] | list[str] = (),
        recheck: bool = True,
        reinspect: tuple[str, ...] = (),
    ) -> Inventory:
        self.scanner.last = self.inventory  # whatever the controller last showed
        self.inventory = self.scanner.scan(
            self.namespace,
            include_hidden=self.settings.include_hidden,
            changed=changed,
            recheck=recheck,
            reinspect=reinspect,
        )
        return self.inventory

    def full_scan(self, include_hidden: bool | None = None) -> Inventory:
        hidden = self.settings.include_hidden if include_hidden is None else include_hidden
        self.inventory = self.scanner.scan(self.namespace, include_hidden=hidden, full=True)
        return self.inventory

    def current_inventory(self) -> Inventory:
        if self.inventory is None or (not self.inventory.torch_imported and "torch" in sys.modules):
            return self.rescan()
        return self.inventory

    def cell_names(self, cell: str) -> tuple[str, ...]:
        """The global names a cell mentions (a superset of those it binds), from its bytecode.

        The rescan checks tensors among these even when the id is unchanged: a freed tensor's
        id can be reused by the new one the cell created under the same name. The cell is
        parsed once; a diagnosis of the same cell reuses the parse.
        """
        return self.parse_cell(cell).global_names if cell else ()

    def devices_spanned(self, used: Inventory, cell: str) -> list[str]:
        """The devices what ``cell`` used (``used``) spans, for ``%%devicecheck``'s warning
        and ``--strict``. A DataLoader's data and the batches a loop over it takes stay on the
        host by design, the loop body moving them: they are left out, so the canonical
        training loop is not a mix."""
        batches = self.parse_cell(cell).loader_batches(self.namespace)
        found = {
            device
            for record in used.records
            if not record.hidden
            and record.root not in batches
            and record.movable_reason != LOADER_DATA_STAYS
            for device in record.devices
        }
        return sorted(found, key=device_sort_key)

    def scan_after_cell(self, cell: str) -> tuple[tuple[str, ...], Inventory]:
        """The names a cell mentions and the scan after it (incremental: what it named, and
        modules and optimizers only where it may have reached one)."""
        names = self.cell_names(cell)
        only_data = touches_only_data(names, self.namespace, self.inventory)
        # an attribute the cell set (``model.mask = ...``) changes no signature: look again
        reinspect = self.parse_cell(cell).attributes_set if cell else ()
        return names, self.rescan(names, recheck=not only_data, reinspect=reinspect)

    # -- targets and header ----------------------------------------------------------------
    def targets(self) -> list[viewmodel.Target]:
        if "torch" not in sys.modules:
            return []
        from .moves import available_devices

        return [
            viewmodel.Target(device, enabled, reason)
            for device, enabled, reason in available_devices(self.settings.allow_meta_target)
        ]

    def choose_target(self, wanted: str | None = None) -> str | None:
        """The target a view shows: ``wanted`` while it is enabled, else the default."""
        return viewmodel.choose_target(self.targets(), wanted, self.default_target())

    def default_target(self) -> str | None:
        if "torch" not in sys.modules:
            return None
        if self.settings.default_device:
            return self.settings.default_device
        from .moves import best_device

        best = best_device()
        # meta is only ever enabled to stand in for a missing accelerator: make it the default
        if best == "cpu" and self.settings.allow_meta_target:
            return "meta"
        return best

    def header(
        self,
        target: str | None = None,
        *,
        inventory: Inventory | None = None,
        counts: viewmodel.Tally | None = None,
        busy: bool = False,
    ) -> viewmodel.Header:
        """The view model's header (totals, targets, buttons and reasons)."""
        return viewmodel.header(
            inventory if inventory is not None else self.current_inventory(),
            self.targets(),
            target=target,
            default_target=self.default_target(),
            undo_summary=self.undo_stack[-1].summary() if self.undo_stack else None,
            last_undoable=self.last_undoable,
            busy=busy,
            counts=counts,
            device_notes=self.device_notes(inventory),
        )

    def device_notes(
        self, inventory: Inventory | None = None, processes: bool = False
    ) -> list[str]:
        """Where the accelerator was first initialised, and, for each CUDA device this process
        uses, what its used memory is made of (``processes``: ask NVML for the other
        processes too), and on a rank what it holds on another rank's device. Never
        initialises a device."""
        notes = self.first_init.lines()
        if "torch" in sys.modules and devices.rank_info().is_rank:
            inventory = inventory if inventory is not None else self.current_inventory()
            notes.extend(ranks.rank_notes(inventory))
        if "torch" not in sys.modules or not devices.is_initialized("cuda"):
            return notes
        totals = (inventory if inventory is not None else self.current_inventory()).totals()
        for index in range(devices.device_count("cuda")):
            figures = devices.usage_figures(f"cuda:{index}", processes)
            if figures is not None:
                in_variables = totals.get(f"cuda:{index}", 0)
                notes.append(viewmodel.used_memory_text(f"cuda:{index}", figures, in_variables))
        return notes

    def note_first_init(self, cell: int | None) -> list[InitSite]:
        """After a cell: the device types first found initialised (usually none)."""
        return self.first_init.after_cell(cell)

    def explain_fork_error(self, error: BaseException) -> str | None:
        """For a fork / notebook_launcher "initialized before" error: the cell that first
        initialised the device, and the fixes (None for other errors)."""
        return fork_error_advice(error, self.first_init.sites)

    # -- moves, shared by the widget, the sidebar, the fix button and %%devicecheck --to ----
    def move(
        self,
        device: str,
        names: list[str] | tuple[str, ...] | None = None,
        progress: Callable[[int, int], None] | None = None,
        allow_meta: bool | None = None,
    ) -> Any:
        """Move through the all-or-nothing engine; remember the result for undo.

        ``allow_meta``: None follows the settings (one-click moves); a device the user typed
        (``%%devicecheck --to meta``) passes True.
        """
        from .moves import move

        result = move(
            self.namespace,
            device,
            names,
            allow_meta=self.settings.allow_meta_target if allow_meta is None else allow_meta,
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
        self.after_action(f"move to {result.device}" if result.ok and result.moved else "")
        return result

    def undo(self, progress: Callable[[int, int], None] | None = None) -> Any:
        if not self.undo_stack:
            from .moves import MoveError

            raise MoveError("nothing to undo")
        result = self.undo_stack[-1].undo(progress=progress)
        if result.ok:
            self.undo_stack.pop()
        self.last_action = _outcome("undo", result.ok, result.summary(), result.skipped)
        self.after_action("undo" if result.ok and result.moved else "")
        return result

    def can_move(self, device: str, names: tuple[str, ...] | list[str]) -> str | None:
        """None when the move engine accepts this move (planned, nothing done), else why not."""
        try:
            from .moves import plan_move, resolve_device

            dest = resolve_device(device, self.settings.allow_meta_target)
            plan_move(self.namespace, dest, list(names))
        except Exception as error:  # MoveError: the planner refused, with its reason
            return str(error) or type(error).__name__
        return None

    def after_action(self, action: str = "") -> None:
        """After a move or undo (``action`` names what moved something: "move to cuda:0",
        "undo"; "" when nothing moved): the views, and the memory timeline's rows for it, so
        the chart shows the move at once, not with the next cell."""
        # a move rebinds names and moves modules in place: look at everything again, holders
        # too (a failed cell's frames still reach the moved model)
        self.actions += 1
        holders_changed()
        inventory = self.full_scan()
        cell = self.timeline.last_cell
        if action and cell is not None:
            self.record_memory(cell, (), inventory, peak_from_cell_start=False, action=action)
        self.refresh_views()

    def settings_changed(self) -> None:
        """A setting the scan or the targets read changed: look again, redraw the views."""
        if "torch" in sys.modules:
            self.full_scan()
        self.refresh_views()

    # -- live views and listeners ----------------------------------------------------------
    def add_view(self, view: View) -> None:
        """A view is held weakly (a closed widget just goes)."""
        self._views.add(view)

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
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

    # -- diagnosis -------------------------------------------------------------------------
    def diagnose(
        self,
        error: BaseException,
        cell: str,
        target: str | None = None,
        target_reason: str = "as asked",
    ) -> Any:
        """The diagnosis of a device-mismatch error raised by ``cell`` (None for others); for
        an error from ipyparallel engines, what the engines themselves explained."""
        from .diagnose import diagnose, engine_diagnoses

        remote = engine_diagnoses(error)
        if remote is not None:
            return remote
        return diagnose(
            error,
            self.namespace,
            self.parse_cell(cell),
            target=target,
            allow_meta=self.settings.allow_meta_target,
            target_reason=target_reason,
        )

    # -- memory: per-cell timeline, holders, out-of-memory (logic in .memory) --------------
    def record_memory(
        self,
        cell: int,
        names: tuple[str, ...],
        inventory: Inventory,
        peak_from_cell_start: bool,
        action: str = "",
    ) -> list[str]:
        """Add cell ``cell`` to the memory timeline (reusing the hook's scan), or with
        ``action`` the move or undo made after it (:meth:`Timeline.record`); the leak warnings
        it gives."""
        try:
            figures = device_figures()
            if not peak_from_cell_start:  # the peak is since some earlier cell: not shown
                figures = {d: (a, r, None) for d, (a, r, _) in figures.items()}
            _, warnings = self.timeline.record(
                cell, inventory, self.namespace, names, cuda=figures, action=action
            )
        except Exception:  # the timeline must never cost the user the diagnosis or the move
            log.exception("torchdevice_magic: recording memory failed")
            return []
        return list(warnings)

    def holders(self, device: str | None = None) -> HolderList:
        """What keeps tensor memory alive outside the named variables (a fresh full scan):
        :func:`torchdevice_magic.holders` of the namespace, the same call a user makes."""
        from .memory import holders

        return HolderList(holders(self.namespace, device, inventory=self.full_scan()))

    def explain_oom(self, error: BaseException) -> Any:
        """An out-of-memory error in the user's names (None for other errors)."""
        from .memory import explain_oom

        return explain_oom(error, self.namespace, inventory=self.inventory)

    def timeline_update(self, since: int = 0, follows: int | None = None) -> dict[str, Any] | None:
        """The memory chart's rows (a protocol ``Timeline``) recorded after the first ``since``
        (0: the whole chart), following the message numbered ``follows`` on the same comm that
        carried the rows before them. None when there is no such row."""
        new = self.timeline.recorded - since
        if not self.timeline.rows or new <= 0:
            return None
        rows = self.timeline.to_json(min(new, protocol.TIMELINE_ROWS))
        return protocol.timeline_update(rows, follows)

    def timeline_message(self, since: int = 0, follows: int | None = None) -> dict[str, Any] | None:
        """:meth:`timeline_update` as a ``timeline`` message of its own, or None."""
        update = self.timeline_update(since, follows)
        if update is None:
            return None
        message = protocol.envelope("timeline", seq=self.seq, **update)
        protocol.check_timeline(message)
        return message

    # -- warnings ----------------------------------------------------------------------------
    def meta_call_warnings(
        self, inventory: Inventory, check: bool = True, explained_elsewhere: bool = False
    ) -> list[str]:
        """Modules with meta tensors called with real inputs since the last cell (none when
        ``explained_elsewhere``: the cell's error, or ``%%devicecheck``, says it); then the
        check is armed while ``inventory`` holds a module with meta tensors (``check``: the
        user's setting; off, the hook is removed). Cheap: only module records are read."""
        calls = self.meta_calls.take(self.namespace)
        found = [] if explained_elsewhere else [call.warning() for call in calls]
        if check:
            self.meta_calls.watch()
            self.meta_calls.arm_for(inventory.meta_module_records())
        else:
            self.meta_calls.stop()
        return found

    def new_mixed_warnings(self, inventory: Inventory) -> list[str]:
        """Orphaned optimizers and modules spanning devices not warned about before."""
        found = []
        if inventory.objects_changed:  # only a new or changed module/optimizer can orphan one
            for orphan in inventory.orphaned_optimizers():
                if ("orphan", *orphan) not in self._warned:
                    self._warned.add(("orphan", *orphan))
                    found.append(orphan_warning(*orphan))
        for record in inventory.mixed_records():
            key = (record.name, record.devices, record.note)
            if key in self._warned:
                continue
            self._warned.add(key)
            if record.kind == "optimizer":
                found.append(f"{record.name}: {record.note}")
            else:
                found.append(spans_warning(record, with_type=True))
        return found + ranks.new_rank_warnings(inventory, self._warned)


class ControllerGone(RuntimeError):
    """The controller a view was made for is gone: the extension was unloaded."""


class WeakController:
    """A view's handle on its controller that does not keep it alive: a table or a fix button
    shown in a notebook outlives ``%unload_ext`` (the front end keeps the widget), and must not
    keep the controller, its scans and its history alive with it. Calling it gives the
    controller, or raises :class:`ControllerGone`."""

    __slots__ = ("_ref",)

    def __init__(self, controller: DeviceController) -> None:
        self._ref = weakref.ref(controller)

    def __call__(self) -> DeviceController:
        controller = self._ref()
        if controller is None:
            raise ControllerGone(
                "torchdevice_magic was unloaded from this kernel "
                "(%load_ext torchdevice_magic, then show it again)"
            )
        return controller


def _outcome(action: str, ok: bool, message: str, skipped: Any = ()) -> dict[str, Any]:
    # "already on cpu" is what a move-all says of everything in place: not worth a line
    reasons = [(name, why) for name, why in skipped if not str(why).startswith("already on")]
    return protocol.outcome(action, ok, message, reasons, time.time())


def _quietly(function: Callable[..., Any], *args: Any) -> None:
    try:
        function(*args)
    except Exception:
        log.exception("torchdevice_magic: a live view failed to refresh")


#: Builtins that reach objects by name or run arbitrary code: a cell using one may have
#: touched any module or optimizer.
_REFLECTIVE_BUILTINS = frozenset(
    {"eval", "exec", "compile", "globals", "locals", "vars", "getattr", "setattr", "delattr"}
    | {"__import__", "breakpoint", "get_ipython", "exit", "quit", "open", "input", "help"}
)
_PLAIN_VALUE_TYPES = (int, float, complex, str, bytes, bool, type(None))


def touches_only_data(
    names: tuple[str, ...], namespace: MutableMapping[str, Any], inventory: Inventory | None
) -> bool:
    """Whether a cell that mentions only these global names cannot have reached a module or an
    optimizer: Python code changes an object only through a reference to it, so if every name
    is a plain value, a plain tensor that cannot backpropagate, or torch's own modules, and no
    reflective builtin is used, then no module's parameters or optimizer's state can have
    moved. The rescan then skips their signature checks (the costly part of a rescan)."""
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


__all__ = [
    "ControllerGone",
    "DeviceController",
    "PlainSettings",
    "Settings",
    "View",
    "WeakController",
    "touches_only_data",
]
