"""The kernel end of the JupyterLab sidebar's channel: comm target ``torchdevice_magic``.

Protocol v4 (:mod:`.protocol`): opening the comm gets the first window (the 200 biggest rows)
and the memory chart recorded so far at once; the sidebar asks for other windows (sort,
filter, page, target); after each cell the kernel sends only what changed in that window and
in the header (a ``delta``, the memory chart's new rows inside it: one message per cell), and
nothing at all when the cell changed nothing tensor-related. ``refresh`` / ``move`` / ``undo``
go to the controller (:class:`torchdevice_magic.app.DeviceController`). Every request is
validated by :func:`protocol.parse_request` first: nothing a message says is ever executed as
code. All figures come from :mod:`.viewmodel`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .. import protocol
from ..app import DeviceController
from ..units import collector_paused
from ..viewmodel import LiveWindow, WindowSpec

log = logging.getLogger("torchdevice_magic")


class _Subscriber:
    """One open comm: its window, what it was last sent (the memory chart's rows included),
    the sequence number."""

    __slots__ = (
        "channel",
        "live",
        "header",
        "seq",
        "target",
        "actions",
        "timeline_seq",
        "timeline_rows",
        "statuses",
    )

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.live = LiveWindow(WindowSpec())
        self.header: dict[str, Any] | None = None
        self.seq = 0
        self.target: str | None = None  # the target the user chose (None: the default)
        self.actions = 0  # the controller's action count when this sidebar was last sent
        self.timeline_seq: int | None = None  # the seq of its last timeline message
        self.timeline_rows = 0  # timeline rows recorded when it was sent
        self.statuses: dict[str, dict[str, Any]] = {}  # each status's fields it was last told

    def chart_sent(self, seq: int, recorded: int) -> None:
        """The message numbered ``seq`` carried the memory chart up to ``recorded`` rows: the
        next one carries only the rows after them."""
        self.timeline_seq = seq
        self.timeline_rows = recorded


class SidebarChannel:
    """Serves every open sidebar from the controller: views and deltas out, moves, undos and
    refreshes in (through the controller's typed API).

    ``announce``: tell a sidebar already watching this kernel that the extension is here now
    (where a frontend is connected: a kernel, not a terminal or an in-process shell).
    """

    def __init__(self, app: DeviceController, announce: bool = False) -> None:
        self.app = app
        self.announce = announce
        self.comms: dict[str, _Subscriber] = {}
        self._registered = False
        #: request type -> handler(request) -> (ok, message, outcome): request types other
        #: parts add to protocol.MESSAGES (e.g. a rerun), without touching this class
        self.handlers: dict[str, Any] = {}
        #: message type -> (probe, what a sidebar assumes before it is told): see add_status
        self.statuses: dict[str, tuple[Callable[[], dict[str, Any]], dict[str, Any]]] = {}

    def add_handler(self, kind: str, handler: Any) -> None:
        """Serve the request type ``kind`` (a row of ``protocol.MESSAGES`` from the frontend)."""
        self.handlers[kind] = handler

    def add_status(
        self, kind: str, probe: Callable[[], dict[str, Any]], assumed: dict[str, Any]
    ) -> None:
        """Keep every open sidebar told of ``kind`` (a row of ``protocol.MESSAGES`` from the
        kernel, e.g. whether engines can be gathered): :meth:`update_statuses` sends a sidebar
        ``probe()``'s fields whenever they differ from what it was last told, or, before that,
        from ``assumed`` (what the sidebar assumes untold: nothing is sent while that holds)."""
        self.statuses[kind] = (probe, dict(assumed))

    def update_statuses(self) -> None:
        """Send each open sidebar the statuses that changed for it (each probe runs once)."""
        if not self.comms or not self.statuses:
            return
        for kind, (probe, assumed) in self.statuses.items():
            try:
                fields = probe()
            except Exception:  # a probe never breaks the cell it runs after
                log.debug("torchdevice_magic: the %s probe failed", kind, exc_info=True)
                continue
            for subscriber in list(self.comms.values()):
                if subscriber.statuses.get(kind, assumed) == fields:
                    continue
                subscriber.statuses[kind] = fields
                subscriber.seq += 1
                self._send(subscriber, protocol.envelope(kind, seq=subscriber.seq, **fields))

    def after_cell(self, _result: Any = None) -> None:
        """IPython's ``post_run_cell`` event: the statuses after every cell, torch imported or
        not (a notebook that only drives engines never imports torch itself)."""
        self.update_statuses()

    def broadcast(self, kind: str, **fields: Any) -> None:
        """Send every open sidebar a message of type ``kind`` (a row of ``protocol.MESSAGES``
        from the kernel, e.g. a memory timeline), numbered in each comm's sequence."""
        for subscriber in list(self.comms.values()):
            subscriber.seq += 1
            self._send(subscriber, protocol.envelope(kind, seq=subscriber.seq, **fields))

    # -- lifecycle ---------------------------------------------------------------------------
    def register(self) -> None:
        from comm import create_comm, get_comm_manager

        get_comm_manager().register_target(protocol.COMM_TARGET, self._on_open)
        self._registered = True
        if not self.announce:
            return  # a terminal or in-process shell: no frontend to announce to
        # Tell any sidebar already watching this kernel that the extension is here now. A
        # frontend without our sidebar closes the comm, and then nothing more is sent.
        try:
            subscriber = _Subscriber(None)
            data = self._view(subscriber, whole_chart=True)
            announced = create_comm(target_name=protocol.COMM_TARGET, data=data)
            subscriber.channel = announced
            self._attach(subscriber)
            self.update_statuses()
        except Exception:
            log.debug("torchdevice_magic: no frontend to announce to", exc_info=True)

    def unregister(self) -> None:
        from comm import get_comm_manager

        for subscriber in list(self.comms.values()):
            self._send(
                subscriber,
                protocol.envelope(
                    "unloaded",
                    seq=subscriber.seq + 1,
                    message="torchdevice_magic was unloaded from this kernel",
                ),
            )
            try:
                subscriber.channel.close()
            except Exception:
                log.debug("torchdevice_magic: closing a comm failed", exc_info=True)
        self.comms.clear()
        self.app.remove_listener(self.push)
        if self._registered:
            get_comm_manager().unregister_target(protocol.COMM_TARGET, self._on_open)
            self._registered = False

    def _on_open(self, channel: Any, open_message: dict[str, Any]) -> None:
        subscriber = _Subscriber(channel)
        self._attach(subscriber)
        self._send(subscriber, self._view(subscriber, whole_chart=True))
        self.update_statuses()

    def _attach(self, subscriber: _Subscriber) -> None:
        channel = subscriber.channel
        comm_id = getattr(channel, "comm_id", None) or str(id(channel))
        self.comms[comm_id] = subscriber
        channel.on_msg(lambda message, comm_id=comm_id: self.handle_message(message, comm_id))
        channel.on_close(lambda _message, comm_id=comm_id: self._detach(comm_id))
        self.app.remove_listener(self.push)
        self.app.add_listener(self.push)

    def _detach(self, comm_id: str) -> None:
        self.comms.pop(comm_id, None)
        if not self.comms:
            self.app.remove_listener(self.push)

    # -- kernel -> sidebar ---------------------------------------------------------------------
    def _view(
        self, subscriber: _Subscriber, spec: WindowSpec | None = None, whole_chart: bool = False
    ) -> dict[str, Any]:
        """A whole window and header (on open, on a ``window`` request, on ``refresh``).

        ``whole_chart`` (on open and on ``refresh``): the memory chart recorded so far goes
        along (``follows`` null, so the sidebar replaces its chart: never doubled), and later
        cells send only their own rows after it. A ``window`` request leaves the chart the
        sidebar has as it is."""
        app = self.app
        inventory = app.current_inventory()
        with collector_paused():  # the head of the order: sort keys of the rows it keeps
            spec = spec or subscriber.live.spec
            target = app.choose_target(subscriber.target)
            window = subscriber.live.reset(inventory, spec, target)  # no record per tensor
        header = app.header(subscriber.target, counts=subscriber.live.counts)
        subscriber.header = header.to_wire()
        subscriber.actions = app.actions
        subscriber.seq += 1
        chart = app.timeline_update() if whole_chart else None
        if chart is not None:
            subscriber.chart_sent(subscriber.seq, app.timeline.recorded)
        return protocol.envelope(
            "view",
            seq=subscriber.seq,
            header=subscriber.header,
            window=window.to_wire(),
            last_action=app.last_action,
            live=True,
            timeline=chart,
        )

    def push(self, app: DeviceController) -> None:
        """After a cell or an action: send each sidebar what changed, or nothing; one message
        per sidebar, the memory chart's new rows (torchdevice_magic.memory) inside it."""
        if not self.comms:
            return
        outgoing = self._window_messages(app)
        if outgoing is None:
            return  # a cell that changed nothing tensor-related sends nothing, no chart row
        for comm_id, subscriber in list(self.comms.items()):
            message = outgoing.get(comm_id)
            update = app.timeline_update(subscriber.timeline_rows, subscriber.timeline_seq)
            if update is not None:
                if message is None:  # its window had nothing to say: the rows go by themselves
                    subscriber.seq += 1
                    message = protocol.envelope("timeline", seq=subscriber.seq, **update)
                else:
                    message["timeline"] = update
                # the sidebar keeps the chart's cells: a cell costs its own rows, never the
                # history again
                subscriber.chart_sent(message["seq"], app.timeline.recorded)
            if message is not None:
                self._send(subscriber, message)

    def _window_messages(self, app: DeviceController) -> dict[str, dict[str, Any]] | None:
        """Each sidebar's window delta (or whole view) by comm id, not sent yet; None when
        nothing tensor-related changed (then no memory timeline row goes either)."""
        sent = False
        outgoing: dict[str, dict[str, Any]] = {}
        inventory = app.current_inventory()
        for comm_id, subscriber in list(self.comms.items()):
            live = subscriber.live
            if not live.shown or (
                subscriber.header is not None
                and subscriber.header["torch_imported"] != inventory.torch_imported
            ):
                outgoing[comm_id] = self._view(subscriber)
                sent = True
                continue
            delta = live.update(inventory)
            # a move or undo since this sidebar was last sent, made here or elsewhere (the
            # fix button, %%devicecheck --to, the widget table): its outcome goes along
            acted = app.actions != subscriber.actions
            if (
                delta is None
                and not live.records_changed
                and not acted
                and not self._targets_changed(subscriber)
            ):
                continue  # nothing tensor-related changed: send nothing
            sent = True  # something changed, if perhaps outside this window
            subscriber.actions = app.actions
            header = app.header(subscriber.target, counts=live.counts)
            if header.target != live.target:
                # the default target changed (a device appeared, meta was turned on): the
                # rows' buttons depend on it, so send the whole window again
                outgoing[comm_id] = self._view(subscriber)
                continue
            wire = header.to_wire()
            shown = subscriber.header or {}
            # the sidebar keeps the header it has: a cell sends the fields that changed (the
            # totals' bars, usually), not the targets and buttons again
            changed_header = {key: value for key, value in wire.items() if shown.get(key) != value}
            if delta is None and not changed_header and not acted:
                continue
            subscriber.header = wire
            base = subscriber.seq
            subscriber.seq += 1
            if delta is None:
                from ..viewmodel import Delta

                delta = Delta((), (), (), live.matching, live.total)
            outgoing[comm_id] = protocol.envelope(
                "delta",
                seq=subscriber.seq,
                base=base,
                header=changed_header or None,
                window=delta.to_wire(),
                last_action=app.last_action if acted else None,
                timeline=None,
            )
        return outgoing if sent else None

    def _targets_changed(self, subscriber: _Subscriber) -> bool:
        """Whether the move targets differ from what this sidebar shows (a cell registered
        a device, without making a tensor): a few microseconds, so asked after every cell."""
        shown = subscriber.header["targets"] if subscriber.header is not None else None
        return shown != [target.to_wire() for target in self.app.targets()]

    def send_rerun(self, cell_id: str) -> bool:
        """Ask the notebook to run one of its cells again (after a one-click fix). False when
        no sidebar is listening (VS Code, classic Notebook, nbconvert)."""
        if not self.comms:
            return False
        data = protocol.rerun(cell_id)
        fields = {k: v for k, v in data.items() if k not in ("protocol", "version", "type")}
        self.broadcast("rerun", **fields)
        return True

    def _send(self, subscriber: _Subscriber, data: dict[str, Any]) -> None:
        try:
            subscriber.channel.send(data)
        except Exception:
            log.debug("torchdevice_magic: sending to the sidebar failed", exc_info=True)

    def _reply(
        self, comm_id: str | None, request_id: str, ok: bool, message: str, outcome: Any = None
    ) -> None:
        data = protocol.reply(request_id, ok, message, outcome)
        targets = [self.comms[comm_id]] if comm_id in self.comms else list(self.comms.values())
        for subscriber in targets:
            subscriber.seq += 1
            self._send(subscriber, {**data, "seq": subscriber.seq})

    # -- sidebar -> kernel ---------------------------------------------------------------------
    def handle_message(self, message: dict[str, Any], comm_id: str | None = None) -> None:
        data = message.get("content", {}).get("data") if isinstance(message, dict) else None
        request_id = data.get("request_id", "") if isinstance(data, dict) else ""
        if not isinstance(request_id, str):
            request_id = ""
        try:
            request = protocol.parse_request(data)
        except protocol.ProtocolError as error:
            self._reply(comm_id, request_id, False, f"rejected: {error}")
            return
        subscriber = self.comms.get(comm_id) if comm_id is not None else None
        if request.type == "window" and request.spec is not None:
            if subscriber is None:
                self._reply(comm_id, request.request_id, False, "no such sidebar")
                return
            subscriber.target = request.spec.target
            self._reply(comm_id, request.request_id, True, "window")
            self._send(subscriber, self._view(subscriber, request.spec))
            return
        try:
            handler = self.handlers.get(request.type)
            ok, text, outcome = handler(request) if handler else self.answer(request)
        except Exception as error:  # never a traceback in the sidebar
            log.exception("torchdevice_magic: handling a sidebar request failed")
            ok, text, outcome = False, f"{type(error).__name__}: {error}", None
        self._reply(comm_id, request.request_id, ok, text, outcome)
        if request.type == "refresh":
            for each in list(self.comms.values()):
                self._send(each, self._view(each, whole_chart=True))
            self.update_statuses()
        elif not ok:
            self.push(self.app)  # moves and undos already pushed through after_action

    def answer(self, request: protocol.Request) -> tuple[bool, str, dict[str, Any] | None]:
        """(ok, one-line message, outcome) for a validated move / undo / refresh."""
        from ..moves import MoveError

        app = self.app
        if request.type == "refresh":
            app.full_scan()
            return True, "refreshed", None
        try:
            if request.type == "undo":
                result = app.undo()
            else:
                if request.device is None:  # parse_request gives a move its device
                    raise MoveError("a move names no device")
                names = self._checked_names(request.names)
                result = app.move(request.device, names)
        except MoveError as error:
            return False, str(error), protocol.outcome(request.type, False, str(error))
        outcome = app.last_action
        return result.ok, outcome["message"] if outcome else result.summary(), outcome

    def _checked_names(self, names: tuple[str, ...] | None) -> list[str] | None:
        from ..moves import MoveError

        if names is None:
            return None
        inventory = self.app.rescan()
        # each name asked by itself: no record per tensor of a big namespace for one row
        unknown = [
            name for name in names if not any(not r.hidden for r in inventory.records_of(name))
        ]
        if unknown:
            raise MoveError(f"unknown name(s): {', '.join(unknown[:5])}")
        return list(dict.fromkeys(names))
