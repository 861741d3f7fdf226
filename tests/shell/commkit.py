"""What the sidebar channel's tests share: a stand-in comm that records what the kernel sends,
and a mirror that keeps what the sidebar keeps (the last view with each delta applied, the
memory chart's rows added up)."""

from __future__ import annotations

from torchdevice_magic import protocol
from torchdevice_magic.viewmodel import apply_splices


class FakeComm:
    """Stands in for a comm: records what the kernel sends."""

    def __init__(self, comm_id: str = "fake") -> None:
        self.comm_id = comm_id
        self.sent: list[dict] = []
        self.handler = None
        self.closed = None

    def send(self, data):
        self.sent.append(data)

    def on_msg(self, handler):
        self.handler = handler

    def on_close(self, handler):
        self.closed = handler

    def close(self):
        if self.closed:
            self.closed({})

    def request(self, data):
        self.sent.clear()
        self.handler({"content": {"data": data}})
        replies = [m for m in self.sent if m["type"] == "reply"]
        updates = [m for m in self.sent if m["type"] in ("view", "delta")]
        return replies, updates


def state(shell):
    ns = shell.user_ns
    return {
        name: (id(ns[name]), str(ns[name].device) if name == "x" else str(ns[name].weight.device))
        for name in ("x", "model")
    }


class Mirror:
    """What the sidebar keeps: the last view, with each delta applied, and the memory chart's
    rows added up (as connection.ts and timeline.ts's mergeTimeline do)."""

    def __init__(self) -> None:
        self.header = None
        self.rows: dict = {}
        self.order: list = []
        self.matching = self.total = 0
        self.seq = 0
        self.chart: list = []
        self.chart_seq: int | None = None

    def apply(self, message: dict) -> None:
        protocol.check_message(message)
        update = message if message["type"] == "timeline" else message.get("timeline")
        if update is not None:
            protocol.check_timeline_update({"rows": update["rows"], "follows": update["follows"]})
            follows = update["follows"] is not None and update["follows"] == self.chart_seq
            self.chart = self.chart + update["rows"] if follows else update["rows"]
            self.chart_seq = message["seq"]
        if message["type"] == "view":
            self.header = message["header"]
            window = message["window"]
            self.rows = {row["key"]: row for row in window["rows"]}
            self.order = [row["key"] for row in window["rows"]]
            self.matching, self.total = window["matching"], window["total"]
        elif message["type"] == "delta":
            assert message["base"] == self.seq, "a delta applies to the message before it"
            if message["header"] is not None:  # the fields that changed
                self.header = {**self.header, **message["header"]}
            window = message["window"]
            for key in window["remove"]:
                self.rows.pop(key, None)
            for row in window["upsert"]:
                self.rows[row["key"]] = row
            self.order = apply_splices(
                self.order, [(s["at"], s["remove"], s["insert"]) for s in window["splices"]]
            )
            self.matching, self.total = window["matching"], window["total"]
        self.seq = message["seq"]

    def names(self) -> list:
        return [self.rows[key]["name"] for key in self.order]


def kinds(messages: list) -> list:
    return [m["type"] for m in messages]
