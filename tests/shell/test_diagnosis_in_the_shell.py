"""The diagnosis in the IPython layer: shown first, then a short traceback (torch's frames
collapsed, %xmode respected, a config for the full one), never twice, removed on unload; and
the one-click fix button (move through the engine, ask the notebook to re-run the cell)."""

from __future__ import annotations

from typing import Any

import pytest
from IPython.utils.capture import capture_output

from torchdevice_magic import protocol
from torchdevice_magic.shell import get_session

SETUP = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
model.to("meta")
x = torch.randn(4, 3)
"""


@pytest.fixture
def ip(ip):
    """The shared shell (conftest); these tests change %xmode, which is put back."""
    yield ip
    ip.run_line_magic("xmode", "Context")


@pytest.fixture
def events(ip, monkeypatch) -> list[tuple[str, Any]]:
    """What the user sees, in order: published diagnoses and shown tracebacks."""
    seen: list[tuple[str, Any]] = []
    session = get_session(ip)
    original_publish = session.publish
    original_show = ip._showtraceback

    def publish(data: dict[str, Any], metadata: Any = None) -> None:
        seen.append(("display", data.get("text/plain", "")))
        original_publish(data, metadata)

    def show(etype: Any, value: Any, stb: list[str]) -> None:
        seen.append(("traceback", ip.InteractiveTB.stb2text(stb)))
        original_show(etype, value, stb)

    monkeypatch.setattr(session, "publish", publish)
    monkeypatch.setattr(ip, "_showtraceback", show)
    return seen


def run(shell: Any, cell: str) -> Any:
    with capture_output():
        return shell.run_cell(cell)


def test_diagnosis_first_then_a_traceback_without_torch_insides(ip, events) -> None:
    run(ip, SETUP)
    result = run(ip, "y = model(x)")
    assert isinstance(result.error_in_exec, RuntimeError)
    kinds = [kind for kind, _ in events]
    assert kinds == ["display", "traceback"]  # once each, diagnosis first
    diagnosis, traceback = events[0][1], events[1][1]
    assert diagnosis.startswith("Device mismatch: model (Sequential")
    assert "y = model(x)" in traceback  # the user's line
    assert "RuntimeError" in traceback and "not on the expected device" in traceback
    assert "frames inside torch hidden" in traceback
    assert "torch/nn/functional.py" not in traceback and "_prims_common" not in traceback
    # the full traceback on request
    events.clear()
    ip.run_line_magic("config", "TorchDeviceMagic.show_full_traceback = True")
    run(ip, "y = model(x)")
    assert [kind for kind, _ in events] == ["display", "traceback"]
    assert "hidden" not in events[1][1]
    assert events[1][1].count("\n") > traceback.count("\n")


def test_xmode_is_respected(ip, events) -> None:
    run(ip, SETUP)
    ip.run_line_magic("xmode", "Minimal")
    run(ip, "y = model(x)")
    assert [kind for kind, _ in events] == ["display", "traceback"]
    assert "y = model(x)" not in events[1][1]  # Minimal: the error line only
    assert "not on the expected device" in events[1][1]


def test_other_errors_keep_the_plain_traceback_and_get_no_diagnosis(ip, events) -> None:
    run(ip, SETUP)
    result = run(ip, "torch.ones(2) + torch.ones(3)")
    assert isinstance(result.error_in_exec, RuntimeError)
    assert not [kind for kind, _ in events if kind == "display"]
    assert get_session(ip)._explained is None


def test_the_handler_is_removed_on_unload_and_another_one_is_restored(ip) -> None:
    assert ip.custom_exceptions == (Exception,)
    ip.run_line_magic("unload_ext", "torchdevice_magic")
    assert ip.custom_exceptions == ()
    calls: list[Any] = []

    def theirs(shell: Any, etype: Any, value: Any, tb: Any, tb_offset: Any = None) -> None:
        calls.append(etype)

    ip.set_custom_exc((KeyError,), theirs)
    ip.run_line_magic("load_ext", "torchdevice_magic")
    run(ip, "{}['missing']")
    assert calls == [KeyError]  # another extension's handler still gets its errors
    ip.run_line_magic("unload_ext", "torchdevice_magic")
    assert ip.custom_exceptions == (KeyError,)
    ip.set_custom_exc((), None)
    ip.run_line_magic("load_ext", "torchdevice_magic")


class _Comm:
    comm_id = "c1"

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, data: dict[str, Any]) -> None:
        self.sent.append(data)

    def on_msg(self, handler: Any) -> None:
        pass

    def on_close(self, handler: Any) -> None:
        self.closed = handler


def test_fix_button_moves_and_asks_the_notebook_to_rerun_the_cell(ip) -> None:
    pytest.importorskip("ipywidgets")
    from torchdevice_magic.shell.fixbutton import fix_button

    ip.run_line_magic("config", "TorchDeviceMagic.allow_meta_target = True")
    run(ip, SETUP)
    session = get_session(ip)
    result = run(ip, "y = model(x)")
    diagnosis = session.app.diagnose(result.error_in_exec, "y = model(x)")
    assert diagnosis.action is not None
    assert diagnosis.action.label == "Move x to meta and re-run"
    comm = _Comm()
    session.channel._on_open(comm, {})  # a sidebar opens its comm (protocol v2)
    try:
        box = fix_button(session.app, diagnosis.action, "cell-1234", session.request_rerun)
        button, status = box.children
        assert button.description == "Move x to meta and re-run"
        button.click()
    finally:
        session.channel.comms.pop(comm.comm_id)
    assert ip.user_ns["x"].device.type == "meta"
    rerun = comm.sent[-1]
    protocol.check_message(rerun)
    assert {k: v for k, v in rerun.items() if k != "seq"} == protocol.rerun("cell-1234")
    assert "re-running the cell" in status.value
    assert button.disabled  # a move to meta cannot be undone
    assert run(ip, "y = model(x)").error_in_exec is None


def test_without_the_labextension_the_button_says_rerun_yourself(ip) -> None:
    pytest.importorskip("ipywidgets")
    from torchdevice_magic.shell.fixbutton import fix_button

    ip.run_line_magic("config", "TorchDeviceMagic.allow_meta_target = True")
    run(ip, SETUP)
    session = get_session(ip)
    diagnosis = session.app.diagnose(run(ip, "y = model(x)").error_in_exec, "y = model(x)")
    box = fix_button(session.app, diagnosis.action, "cell-1", session.request_rerun)
    box.children[0].click()
    assert box.children[1].value.startswith("moved: re-run the cell")


def test_no_button_where_the_planner_refuses(ip) -> None:
    pytest.importorskip("ipywidgets")
    from torchdevice_magic.diagnose import MoveAction
    from torchdevice_magic.shell.fixbutton import fix_button

    run(ip, SETUP)
    session = get_session(ip)
    # meta is not a target unless the user allowed it: no button, nothing moved
    assert fix_button(session.app, MoveAction(("x",), "meta"), "c", session.request_rerun) is None
    assert fix_button(session.app, MoveAction(("nope",), "cpu"), "c", session.request_rerun) is None
    assert ip.user_ns["x"].device.type == "cpu"


def test_rerun_message_is_part_of_the_protocol() -> None:
    assert protocol.rerun("abc") == {
        "protocol": "torchdevice_magic",
        "version": protocol.PROTOCOL_VERSION,
        "type": "rerun",
        "cell_id": "abc",
    }
    with pytest.raises(protocol.ProtocolError):
        protocol.rerun(123)  # type: ignore[arg-type]


@pytest.mark.simulated
def test_a_button_move_the_rerun_disproves_is_undone_and_the_diagnosis_says_so(
    ip, events, simulated_device
) -> None:
    pytest.importorskip("ipywidgets")
    from torchdevice_magic.diagnose import MoveAction
    from torchdevice_magic.shell.fixbutton import fix_button

    dev = simulated_device
    run(
        ip,
        f"import torch\nmodel = torch.nn.Linear(3, 2).to({dev!r})\n"
        "x = torch.randn(4, 3)\nunrelated = torch.randn(5)",
    )
    session = get_session(ip)
    # a move that cannot fix the cell (the wrong tensor), as a stale or wrong fix would be
    box = fix_button(session.app, MoveAction(("unrelated",), dev), "cell-7", session.request_rerun)
    assert box is not None
    button, status = box.children
    button.click()
    assert ip.user_ns["unrelated"].device.type == dev.split(":")[0]
    assert isinstance(session.app.pending_fix.action, MoveAction)
    events.clear()
    # the cell runs again (a terminal's run has no cell id: any trial is this cell's)
    with capture_output():
        ip.run_cell("y = model(x)")
    # the move was undone and the new diagnosis says what was tried
    assert ip.user_ns["unrelated"].device.type == "cpu"
    assert session.app.pending_fix is None
    shown = "\n".join(text for kind, text in events if kind == "display")
    assert (
        f"Tried: moved unrelated to {dev} and ran the cell again: it failed with a device " in shown
    )
    assert "error again, so the move was undone" in shown


def test_under_capture_the_fix_button_goes_where_the_diagnosis_goes_and_works(
    ip, monkeypatch
) -> None:
    """``%%capture`` hides the cell's output, not its error (ipykernel sends the traceback past
    the capture): the diagnosis and its fix button are shown in the outer cell's output, and
    the button moves and asks the notebook to re-run the outer cell (the one the user wrote)."""
    ipywidgets = pytest.importorskip("ipywidgets")
    from ipywidgets.widgets.widget import _instances

    from torchdevice_magic.shell import hooks

    monkeypatch.setattr(hooks, "widgets_render", lambda shell: True)  # as in a kernel
    ip.run_line_magic("config", "TorchDeviceMagic.allow_meta_target = True")
    run(ip, SETUP)
    session = get_session(ip)
    comm = _Comm()
    session.channel._on_open(comm, {})  # a sidebar is listening
    try:
        with capture_output() as seen:
            ip.run_cell("%%capture inside\ny = model(x)", cell_id="cell-42")
        views = [
            o.data["application/vnd.jupyter.widget-view+json"]
            for o in seen.outputs
            if "application/vnd.jupyter.widget-view+json" in o.data
        ]
        texts = [o.data.get("text/plain", "") for o in seen.outputs]
        assert any(text.startswith("Device mismatch: x (Tensor") for text in texts), texts
        assert len(views) == 1, seen.outputs
        inside = ip.user_ns["inside"]
        assert not any("Device mismatch" in o.data.get("text/plain", "") for o in inside.outputs)
        assert not any("application/vnd.jupyter.widget-view+json" in o.data for o in inside.outputs)
        box = _instances[views[0]["model_id"]]
        assert isinstance(box, ipywidgets.HBox)
        button, status = box.children
        assert button.description == "Move x to meta and re-run"
        button.click()
    finally:
        session.channel.comms.pop(comm.comm_id)
    assert ip.user_ns["x"].device.type == "meta"
    assert {k: v for k, v in comm.sent[-1].items() if k != "seq"} == protocol.rerun("cell-42")
    assert "re-running the cell" in status.value
    with capture_output():
        assert ip.run_cell("%%capture inside\ny = model(x)", cell_id="cell-42").success
    assert ip.user_ns["y"].device.type == "meta"


def test_under_capture_an_out_of_memory_explanation_is_not_captured(ip) -> None:
    """The explanation shown after the cell (not by the exception handler) leaves the capture
    too: ``%%capture``'s body has finished as a cell, its capture is still on."""
    run(ip, "import torch\nbig = torch.zeros(1000, 250)")
    with capture_output() as seen:
        ip.run_cell("%%capture inside\nhuge = torch.empty(2**40, dtype=torch.uint8)")
    texts = [o.data.get("text/plain", "") for o in seen.outputs]
    assert any(text.startswith("Out of memory on cpu: the request was 1.0 TiB.") for text in texts)
    inside = ip.user_ns["inside"]
    assert not any("Out of memory" in o.data.get("text/plain", "") for o in inside.outputs)


@pytest.mark.kernel
def test_under_capture_in_a_real_kernel_the_button_is_shown_above_the_traceback_and_clicks() -> (
    None
):
    """Over the wire: the cell's messages are the diagnosis, then its button, then the error
    (ipykernel sends it past the capture); a click sent as the frontend sends it moves x."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3")
    try:

        def execute(code: str) -> list[dict[str, Any]]:
            messages: list[dict[str, Any]] = []
            client.execute_interactive(code, timeout=120, output_hook=messages.append)
            return messages

        for cell in (
            "%load_ext torchdevice_magic",
            "%config TorchDeviceMagic.allow_meta_target = True",
            "import torch\nmodel = torch.nn.Linear(3, 2).to('meta')\nx = torch.randn(4, 3)",
        ):
            execute(cell)
        messages = execute("%%capture inside\ny = model(x)")
        shown = [
            (m["msg_type"], m["content"].get("data", {}))
            for m in messages
            if m["msg_type"] in ("display_data", "error")
        ]
        assert [kind for kind, _ in shown] == ["display_data", "display_data", "error"], shown
        assert shown[0][1]["text/plain"].startswith("Device mismatch: x (Tensor")
        box_id = shown[1][1]["application/vnd.jupyter.widget-view+json"]["model_id"]
        states = {
            m["content"]["comm_id"]: m["content"]["data"]["state"]
            for m in messages
            if m["msg_type"] == "comm_open"
        }
        button_id = states[box_id]["children"][0].removeprefix("IPY_MODEL_")
        assert states[button_id]["description"] == "Move x to meta and re-run"
        click = {"method": "custom", "content": {"event": "click"}}
        client.shell_channel.send(
            client.session.msg("comm_msg", {"comm_id": button_id, "data": click})
        )
        printed = execute(
            "print(x.device.type, any('Device mismatch' in o.data.get('text/plain', '')"
            " or 'application/vnd.jupyter.widget-view+json' in o.data for o in inside.outputs))"
        )
        text = "".join(m["content"]["text"] for m in printed if m["msg_type"] == "stream")
        assert text.strip() == "meta False"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
