"""The sidebar's kernel end: every request type is answered; malformed messages are rejected
with an error reply and change nothing."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchdevice_magic import protocol
from torchdevice_magic.session import get_session


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
        snapshots = [m for m in self.sent if m["type"] == "snapshot"]
        return replies, snapshots


@pytest.fixture
def shell():
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    ip.run_line_magic("unload_ext", "torchdevice_magic")
    ip.run_line_magic("load_ext", "torchdevice_magic")
    ip.run_cell(
        "import torch\nx = torch.ones(3)\nmodel = torch.nn.Linear(2, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)"
    )
    yield ip
    ip.run_line_magic("unload_ext", "torchdevice_magic")


@pytest.fixture
def channel(shell):
    session = get_session(shell)
    fake = FakeComm()
    session.channel._on_open(fake, {"content": {"data": {}}})
    return session, fake


def state(shell):
    ns = shell.user_ns
    return {
        name: (id(ns[name]), str(ns[name].device) if name == "x" else str(ns[name].weight.device))
        for name in ("x", "model")
    }


def test_open_sends_a_valid_snapshot_at_once(channel):
    _, fake = channel
    (snapshot,) = fake.sent
    protocol.check_snapshot(snapshot)
    names = {row["name"] for row in snapshot["rows"]}
    assert {"x", "model", "opt"} <= names
    assert any(t["device"] == "cuda" and not t["enabled"] for t in snapshot["targets"]) or (
        torch.cuda.is_available()
    )


def test_refresh(channel):
    _, fake = channel
    replies, snapshots = fake.request({"type": "refresh", "request_id": "r1"})
    assert replies == [protocol.reply("r1", True, "refreshed")]
    assert len(snapshots) == 1 and snapshots[0]["seq"] >= 1


def test_move_and_undo(channel, shell):
    session, fake = channel
    session.config.allow_meta_target = True
    replies, snapshots = fake.request(
        {"type": "move", "request_id": "m1", "device": "meta", "names": ["x"]}
    )
    assert replies[0]["ok"] and replies[0]["request_id"] == "m1"
    assert shell.user_ns["x"].device.type == "meta"
    assert shell.user_ns["model"].weight.device.type == "cpu"
    row = next(r for r in snapshots[-1]["rows"] if r["name"] == "x")
    assert row["device"] == "meta"
    # meta keeps no data: the move says so and nothing is offered for undo
    assert replies[0]["message"].endswith("(cannot be undone: meta keeps no data)")
    assert not snapshots[-1]["can_undo"]

    replies, _ = fake.request({"type": "undo", "request_id": "u1"})
    assert not replies[0]["ok"] and replies[0]["message"] == "nothing to undo"


def test_move_everything(channel, shell):
    session, fake = channel
    session.config.allow_meta_target = True
    replies, _ = fake.request({"type": "move", "request_id": "m2", "device": "meta", "names": None})
    assert replies[0]["ok"], replies[0]["message"]
    assert shell.user_ns["x"].device.type == "meta"
    assert shell.user_ns["model"].weight.device.type == "meta"


@pytest.mark.parametrize(
    ("request_data", "expected"),
    [
        ({"type": "move", "request_id": "a", "device": "meta", "names": ["x"]}, "meta"),
        ({"type": "move", "request_id": "b", "device": "cdua", "names": ["x"]}, "not a device"),
        ({"type": "move", "request_id": "c", "device": "cpu", "names": ["nope"]}, "unknown name"),
        ({"type": "move", "request_id": "d", "device": "cpu", "names": ["__import__"]}, "unknown"),
        ({"type": "exec", "request_id": "e", "code": "import os"}, "unknown request type"),
        ({"type": "move", "request_id": "f", "device": "cpu", "names": "x"}, "list of strings"),
        ({"type": "refresh", "request_id": "g", "extra": 1}, "unexpected field"),
        ({"type": "undo", "request_id": "h", "version": 99}, "version"),
        ({"type": "undo", "request_id": "i"}, "nothing to undo"),
    ],
)
def test_bad_requests_get_an_error_reply_and_change_nothing(channel, shell, request_data, expected):
    before = state(shell)
    _, fake = channel  # meta is not enabled: a move to meta is refused
    replies, _ = fake.request(request_data)
    assert len(replies) == 1 and not replies[0]["ok"]
    assert expected in replies[0]["message"]
    assert state(shell) == before


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
message_shapes = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["move", "undo", "refresh", "MOVE", "", "exec"])},
        optional={
            "request_id": json_values,
            "device": json_values | st.sampled_from(["cpu", "meta", "cuda:9", "x" * 2000]),
            "names": json_values | st.lists(st.sampled_from(["x", "model", "ghost", ""])),
            "version": json_values,
            "code": st.text(max_size=10),
        },
    ),
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(message_shapes)
def test_fuzzed_messages_never_raise_and_unsafe_ones_change_nothing(channel, shell, data):
    before = state(shell)
    _, fake = channel
    fake.sent.clear()
    fake.handler({"content": {"data": data}})
    replies = [m for m in fake.sent if m["type"] == "reply"]
    assert len(replies) == 1
    # meta is not an enabled target and cpu is where everything already is:
    # no fuzzed message can change a binding or a device
    assert state(shell) == before
    if not isinstance(data, dict) or data.get("type") not in protocol.REQUEST_TYPES:
        assert not replies[0]["ok"]


def test_message_without_content_is_rejected(channel):
    _, fake = channel
    fake.sent.clear()
    fake.handler({})
    assert fake.sent[0]["type"] == "reply" and not fake.sent[0]["ok"]


def test_cells_push_snapshots_to_open_comms(channel, shell):
    _, fake = channel
    fake.sent.clear()
    shell.run_cell("y = torch.zeros(5)")
    snapshots = [m for m in fake.sent if m["type"] == "snapshot"]
    assert snapshots and any(r["name"] == "y" for r in snapshots[-1]["rows"])
    fake.close()
    fake.sent.clear()
    shell.run_cell("z = torch.zeros(5)")
    assert fake.sent == []  # closed comms get nothing
