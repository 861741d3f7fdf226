"""The sidebar's memory chart over the comm: each cell's rows travel once inside its delta,
following the chart the sidebar has; opening, Refresh and re-opening send the whole chart
once; a move from the sidebar carries rows of its own."""

from __future__ import annotations

from commkit import FakeComm, Mirror

from torchdevice_magic import protocol
from torchdevice_magic.shell import get_session


def test_each_cell_sends_one_message_with_only_its_own_timeline_rows(channel, shell):
    """One message per cell and sidebar: the memory chart's rows travel inside the cell's
    delta, once: the opening view carries the whole chart, every later message the rows of
    the cells since, following it; the sidebar's chart (the rows added up, as connection.ts's
    mergeTimeline does) equals the whole chart."""
    session, fake = channel
    mirror = Mirror()
    [opening] = fake.sent
    mirror.apply(opening)
    follows = opening["seq"]
    for index in range(5):
        fake.sent.clear()
        result = shell.run_cell(f"w{index} = torch.zeros({index + 2})", store_history=True)
        [message] = fake.sent
        assert message["type"] == "delta"
        mirror.apply(message)
        update = message["timeline"]
        assert update["follows"] == follows
        assert [row["cell"] for row in update["rows"]] == [result.execution_count]
        follows = message["seq"]
    assert mirror.chart == protocol.timeline(session.app.timeline.to_json())["rows"]
    fake.sent.clear()
    shell.run_cell("n = 3")  # nothing tensor-related, no new row: no timeline either
    assert fake.sent == []


def chart_cells(mirror: Mirror) -> list:
    return [row["cell"] for row in mirror.chart]


def test_a_sidebar_opened_after_three_cells_shows_their_rows_and_the_next_cell_adds_one(shell):
    """The opening view carries the whole chart recorded so far (the chart is never empty
    until the next cell), and the next cell sends only its own row, following it."""
    session = get_session(shell)
    cells = [
        shell.run_cell(f"c{index} = torch.zeros({index + 7})", store_history=True).execution_count
        for index in range(3)
    ]
    fake = FakeComm()
    session.channel._on_open(fake, {"content": {"data": {}}})
    [opening] = fake.sent
    assert opening["type"] == "view" and opening["timeline"]["follows"] is None
    mirror = Mirror()
    mirror.apply(opening)
    assert chart_cells(mirror)[-3:] == cells
    assert mirror.chart == protocol.timeline(session.app.timeline.to_json())["rows"]
    fake.sent.clear()
    result = shell.run_cell("c3 = torch.zeros(11)", store_history=True)
    [message] = fake.sent
    assert [row["cell"] for row in message["timeline"]["rows"]] == [result.execution_count]
    assert message["timeline"]["follows"] == opening["seq"]
    mirror.apply(message)
    assert chart_cells(mirror)[-4:] == [*cells, result.execution_count]
    assert mirror.chart == protocol.timeline(session.app.timeline.to_json())["rows"]


def test_refresh_and_reopening_send_the_whole_chart_never_doubled(channel, shell):
    """A refresh's view and a reopened sidebar's first view replace the chart with the whole
    one (follows null); a ``window`` request keeps the chart the sidebar has."""
    session, fake = channel
    mirror = Mirror()
    for index in range(2):
        shell.run_cell(f"r{index} = torch.zeros({index + 4})", store_history=True)
    for message in fake.sent:
        mirror.apply(message)
    whole = protocol.timeline(session.app.timeline.to_json())["rows"]
    assert mirror.chart == whole
    fake.request({"type": "refresh", "request_id": "r1"})
    view = fake.sent[-1]
    assert view["type"] == "view" and view["timeline"]["follows"] is None
    for message in fake.sent:
        mirror.apply(message)
    assert mirror.chart == whole
    spec = {"sort": "name", "reverse": False, "filter": "", "offset": 0, "limit": 50}
    _, [window] = fake.request({"type": "window", "request_id": "w1", "spec": spec})
    assert window["timeline"] is None
    for message in fake.sent:
        mirror.apply(message)
    assert mirror.chart == whole
    fake.sent.clear()
    shell.run_cell("r2 = torch.zeros(9)", store_history=True)
    for message in fake.sent:
        mirror.apply(message)
    whole = protocol.timeline(session.app.timeline.to_json())["rows"]
    assert mirror.chart == whole
    fake.close()
    reopened = FakeComm("reopened")
    session.channel._on_open(reopened, {"content": {"data": {}}})
    again = Mirror()
    for message in reopened.sent:
        again.apply(message)
    assert again.chart == whole


def test_a_cell_whose_window_has_nothing_to_say_sends_its_timeline_rows_alone(channel, shell):
    """Rebinding a name to a tensor of the same size changes no row and no total: the chart's
    row goes in a ``timeline`` message of its own, still one message, following the last."""
    session, fake = channel
    mirror = Mirror()
    shell.run_cell("y = torch.zeros(5)", store_history=True)
    for message in fake.sent:
        mirror.apply(message)
    fake.sent.clear()
    result = shell.run_cell("y = torch.ones(5)", store_history=True)
    [message] = fake.sent
    assert message["type"] == "timeline"
    protocol.check_timeline(message)
    assert message["follows"] == mirror.chart_seq
    assert [row["cell"] for row in message["rows"]] == [result.execution_count]
    mirror.apply(message)
    assert mirror.chart == protocol.timeline(session.app.timeline.to_json())["rows"]


def test_a_move_from_the_sidebar_carries_its_own_chart_rows(channel, shell):
    """The chart agrees with the totals as soon as a move is made: the move's delta carries
    rows of its own ("by the move to meta"), following the chart the sidebar has."""
    session, fake = channel
    session.config.allow_meta_target = True
    mirror = Mirror()
    for message in fake.sent:
        mirror.apply(message)
    fake.sent.clear()
    shell.run_cell("big = torch.ones(1000)", store_history=True)
    for message in fake.sent:
        mirror.apply(message)
    fake.sent.clear()
    replies, updates = fake.request(
        {"type": "move", "request_id": "m", "device": "meta", "names": ["big"]}
    )
    assert replies[0]["ok"]
    for message in fake.sent:
        mirror.apply(message)
    [delta] = updates
    rows = delta["timeline"]["rows"]
    assert [row["device"] for row in rows] == ["cpu"]  # meta holds no bytes
    assert rows[0]["delta"] == -4000
    assert rows[0]["label"].endswith("(-3.9 KiB by the move to meta)"), rows[0]["label"]
    assert mirror.chart == protocol.timeline(session.app.timeline.to_json())["rows"]
