"""One view of every engine (shell/gather.py) on the session's real 2-engine cluster: each
engine's summary is small plain data, an expanded engine sends its objects, a busy engine never
hangs the gather, and the user's own requests and results are left as they were."""

from __future__ import annotations

import pickle
import time
from types import SimpleNamespace
from typing import Any

import pytest

from torchdevice_magic import engines_frame
from torchdevice_magic.shell.gather import gather

pytestmark = pytest.mark.engines

PLACE = (
    "_gather_model = torch.nn.Linear(8, 4).to('simdev:0')\n"  # 32 + 4 floats: 144 B
    "_gather_x = torch.randn(2, 8)\n"  # 64 B on the cpu
)
CLEAN = "del _gather_model, _gather_x"


@pytest.fixture
def placed(engines: Any) -> Any:
    engines.execute(PLACE)
    yield engines
    engines.execute(CLEAN)


@pytest.fixture
def px_client(cluster: Any, ip: Any) -> Any:
    """The cluster's client as the %px magics' (``rc.activate()``) in IPython's test shell,
    taken away again afterwards (the shell is shared by every in-process test)."""
    cluster.activate()
    yield cluster
    px = ip.magics_manager.registry.pop("ParallelMagics", None)
    for kind, names in getattr(px, "magics", {}).items():
        for name in names:
            ip.magics_manager.magics[kind].pop(name, None)


def test_every_engine_sends_a_small_summary_of_its_devices(cluster: Any, placed: Any) -> None:
    gathered = gather(cluster, timeout=30)
    assert gathered.missing == {}
    assert sorted(a.engine for a in gathered.answers) == [0, 1]
    for answer in gathered.answers:
        devices = {device: (nbytes, count) for device, nbytes, count in answer.devices()}
        assert devices["simdev:0"] == (144, 1)
        assert devices["cpu"][0] >= 64
        assert answer.rows is None  # not expanded: no object travels
        assert len(pickle.dumps(dict(answer.summary))) <= 2048
    frame = engines_frame(cluster, timeout=30)
    simdev = frame[frame.device == "simdev:0"]
    assert simdev.engine.tolist() == [0, 1]
    assert simdev.bytes.tolist() == [144, 144]
    assert set(frame.status) == {"ok"}


def test_an_expanded_engine_sends_its_objects_and_only_that_one(cluster: Any, placed: Any) -> None:
    gathered = gather(cluster, timeout=30, expand=[1])
    by_engine = {a.engine: a for a in gathered.answers}
    assert by_engine[0].rows is None
    rows = {row[0]: row for row in by_engine[1].rows or []}
    # [name, kind, type, device as tables show it, bytes, then the DataFrame's device names,
    # param_devices and note] (viewmodel/engines.object_rows)
    assert rows["_gather_model"] == [
        "_gather_model", "module", "Linear", "simdev:0", 144, "simdev:0", "", ""
    ]  # fmt: skip
    assert rows["_gather_x"] == ["_gather_x", "tensor", "Tensor", "cpu", 64, "cpu", "", ""]
    frame = engines_frame(cluster, timeout=30, engine=1)
    assert set(frame.engine) == {1}
    assert {"_gather_model", "_gather_x"} <= set(frame.name)


def test_a_busy_engine_is_named_and_the_users_pending_result_stays_theirs(
    cluster: Any, engines: Any
) -> None:
    busy = cluster[0].execute("import time; time.sleep(2.5); print('my own output')", block=False)
    history = list(cluster.history)
    started = time.perf_counter()
    gathered = gather(cluster, timeout=0.5)
    waited = time.perf_counter() - started
    assert waited < 2.0  # the busy engine did not hold the client
    assert [a.engine for a in gathered.answers] == [1]
    assert gathered.missing[0] == (
        "no answer within 0.5 s (busy: 1 of your requests not finished yet)"
    )
    assert "engine 0" in gathered.text()
    # the gather's own requests never show in the user's history
    assert cluster.history == history
    assert cluster.history[-1] == busy.msg_ids[0]
    busy.get(timeout=30)
    assert busy.stdout == "my own output\n"
    # the aborted request is answered once the engine is free: nothing stays outstanding
    deadline = time.perf_counter() + 10
    while cluster.outstanding and time.perf_counter() < deadline:
        time.sleep(0.05)
    assert not cluster.outstanding
    assert gather(cluster, timeout=30).missing == {}


def test_an_engine_that_is_not_registered_is_named_not_asked(cluster: Any) -> None:
    why = "not registered (stopped, dead or never started)"
    gathered = gather(cluster, timeout=30, expand=[7])
    assert gathered.missing == {7: why}
    assert len(gathered.answers) == 2
    # a view made before engine 9 went away (ipyparallel checks targets only when a view is
    # made): it is named
    kept_view = SimpleNamespace(client=cluster, targets=[1, 9])
    gathered = gather(kept_view, timeout=30)
    assert gathered.missing == {9: why}
    assert [a.engine for a in gathered.answers] == [1]


def test_devices_engines_magic_shows_the_table_of_the_px_client(
    px_client: Any, placed: Any, ip: Any, capsys: Any
) -> None:
    ip.run_line_magic("devices", "--engines --text")
    frame = ip.run_line_magic("devices", "--engines 0 -o")
    shown = capsys.readouterr().out
    assert "simdev:0" in shown and "144 B" in shown
    assert set(frame.engine) == {0}
    assert "_gather_model" in set(frame.name)


def test_devices_engines_o_names_devices_only_in_its_device_column(
    px_client: Any, placed: Any, ip: Any
) -> None:
    """As ``%devices -o``: filter with ``frame.device == "simdev:0"``; an optimizer without
    state names its parameters' device in ``param_devices`` and says why in ``note``."""
    placed.execute("_gather_opt = torch.optim.Adam(_gather_model.parameters())")
    try:
        frame = ip.run_line_magic("devices", "--engines 0 -o").set_index("name")
    finally:
        placed.execute("del _gather_opt")
    assert frame.loc["_gather_opt", "device"] == ""
    assert frame.loc["_gather_opt", "param_devices"] == "simdev:0"
    assert frame.loc["_gather_opt", "note"].startswith("no state yet")
    assert list(frame[frame.device == "simdev:0"].index) == ["_gather_model"]
    assert not frame.device.str.contains("params").any()


def test_without_a_client_the_magic_says_how_to_connect_one(ip: Any) -> None:
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="no ipyparallel client"):
        ip.run_line_magic("devices", "--engines")
    with pytest.raises(LookupError, match=r"or pass a client: engines_frame\(rc\)"):
        engines_frame()


class _Channel:
    """What the handler needs of the sidebar's channel: broadcast, recorded as the wire has it."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def broadcast(self, kind: str, **fields: Any) -> None:
        from torchdevice_magic import protocol

        message = protocol.envelope(kind, seq=len(self.sent) + 1, **fields)
        protocol.check_message(message)  # every message the sidebar gets matches the schema
        self.sent.append(message)


def _request(expand: int | None) -> Any:
    from torchdevice_magic import protocol

    return protocol.parse_request(
        {"protocol": "torchdevice_magic", "version": protocol.PROTOCOL_VERSION,
         "type": "gather_engines", "request_id": "r1", "expand": expand}
    )  # fmt: skip


def test_the_sidebar_gets_every_engine_and_the_expanded_ones_objects(
    px_client: Any, placed: Any
) -> None:
    from torchdevice_magic.shell.gather import engines_handler

    channel = _Channel()
    assert engines_handler(channel)(_request(1)) == (True, "", None)
    [message] = channel.sent
    assert message["available"] is True and message["expanded"] == 1
    engines = {e["engine"]: e for e in message["engines"]}
    assert engines[0]["objects"] is None
    simdev = [d for d in engines[0]["devices"] if d["device"] == "simdev:0"]
    assert simdev == [
        {"device": "simdev:0", "objects": 1, "bytes": 144, "size": "144 B", "memory": ""}
    ]
    names = {o["name"]: o["size"] for o in engines[1]["objects"]}
    assert names["_gather_model"] == "144 B" and names["_gather_x"] == "64 B"


def test_without_a_client_the_sidebar_is_told_there_are_no_engines(ip: Any) -> None:
    from torchdevice_magic.shell.gather import engines_handler

    channel = _Channel()
    engines_handler(channel)(_request(None))
    [message] = channel.sent
    assert message["available"] is False and message["engines"] == []
    assert "no ipyparallel client" in message["message"]
    # what a sidebar user can do there, not the Python API's engines_frame(rc)
    assert "ipp.Cluster(n=2).start_and_connect_sync()" in message["message"]
    assert "engines_frame" not in message["message"]


def test_the_sidebar_is_told_when_a_client_comes_and_goes(cluster: Any, ip: Any) -> None:
    """``engines_reachable`` after every cell: true once the %px client exists, false when it is
    gone; a kernel that never imported ipyparallel is answered from sys.modules alone."""
    import sys

    from torchdevice_magic.shell import get_session
    from torchdevice_magic.shell.gather import engines_reachable

    sent: list[dict[str, Any]] = []
    sidebar = SimpleNamespace(
        comm_id="s", send=sent.append, on_msg=lambda handler: None, on_close=lambda h: None
    )
    get_session(ip).channel._on_open(sidebar, {})
    assert [m["type"] for m in sent] == ["view"]  # no client: the section stays hidden, untold
    cluster.activate()
    try:
        ip.run_cell("pass")
        assert [(m["type"], m.get("available")) for m in sent[1:]] == [("engines_reachable", True)]
        ip.run_cell("pass")
        assert len(sent) == 2  # told once
    finally:
        px = ip.magics_manager.registry.pop("ParallelMagics", None)
        for kind, names in getattr(px, "magics", {}).items():
            for name in names:
                ip.magics_manager.magics[kind].pop(name, None)
    ip.run_cell("pass")
    assert (sent[-1]["type"], sent[-1]["available"]) == ("engines_reachable", False)
    ipyparallel = sys.modules.pop("ipyparallel")
    try:
        assert engines_reachable() == {"available": False}
    finally:
        sys.modules["ipyparallel"] = ipyparallel


def test_a_closed_client_is_named_in_words_by_the_magic_and_the_sidebar(
    cluster: Any, ip: Any
) -> None:
    """``rc.close()`` before ``%devices --engines`` (or the sidebar's Gather): a usage message,
    not ipyparallel's traceback. A second client of the shared cluster is the one closed."""
    from IPython.core.error import UsageError

    from torchdevice_magic.shell.gather import engines_handler, engines_reachable

    closed = cluster.cluster.connect_client_sync()
    closed.wait_for_engines(2, timeout=60)
    closed.activate()  # the %px magics' client, as the notebook's rc is
    closed.close()
    try:
        with pytest.raises(LookupError, match="cannot reach its engines.*rc.activate()"):
            gather(closed, timeout=5)
        with pytest.raises(UsageError, match="cannot reach its engines"):
            ip.run_line_magic("devices", "--engines")
        channel = _Channel()
        assert engines_handler(channel)(_request(None)) == (True, "", None)
        [message] = channel.sent
        assert message["available"] is False and "cannot reach" in message["message"]
        assert engines_reachable() == {"available": False}  # the sidebar hides its section
    finally:
        px = ip.magics_manager.registry.pop("ParallelMagics", None)
        for kind, names in getattr(px, "magics", {}).items():
            for name in names:
                ip.magics_manager.magics[kind].pop(name, None)


def test_a_stopped_engine_is_named_and_one_without_the_extension_is_still_read() -> None:
    """A cluster of its own (the shared one must stay whole): engine 0 is frozen (SIGSTOP, as a
    hung or swapped-out process looks), engine 1 never loaded the extension."""
    import os
    import signal

    ipp = pytest.importorskip("ipyparallel")
    running = ipp.Cluster(n=2, log_level=40)
    client = running.start_and_connect_sync()
    try:
        client.wait_for_engines(2, timeout=60)
        client[:].execute("import torch\n_plain = torch.zeros(4)", block=True)
        # the first gather imports the package on the engines: not what this test times
        assert gather(client, timeout=60).missing == {}
        pid = client[0].apply_sync(os.getpid)
        os.kill(pid, signal.SIGSTOP)
        try:
            started = time.perf_counter()
            gathered = gather(client, timeout=1.0)
            assert time.perf_counter() - started < 3.0
            assert gathered.missing[0] == (
                "no answer within 1 s (nothing of yours is running there: stopped, hung or dead?)"
            )
            assert 1 not in gathered.missing, gathered.missing
            [answer] = gathered.answers
            assert answer.engine == 1
            assert answer.summary["note"] == "the extension is not loaded on this engine"
            assert answer.devices() == [("cpu", 16, 1)]
        finally:
            os.kill(pid, signal.SIGKILL)
    finally:
        client.close()
        running.stop_cluster_sync()


def test_the_rank_is_the_process_groups_not_the_engine_id(cluster: Any, engines: Any) -> None:
    """A gloo group across the two engines with the ranks the other way round (engine 0 is
    rank 1): the rank column reads torch.distributed; destroyed afterwards."""
    import socket

    engines.execute(
        "import torch.distributed as _gather_dist\n_gather_up = _gather_dist.is_initialized()"
    )
    if any(engines.pull("_gather_up")):
        pytest.skip("another test left a process group up on the engines")
    for engine in cluster.ids:
        cluster[engine].push({"_gather_rank": 1 - engine})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    init = (
        f"_gather_dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{port}', "
        "rank=_gather_rank, world_size=2)"
    )
    engines.execute(init, block=False).get(timeout=60)  # both ranks must join at once
    try:
        gathered = gather(cluster, timeout=30)
    finally:
        engines.execute("_gather_dist.destroy_process_group(); del _gather_rank, _gather_up")
    assert {a.engine: a.rank for a in gathered.answers} == {0: 1, 1: 0}
    assert {a.host for a in gathered.answers} == {socket.gethostname()}
