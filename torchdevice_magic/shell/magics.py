"""``%%devicecheck`` and ``%devices``: thin wrappers over the controller
(:class:`torchdevice_magic.app.DeviceController`, ``session.app``) and the pure core."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .hooks import DeviceSession

MAGIC_NAMES = {"cell": ["devicecheck"], "line": ["devices"]}


class MixedDevicesError(RuntimeError):
    """Raised by ``%%devicecheck --strict`` after the cell ran, when what it used spans devices."""

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a traceback: the cell fails with one clear line
        return [f"MixedDevicesError: {self}"]


class CellFailed(RuntimeError):
    """Marks a ``%%devicecheck`` cell as failed after its own error was shown (once)."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


def names_read(cell: str, shell: Any = None) -> list[str]:
    """Top-level names a cell reads (the roots of ``model.fc.weight`` count as ``model``); the
    cell is parsed once for the hook, this magic and any diagnosis (:func:`.diagnose.parse_cell`)."""
    from ..diagnose import parse_cell

    return list(parse_cell(cell, shell).names_read)


@magics_class
class DeviceMagics(Magics):
    def __init__(self, shell: Any, session: DeviceSession) -> None:
        super().__init__(shell)
        self.session = session

    # -- %%devicecheck ---------------------------------------------------------------------
    # name="%devicecheck": the usage line reads "%%devicecheck ..." (a cell magic)
    @magic_arguments(name="%devicecheck")
    @argument(
        "-d",
        "--device",
        metavar="DEVICE",
        help="The device fixes should move things to (default: TorchDeviceMagic.default_device; "
        "if empty, the small thing moves to where the big thing is).",
    )
    @argument(
        "--to",
        metavar="DEVICE",
        help="Before running the cell, move the objects it reads to DEVICE (all or nothing).",
    )
    @argument(
        "--strict",
        action="store_true",
        help="Fail the cell (after it ran) if what it read or created spans more than one "
        "device. Useful for notebooks run in CI.",
    )
    @argument(
        "--trace",
        action="store_true",
        help="Trace the cell's tensor ops: the first op that mixes devices (line, module, "
        "variables), copies between devices and values read back to the host, per line.",
    )
    @argument(
        "--dry-run",
        action="store_true",
        help="Do not run the cell: run it on fake copies of what it reads (shapes and devices, "
        "no data, nothing real touched) and predict the device error it would raise, its peak "
        "memory per device, whether that fits, and where the prediction stops.",
    )
    @argument(
        "--free",
        metavar="DEVICE=SIZE",
        action="append",
        default=[],
        help="With --dry-run: compare with SIZE free on DEVICE (cuda:0=24GiB) instead of the "
        "device's own free memory. Repeatable.",
    )
    @argument("--quiet", action="store_true", help="Report only warnings and errors.")
    @argument(
        "--all", action="store_true", help="Report the whole namespace, not just the cell's names."
    )
    @cell_magic
    def devicecheck(self, line: str, cell: str) -> None:
        """Run the cell; report the devices and memory of what it read or created; explain any
        device-mismatch error with a one-line fix.

        Examples::

            %%devicecheck -d cuda
            out = model(x)

            %%devicecheck --to cuda:0 --strict
            loss = criterion(model(inputs), targets)

            %%devicecheck --trace
            for batch in loader:
                loss = model(batch.to("cuda")).sum()

            %%devicecheck --dry-run --free cuda:0=24GiB
            loss = model(batch.to("cuda")).sum(); loss.backward(); opt.step()
        """
        args = parse_argstring(self.devicecheck, line)
        session = self.session
        target = self._checked_device(args.device, "-d") if args.device else None
        if args.dry_run or args.free:
            self._dry_run(cell, args, target or session.config.default_device or None)
            return
        # --to moves, like the buttons: meta only where allow_meta_target is on
        move_to = (
            self._checked_device(args.to, "--to", allow_meta=session.config.allow_meta_target)
            if args.to
            else None
        )
        read = names_read(cell, self.shell)

        if move_to is not None:
            self._move_before_running(read, move_to)

        # A device the user named (-d, --to) is where the fix moves everything; so is the
        # configured default device. Otherwise the fix follows the model, exactly like the
        # automatic diagnosis (the best device available is a guess, not a request).
        fix_target, why = target or move_to, "as asked"
        if fix_target is None and session.config.default_device:
            fix_target = session.config.default_device
            why = "the configured default (TorchDeviceMagic.default_device)"

        tracer = self._tracer(cell) if args.trace else None
        # without --trace, a lean guard still catches meta tensors computing beside real ones
        guard = self._meta_guard(cell) if tracer is None else None
        reported: list[Any] = []

        def show_trace(error: BaseException | None) -> None:
            # the first divergence (line, module, variables) comes before the diagnosis
            if tracer is not None and not reported:
                report = tracer.report(error)
                reported.append(report)
                session.publish({"text/plain": report.text(), "text/html": report._repr_html_()})

        session.suppress_auto_diagnosis += 1
        # the exception handler shows a failure's trace report and diagnosis first, then a
        # short traceback
        session.checking, session.checked_error = (cell, fix_target, why, show_trace), None
        try:
            with tracer or guard or contextlib.nullcontext():
                # registered by load() on a shell: self.shell is never None here
                result = self.shell.run_cell(cell, store_history=False)  # type: ignore[union-attr]
        finally:
            session.suppress_auto_diagnosis -= 1
            session.checking = None

        app = session.app
        inventory = app.rescan(app.cell_names(cell))
        error = result.error_in_exec or result.error_before_exec
        if result.error_before_exec is None:
            show_trace(result.error_in_exec)  # unless the exception handler showed it
        if error is not None:
            if error is session.checked_error:
                kind = "device-mismatch error"  # explained by the handler, above its traceback
            else:  # an error the handler did not see (before the cell ran) or could not explain
                diagnosis = session.show_diagnosis(
                    error, cell, target=fix_target, target_reason=why
                )
                kind = "device-mismatch error" if diagnosis is not None else type(error).__name__
            session.checked_error = None
            raise CellFailed(f"%%devicecheck: the cell failed with a {kind} (shown above)")

        mix = reported[0].meta_mix if reported else guard.meta_mix() if guard else None
        if mix is not None:
            self._explain_meta_mix(mix, cell, fix_target, why, shown=bool(reported))
            if args.strict:
                raise MixedDevicesError(f"{mix.op} computed with a meta tensor beside a real one")

        used = inventory if args.all else inventory.subset(app.cell_names(cell))
        spans = app.devices_spanned(used, cell)
        if not args.quiet and used.records:
            session.show(self._table(used, title="What this cell used"))
        if len(spans) > 1:
            message = f"what this cell used spans {len(spans)} devices: {', '.join(spans)}"
            if args.strict:
                raise MixedDevicesError(message)
            print(f"⚠ {message}")

    def _dry_run(self, cell: str, args: Any, target: str | None) -> None:
        if not args.dry_run:
            raise UsageError("--free goes with --dry-run")
        if args.to or args.trace or args.strict:
            raise UsageError("--dry-run runs nothing for real: no --to, --trace or --strict")
        if "torch" not in sys.modules:  # never imported on the user's behalf
            print("%%devicecheck --dry-run: torch is not imported yet, nothing to predict")
            return
        from ..dryrun import dry_run, parse_free

        try:
            free = dict(parse_free(text) for text in args.free)
        except ValueError as error:
            raise UsageError(f"--free: {error}") from None
        namespace = self.session.namespace
        report = dry_run(cell, namespace, shell=self.shell, target=target, free=free)
        self.session.show(report)

    def _tracer(self, cell: str) -> Any:
        if "torch" not in sys.modules:  # never imported on the user's behalf
            print("%%devicecheck --trace: torch is not imported yet, nothing to trace")
            return None
        from ..trace import Tracer

        return Tracer(self.session.namespace, source=cell, file_label=self._cell_label)

    def _meta_guard(self, cell: str) -> Any:
        if "torch" not in sys.modules:
            return None
        from ..trace import MetaMixGuard

        return MetaMixGuard(self.session.namespace, source=cell, file_label=self._cell_label)

    def _explain_meta_mix(
        self, mix: Any, cell: str, target: str | None, why: str, shown: bool
    ) -> None:
        """A silent meta mix, explained like the device-mismatch error torch raises for the
        mixes it refuses (the op and line first, unless the trace report said them)."""
        from ..trace import MetaMixError

        error = MetaMixError(mix)
        if not shown:
            print(f"⚠ {error.summary}")
            if mix.source:
                print(f"    {mix.source}")
        self.session.show_diagnosis(error, cell, target=target, target_reason=why)

    def _cell_label(self, filename: str) -> str | None:
        """An earlier cell's code file as IPython's tracebacks show it: ``In[3]``."""
        # a magic registered on a shell has one; IPython types Magics.shell as optional
        named = self.shell.compile.format_code_name(filename)  # type: ignore[union-attr]
        return named[1] if named else None

    def _checked_device(self, text: str, option: str, allow_meta: bool = True) -> str:
        from ..moves import MoveError, resolve_device

        try:
            return str(resolve_device(text, allow_meta=allow_meta))
        except MoveError as error:
            if not allow_meta and text.strip().partition(":")[0] == "meta":
                raise UsageError(
                    f"{option} {text}: moving to meta is turned off (meta tensors keep no "
                    "data); %config TorchDeviceMagic.allow_meta_target = True allows it"
                ) from None
            raise UsageError(f"{option} {text}: {error}") from None

    def _table(self, inventory: Any, title: str = "Devices") -> Any:
        """A static table of this moment ("as of [n]"), drawn from the view model."""
        from ..render import Table

        app = self.session.app
        return Table(
            inventory,
            app.targets(),
            default_target=app.default_target(),
            as_of=self.session.cell_number(),
            title=title,
            device_notes=app.device_notes(inventory, processes=True),
        )

    def _move_before_running(self, read: list[str], device: str) -> None:
        from ..moves import MoveError

        inventory = self.session.app.rescan()
        movable = {r.root for r in inventory.records if r.movable and not r.hidden}
        names = [name for name in read if name in movable]
        if not names:
            return
        try:
            result = self.session.app.move(device, names, allow_meta=True)
        except MoveError as error:
            raise UsageError(f"--to {device}: {error}") from None
        if not result.ok:
            raise UsageError(f"--to {device}: {result.summary()}")
        print(result.summary())

    # -- %devices ----------------------------------------------------------------------------
    @magic_arguments()
    @argument(
        "--hidden",
        action="store_true",
        help="Also list tensors kept alive only by the output history (Out[12], _).",
    )
    @argument(
        "-o",
        "--output",
        action="store_true",
        help="Return a pandas DataFrame (with --holders: the list of holders).",
    )
    @argument(
        "--text", action="store_true", help="Show the static table even where widgets render."
    )
    @argument(
        "--live",
        action="store_true",
        help="A table that follows every cell (labelled live). Without it, the table shows "
        "the namespace as of this cell and changes only by its own buttons.",
    )
    @argument(
        "--holders",
        action="store_true",
        help="What keeps tensor memory alive outside your named variables (the last error's "
        "traceback, Out[N], autograd graphs, orphaned optimizer state, hook closures, ...).",
    )
    @argument(
        "--release",
        metavar="N",
        type=int,
        help="Release holder N of --holders (drops exactly that reference) and say what it freed.",
    )
    @argument(
        "--timeline",
        action="store_true",
        help="Memory per cell and device: held bytes, change, CUDA peak, what grew.",
    )
    @argument("--last", metavar="N", type=int, help="With --timeline: only the last N rows.")
    @argument(
        "--engines",
        nargs="?",
        const="all",
        metavar="ENGINE",
        help="Every ipyparallel engine of the %%px client: one row per engine and device "
        "(rank, host, bytes, accelerator used/total). With ENGINE: that engine's objects too.",
    )
    @argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        help="With --engines: how long to wait for the engines (default 2); the engines that "
        "did not answer (busy, stopped, dead) are named.",
    )
    @line_magic
    def devices(self, line: str = "") -> Any:
        """Show every tensor, module and optimizer in the namespace with its device and memory.

        In Jupyter this is a table of this cell's moment ("as of [n]": sortable, filterable,
        with per-device totals and move buttons); ``--live`` follows every cell instead;
        elsewhere a text table. ``-o`` returns the DataFrame instead.

        ``--holders`` lists what holds memory outside named variables, ``--release N`` frees
        one of them, ``--timeline`` shows memory per cell. ``--engines`` gathers every
        ipyparallel engine's devices into one table (``--engines 1``: engine 1's objects too).
        """
        args = parse_argstring(self.devices, line)
        if args.engines is not None:
            return self._engines(args.engines, args.timeout, args.output)
        if args.holders or args.release is not None or args.timeline:
            return self._memory(args)
        inventory = self.session.app.full_scan(include_hidden=args.hidden or None)
        if args.output:
            return inventory.to_frame()
        if not args.text and _widgets_render(self.shell):
            from .widget import DeviceTable

            table = DeviceTable(
                self.session.app,
                include_hidden=args.hidden,
                live=args.live,
                as_of=self.session.cell_number(),
            )
            self.session.show(table)
            return None
        self.session.show(self._table(inventory))
        return None

    def _engines(self, which: str, timeout: float | None, output: bool) -> Any:
        from .gather import DEFAULT_TIMEOUT, gather

        if which != "all" and not which.isdigit():
            raise UsageError(f"--engines {which}: an engine id (%devices --engines 1) or nothing")
        expand = () if which == "all" else (int(which),)
        try:
            gathered = gather(timeout=timeout or DEFAULT_TIMEOUT, expand=expand)
        except LookupError as error:
            raise UsageError(str(error)) from None
        if output:
            return gathered.to_frame(objects=bool(expand))
        self.session.show(gathered)
        return None

    def _memory(self, args: Any) -> Any:
        from ..units import format_bytes

        if sum([args.holders, args.release is not None, args.timeline]) > 1:
            raise UsageError("use one of --holders, --release N, --timeline")
        timeline = self.session.app.timeline
        if args.timeline:
            if args.output:
                return timeline.to_frame()
            print(timeline.text(last=args.last))
            return None
        found = self.session.app.holders()
        if args.holders:
            if args.output:
                return found
            print(repr(found))
            return None
        if not 0 <= args.release < len(found):
            raise UsageError(
                f"--release {args.release}: there are {len(found)} holders (see %devices --holders)"
            )
        holder = found[args.release]
        freed = holder.release()
        text = f"{holder.where}: {holder.note}; freed {format_bytes(freed)}"
        if freed < holder.bytes and holder.still_held_by:
            text += f" (the rest is still held by {', '.join(holder.still_held_by)})"
        print(text)
        self.session.app.full_scan()
        return None


def _widgets_render(shell: Any) -> bool:
    """Widgets need a Jupyter frontend (a kernel, not a terminal or an ipyparallel engine)."""
    from .engine import widgets_render

    return widgets_render(shell)
