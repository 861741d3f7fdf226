"""The kernel end of the JupyterLab sidebar's channel: comm target ``torchdevice_magic``.

The sidebar opens a comm (or accepts the one the kernel opens when the extension loads); the
kernel answers with a snapshot, pushes a new one after every non-silent cell and every move,
and serves ``refresh`` / ``move`` / ``undo`` requests. Every request is validated by
:func:`protocol.parse_request` first: nothing a message says is ever executed as code.
"""

from __future__ import annotations

import logging
from typing import Any

from . import protocol

log = logging.getLogger("torchdevice_magic")


class SidebarChannel:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.comms: dict[str, Any] = {}
        self._registered = False

    # -- lifecycle ---------------------------------------------------------------------------
    def register(self) -> None:
        from comm import create_comm, get_comm_manager

        get_comm_manager().register_target(protocol.COMM_TARGET, self._on_open)
        self._registered = True
        if getattr(self.session.shell, "kernel", None) is None:
            return  # a terminal or in-process shell: no frontend to announce to
        # Tell any sidebar already watching this kernel that the extension is here now. A
        # frontend without our sidebar closes the comm, and then nothing more is sent.
        try:
            announced = create_comm(target_name=protocol.COMM_TARGET, data=self.session.snapshot())
            self._attach(announced)
        except Exception:
            log.debug("torchdevice_magic: no frontend to announce to", exc_info=True)

    def unregister(self) -> None:
        from comm import get_comm_manager

        for channel in list(self.comms.values()):
            try:
                channel.close()
            except Exception:
                log.debug("torchdevice_magic: closing a comm failed", exc_info=True)
        self.comms.clear()
        self.session.remove_listener(self.push)
        if self._registered:
            get_comm_manager().unregister_target(protocol.COMM_TARGET, self._on_open)
            self._registered = False

    def _on_open(self, channel: Any, open_message: dict[str, Any]) -> None:
        self._attach(channel)
        self._send(channel, self.session.snapshot())

    def _attach(self, channel: Any) -> None:
        comm_id = getattr(channel, "comm_id", None) or str(id(channel))
        self.comms[comm_id] = channel
        channel.on_msg(self.handle_message)
        channel.on_close(lambda _message, comm_id=comm_id: self._detach(comm_id))
        self.session.remove_listener(self.push)
        self.session.add_listener(self.push)

    def _detach(self, comm_id: str) -> None:
        self.comms.pop(comm_id, None)
        if not self.comms:
            self.session.remove_listener(self.push)

    # -- kernel -> sidebar ---------------------------------------------------------------------
    def push(self, session: Any) -> None:
        if not self.comms:
            return
        snapshot = session.snapshot()
        # the memory chart's rows (torchdevice_magic.memory), after the snapshot
        timeline_message = getattr(session, "timeline_message", None)
        timeline = timeline_message() if timeline_message is not None else None
        for channel in list(self.comms.values()):
            self._send(channel, snapshot)
            if timeline is not None:
                self._send(channel, timeline)

    def _send(self, channel: Any, data: dict[str, Any]) -> None:
        try:
            channel.send(data)
        except Exception:
            log.debug("torchdevice_magic: sending to the sidebar failed", exc_info=True)

    def send_rerun(self, cell_id: str) -> bool:
        """Ask the notebook to run one of its cells again (after a one-click fix). False when
        no sidebar is listening (VS Code, classic Notebook, nbconvert)."""
        if not self.comms:
            return False
        data = protocol.rerun(cell_id)
        for channel in list(self.comms.values()):
            self._send(channel, data)
        return True

    def _reply(self, request_id: str, ok: bool, message: str, outcome: Any = None) -> None:
        data = protocol.reply(request_id, ok, message, outcome)
        for channel in list(self.comms.values()):
            self._send(channel, data)

    # -- sidebar -> kernel ---------------------------------------------------------------------
    def handle_message(self, message: dict[str, Any]) -> None:
        data = message.get("content", {}).get("data") if isinstance(message, dict) else None
        request_id = data.get("request_id", "") if isinstance(data, dict) else ""
        if not isinstance(request_id, str):
            request_id = ""
        try:
            request = protocol.parse_request(data)
        except protocol.ProtocolError as error:
            self._reply(request_id, False, f"rejected: {error}")
            return
        try:
            ok, text, outcome = self.answer(request)
        except Exception as error:  # never a traceback in the sidebar
            log.exception("torchdevice_magic: handling a sidebar request failed")
            ok, text, outcome = False, f"{type(error).__name__}: {error}", None
        self._reply(request.request_id, ok, text, outcome)
        if request.type == "refresh" or not ok:
            self.push(self.session)  # moves and undos already pushed through after_action

    def answer(self, request: protocol.Request) -> tuple[bool, str, dict[str, Any] | None]:
        """(ok, one-line message, outcome) for a validated request."""
        from .moves import MoveError

        session = self.session
        if request.type == "refresh":
            session.full_scan()
            session.seq += 1
            return True, "refreshed", None
        try:
            if request.type == "undo":
                result = session.undo()
            else:
                names = self._checked_names(request.names)
                result = session.move(request.device, names)
        except MoveError as error:
            return False, str(error), {"action": request.type, "ok": False, "message": str(error)}
        outcome = session.last_action
        return result.ok, outcome["message"] if outcome else result.summary(), outcome

    def _checked_names(self, names: tuple[str, ...] | None) -> list[str] | None:
        from .moves import MoveError

        if names is None:
            return None
        inventory = self.session.rescan()
        movable = {r.root for r in inventory.records if not r.hidden}
        unknown = [name for name in names if name not in movable]
        if unknown:
            raise MoveError(f"unknown name(s): {', '.join(unknown[:5])}")
        return list(dict.fromkeys(names))
