"""The sidebar's kernel end: every request type is answered; malformed messages are rejected
with an error reply and change nothing."""

from __future__ import annotations

import pytest
import torch
from commkit import FakeComm, Mirror, kinds, state
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchdevice_magic import protocol
from torchdevice_magic.shell import get_session
from torchdevice_magic.viewmodel import Target


def test_open_sends_the_first_window_at_once(channel):
    _, fake = channel
    (view,) = fake.sent
    protocol.check_message(view)
    assert view["type"] == "view" and view["live"]
    names = {row["name"] for row in view["window"]["rows"]}
    assert {"x", "model", "opt"} <= names
    assert view["window"]["spec"]["limit"] == 200 and view["window"]["spec"]["sort"] == "size"
    targets = view["header"]["targets"]
    assert any(t["device"] == "cuda" and not t["enabled"] for t in targets) or (
        torch.cuda.is_available()
    )


def test_refresh(channel):
    _, fake = channel
    replies, _ = fake.request({"type": "refresh", "request_id": "r1"})
    assert replies[0]["ok"] and replies[0]["message"] == "refreshed"
    assert kinds(fake.sent) == ["reply", "view"]


def test_window_requests_sort_filter_and_page_in_the_kernel(channel, shell):
    _, fake = channel
    shell.run_cell("\n".join(f"x{i} = torch.ones({i})" for i in (1, 2, 10, 20)))
    spec = {
        "sort": "name",
        "reverse": False,
        "filter": "x",
        "offset": 0,
        "limit": 3,
        "target": None,
    }
    fake.request({"type": "window", "request_id": "w1", "spec": spec})
    view = fake.sent[-1]
    protocol.check_message(view)
    assert [r["name"] for r in view["window"]["rows"]] == ["x", "x1", "x2"]
    assert view["window"]["matching"] == 5
    fake.request({"type": "window", "request_id": "w2", "spec": {**spec, "offset": 3}})
    assert [r["name"] for r in fake.sent[-1]["window"]["rows"]] == ["x10", "x20"]


def test_move_updates_the_sidebar_with_a_delta_not_a_whole_view(channel, shell):
    session, fake = channel
    mirror = Mirror()
    mirror.apply(fake.sent[0])
    session.config.allow_meta_target = True
    for message in fake.sent[1:]:
        mirror.apply(message)
    fake.sent.clear()
    fake.handler(
        {
            "content": {
                "data": {"type": "move", "request_id": "m1", "device": "meta", "names": ["x"]}
            }
        }
    )
    assert "view" not in kinds(fake.sent) and "delta" in kinds(fake.sent)
    for message in fake.sent:
        mirror.apply(message)
    reply = next(m for m in fake.sent if m["type"] == "reply")
    assert reply["ok"] and shell.user_ns["x"].device.type == "meta"
    assert reply["message"].endswith("(cannot be undone: meta keeps no data)")
    row = next(r for r in mirror.rows.values() if r["name"] == "x")
    assert row["device"] == "meta" and not row["action"]["enabled"]
    undo = mirror.header["buttons"]["undo"]
    assert not undo["enabled"] and undo["reason"]
    # the mirrored window is exactly what a fresh window says
    fake.sent.clear()
    fake.request({"type": "refresh", "request_id": "r"})
    fresh = fake.sent[-1]
    assert [r["key"] for r in fresh["window"]["rows"]] == mirror.order
    assert {r["key"]: r for r in fresh["window"]["rows"]} == mirror.rows
    assert fresh["header"] == mirror.header

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
        ({"type": "move", "request_id": "f", "device": "cpu", "names": "x"}, "must be a list"),
        ({"type": "refresh", "request_id": "g", "extra": 1}, "unexpected field"),
        ({"type": "undo", "request_id": "h", "version": 99}, "version"),
        ({"type": "undo", "request_id": "i"}, "nothing to undo"),
        ({"type": "window", "request_id": "j", "spec": {"sort": "size"}}, "lacks"),
        (
            {
                "type": "window",
                "request_id": "k",
                "spec": {
                    "sort": "size",
                    "reverse": False,
                    "filter": "",
                    "offset": -1,
                    "limit": 5,
                    "target": None,
                },
            },
            "negative",
        ),
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
        {"type": st.sampled_from(["move", "undo", "refresh", "window", "MOVE", "", "exec"])},
        optional={
            "request_id": json_values,
            "device": json_values | st.sampled_from(["cpu", "meta", "cuda:9", "x" * 2000]),
            "names": json_values | st.lists(st.sampled_from(["x", "model", "ghost", ""])),
            "version": json_values,
            "code": st.text(max_size=10),
            "spec": json_values,
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


def test_cells_push_deltas_and_nothing_when_nothing_changed(channel, shell):
    _, fake = channel
    mirror = Mirror()
    for message in fake.sent:
        mirror.apply(message)
    fake.sent.clear()
    result = shell.run_cell("y = torch.zeros(5)", store_history=True)
    # one message per cell: the window's delta, the memory chart's new rows inside it
    assert kinds(fake.sent) == ["delta"]
    for message in fake.sent:
        mirror.apply(message)
    assert "y" in mirror.names()
    assert mirror.chart[-1]["cell"] == result.execution_count
    fake.sent.clear()
    shell.run_cell("n = 1 + 1")  # nothing tensor-related
    assert fake.sent == []
    # a cell that makes a device available (and no tensor): the targets and buttons follow
    session = get_session(shell)
    more = [*session.app.targets(), Target("simdev:0", True, "")]
    session.app.targets = lambda: more
    try:
        shell.run_cell("n = 2")
    finally:
        del session.app.targets
    assert fake.sent and fake.sent[0]["type"] in ("delta", "view")
    for message in fake.sent:
        mirror.apply(message)
    assert "simdev:0" in [t["device"] for t in mirror.header["targets"]]
    fake.sent.clear()
    fake.close()
    shell.run_cell("z = torch.zeros(5)")
    assert fake.sent == []  # closed comms get nothing


def test_a_cells_delta_carries_only_what_changed(channel, shell):
    """At 2,000 objects a cell costs its own rows: the key order travels as the splices that
    moved a row in or out (never the window's every key again), the header as the fields
    that changed (the totals' bars, not the targets and buttons); the sidebar's copy still
    equals a fresh window and header."""
    _, fake = channel
    shell.run_cell("many = [None]\nfor i in range(300):\n    globals()[f'm{i}'] = torch.zeros(2)")
    fake.request({"type": "refresh", "request_id": "r"})
    mirror = Mirror()
    for message in fake.sent:
        mirror.apply(message)
    for size in (4096, 2, 8192):
        fake.sent.clear()
        shell.run_cell(f"m7 = torch.zeros({size})", store_history=True)
        [delta] = fake.sent
        mirror.apply(delta)
        splices = delta["window"]["splices"]
        assert splices and sum(len(s["insert"]) for s in splices) <= 2, splices
        assert set(delta["header"]) == {"bars"}, delta["header"]
    fake.sent.clear()
    fake.request({"type": "refresh", "request_id": "r2"})
    fresh = fake.sent[-1]
    assert [r["key"] for r in fresh["window"]["rows"]] == mirror.order
    assert {r["key"]: r for r in fresh["window"]["rows"]} == mirror.rows
    assert fresh["header"] == mirror.header


def test_a_move_made_outside_the_sidebar_reaches_it_in_the_delta(channel, shell):
    """The fix button and %%devicecheck --to move through the controller, not the comm: the
    sidebar learns the outcome from the next delta, once."""
    session, fake = channel
    mirror = Mirror()
    mirror.apply(fake.sent[0])
    session.config.allow_meta_target = True
    for message in fake.sent[1:]:
        mirror.apply(message)
    fake.sent.clear()
    result = session.app.move("meta", ["x"])  # what the fix button does
    assert result.ok
    shell.run_cell("y = torch.zeros(5)")
    updates = [m for m in fake.sent if m["type"] in ("view", "delta")]
    assert updates, "the move and the cell reached the sidebar"
    for message in fake.sent:
        mirror.apply(message)
    assert updates[0]["type"] == "delta"
    assert updates[0]["last_action"] == session.app.last_action
    assert updates[0]["last_action"]["message"].startswith("Moved 1 object")
    # already told: the cell's own delta does not announce it again
    assert all(m.get("last_action") is None for m in updates[1:])
    assert len(updates) >= 2 and updates[-1]["type"] == "delta"
    assert "y" in mirror.names()


def test_importing_torch_later_sends_a_whole_view():
    from IPython.testing.globalipapp import get_ipython

    from torchdevice_magic.app import DeviceController
    from torchdevice_magic.viewmodel import LiveWindow, WindowSpec

    ip = get_ipython()
    app = DeviceController(ip.user_ns)
    fake = FakeComm()
    from torchdevice_magic.shell.comm import SidebarChannel, _Subscriber

    channel = SidebarChannel(app)
    subscriber = _Subscriber(fake)
    channel.comms["fake"] = subscriber
    subscriber.header = {"torch_imported": False}
    subscriber.live = LiveWindow(WindowSpec())
    subscriber.live.reset([], WindowSpec(), None)
    channel.push(app)  # torch is imported in this process: the sidebar gets a whole view
    assert kinds(fake.sent) == ["view"] and fake.sent[0]["header"]["torch_imported"]


def test_unload_tells_the_sidebar_once(channel, shell):
    _, fake = channel
    fake.sent.clear()
    shell.run_line_magic("unload_ext", "torchdevice_magic")
    assert kinds(fake.sent) == ["unloaded"]
    protocol.check_message(fake.sent[0])


def test_another_part_adds_a_message_type_in_one_row(channel, shell, monkeypatch):
    """A request and a kernel message added to protocol.MESSAGES (as a rerun or a memory
    timeline would be) are checked, served and sent without touching comm.py."""
    session, fake = channel
    monkeypatch.setitem(
        protocol.MESSAGES,
        "echo",
        {"from": "frontend", "fields": {"request_id": "str", "text": "str"}},
    )
    monkeypatch.setitem(protocol.MESSAGES, "echoed", {"from": "kernel", "fields": {"text": "str"}})

    def echo(request):
        session.channel.broadcast("echoed", text=request.fields["text"].upper())
        return True, "echoed", None

    session.channel.add_handler("echo", echo)
    fake.sent.clear()
    fake.handler({"content": {"data": {"type": "echo", "request_id": "e1", "text": "hi"}}})
    assert kinds(fake.sent) == ["echoed", "reply"]
    for message in fake.sent:
        protocol.check_message(message)
    assert fake.sent[0]["text"] == "HI"
    replies, _ = fake.request({"type": "echo", "request_id": "e2", "text": 3})
    assert not replies[0]["ok"] and "must be a string" in replies[0]["message"]


def test_an_optimizer_without_state_names_its_parameters_device_in_every_view(channel, shell):
    """The sidebar's row, the widget table's row and ``%devices --text`` say the same for an
    optimizer without state: the device of the parameters it updates; after a cell gives
    plain SGD momentum, the rescan says it will get state (never "keeps no state" then)."""
    pytest.importorskip("ipywidgets")
    from shellcells import run

    from torchdevice_magic.shell.widget import DeviceTable

    session, fake = channel
    shell.run_cell("adam = torch.optim.Adam(model.parameters())", store_history=True)
    fake.request({"type": "refresh", "request_id": "r1"})
    view = fake.sent[-1]
    sidebar = {row["name"]: row["device"] for row in view["window"]["rows"]}
    fake.sent.clear()
    table = DeviceTable(session.app)
    try:
        widget = {row[0]: row[2] for row in table.rendered_rows()}
    finally:
        table.close()
    _, _, text = run(shell, "%devices --text")
    expected = {"opt": "cpu (params; no state)", "adam": "cpu (params; no state yet)"}
    for name, device in expected.items():
        assert sidebar[name] == widget[name] == device
        assert any(line.startswith(f"{name} ") and device in line for line in text.splitlines())
    mirror = Mirror()
    for message in [view, *fake.sent]:
        mirror.apply(message)
    fake.sent.clear()
    shell.run_cell("opt.param_groups[0]['momentum'] = 0.9", store_history=True)
    for message in fake.sent:  # the cell's delta: the rescan saw the row change
        mirror.apply(message)
    assert mirror.rows["opt"]["device"] == "cpu (params; no state yet)"


def test_a_status_reaches_a_sidebar_when_it_changes_and_only_then(channel, shell, monkeypatch):
    """A status (``add_status``) is sent when it differs from what the sidebar was last told or
    assumes untold: after any cell, torch or not, on a new sidebar, on a refresh; never twice."""
    session, fake = channel
    monkeypatch.setitem(protocol.MESSAGES, "lamp", {"from": "kernel", "fields": {"on": "bool"}})
    lamp = {"on": False}
    session.channel.add_status("lamp", lambda: dict(lamp), {"on": False})
    fake.sent.clear()
    shell.run_cell("pass")
    assert kinds(fake.sent) == []  # what the sidebar assumes: nothing to say
    lamp["on"] = True
    shell.run_cell("pass")  # a cell that touches no tensor: no delta, but the status goes
    assert kinds(fake.sent) == ["lamp"] and fake.sent[0]["on"] is True
    protocol.check_message(fake.sent[0])
    fake.sent.clear()
    shell.run_cell("pass")
    assert kinds(fake.sent) == []  # told already
    later = FakeComm("later")
    session.channel._on_open(later, {"content": {"data": {}}})
    assert kinds(later.sent) == ["view", "lamp"] and fake.sent == []
    lamp["on"] = False
    replies, _ = later.request({"type": "refresh", "request_id": "r"})
    assert replies[0]["ok"] and [m["on"] for m in later.sent if m["type"] == "lamp"] == [False]
    assert [m["on"] for m in fake.sent if m["type"] == "lamp"] == [False]
