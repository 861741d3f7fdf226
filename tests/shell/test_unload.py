"""``%unload_ext torchdevice_magic`` leaves no object of the extension alive (the session,
its controller, the magics, the sidebar's channel, the scanner, the inventory, the timeline)
and no widget it showed open (tables, fix buttons: closed, their comms with them); a table
made by hand and left open does not keep it alive either; a re-load starts clean. In process
and through a real kernel."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import ipywidgets
import pytest
from IPython.utils.capture import capture_output
from jupyter_client.manager import start_new_kernel

from torchdevice_magic.app import ControllerGone
from torchdevice_magic.diagnose import MoveAction
from torchdevice_magic.shell import get_session
from torchdevice_magic.shell.config import TorchDeviceMagic
from torchdevice_magic.shell.fixbutton import FixButton
from torchdevice_magic.shell.magics import DeviceMagics
from torchdevice_magic.shell.widget import DeviceTable


def run(shell: Any, cell: str) -> Any:
    with capture_output():
        return shell.run_cell(cell, store_history=True)


def use_the_extension(ip: Any) -> dict[str, weakref.ref[Any]]:
    """Cells that make the extension build everything it has; weak references to it."""
    run(ip, "import torch\nx = torch.ones(256)\nmodel = torch.nn.Linear(4, 2).to('meta')\nx")
    run(ip, "%devices")
    run(ip, "%devices --holders")
    run(ip, "model(torch.ones(3, 4))")  # a diagnosis
    run(ip, "y = x + 1\ndel x")
    session = get_session(ip)
    app = session.app
    return {
        "session": weakref.ref(session),
        "controller": weakref.ref(app),
        "magics": weakref.ref(ip.magics_manager.registry["DeviceMagics"]),
        "channel": weakref.ref(session.channel),
        "config": weakref.ref(session.config),
        "scanner": weakref.ref(app.scanner),
        "inventory": weakref.ref(app.inventory),
        "timeline": weakref.ref(app.timeline),
    }


def alive(refs: dict[str, weakref.ref[Any]]) -> list[str]:
    gc.collect()
    return [name for name, ref in refs.items() if ref() is not None]


def test_unload_leaves_no_object_of_the_extension_alive(ip: Any) -> None:
    refs = use_the_extension(ip)
    assert alive(refs) == list(refs)
    ip.run_line_magic("unload_ext", "torchdevice_magic")
    assert alive(refs) == []


def test_tables_and_fix_buttons_left_in_the_output_do_not_keep_it_alive(ip: Any) -> None:
    refs = use_the_extension(ip)
    app = get_session(ip).app
    table = DeviceTable(app)
    # the widgets a notebook's output keeps after the unload
    button = FixButton(app, MoveAction(("y",), "meta"), "cell-1", lambda _: False, ipywidgets)
    del app
    ip.run_line_magic("unload_ext", "torchdevice_magic")
    assert alive(refs) == []
    with pytest.raises(ControllerGone):
        table.app  # noqa: B018
    table.refresh_button.click()  # a click after the unload: one line, no traceback
    assert "ControllerGone: torchdevice_magic was unloaded" in table.status.value
    button.button.click()
    assert "failed: ControllerGone" in button.status.value
    table.close()


def test_unload_closes_every_widget_the_extension_showed(ip: Any, monkeypatch: Any) -> None:
    """Tables (``%devices``, ``--live``) and a fix button shown as in a notebook: after the
    unload no widget the extension made is open (ipywidgets' registry, which keeps open widgets
    and their comms alive, holds none of them) and none of them is alive after gc."""
    from ipywidgets.widgets.widget import _instances

    from torchdevice_magic.shell import engine, hooks

    # widgets render as in a kernel (the in-process shell has no frontend)
    monkeypatch.setattr(hooks, "widgets_render", lambda shell: True)
    monkeypatch.setattr(engine, "widgets_render", lambda shell: True)
    ip.run_line_magic("config", "TorchDeviceMagic.allow_meta_target = True")
    before = set(_instances)
    refs = use_the_extension(ip)
    run(ip, "%devices --live")
    run(ip, "batch = torch.ones(3, 4)")
    run(ip, "model(batch)")  # a diagnosis with a fix button
    shown = list(get_session(ip).shown_widgets)
    kinds = sorted(type(widget).__name__ for widget in shown)
    assert kinds == ["DeviceTable", "DeviceTable", "HBox"], kinds  # two tables, one fix button
    made = set(_instances) - before
    assert len(made) > 100 and all(_instances[model_id].comm is not None for model_id in made)
    widget_refs = {f"{type(w).__name__} {i}": weakref.ref(w) for i, w in enumerate(shown)}
    del shown
    ip.run_line_magic("unload_ext", "torchdevice_magic")
    assert set(_instances) & made == set()
    assert alive(refs) == [] and alive(widget_refs) == []
    ip.run_line_magic("load_ext", "torchdevice_magic")
    run(ip, "%devices")
    (table,) = get_session(ip).shown_widgets
    assert "y " in "\n".join(" ".join(row) for row in table.rendered_rows())


def test_a_reload_starts_clean(ip: Any) -> None:
    refs = use_the_extension(ip)
    ip.run_line_magic("unload_ext", "torchdevice_magic")
    ip.run_line_magic("load_ext", "torchdevice_magic")
    assert alive(refs) == []
    session = get_session(ip)
    app = session.app
    assert app.timeline.rows == [] and app.undo_stack == [] and app.inventory is None
    ours = [
        callback
        for event in ("pre_run_cell", "post_run_cell")
        for callback in ip.events.callbacks[event]
        if getattr(callback, "__self__", None).__class__.__name__ == "DeviceSession"
    ]
    assert [c.__self__ for c in ours] == [session, session]
    assert sum(isinstance(c, TorchDeviceMagic) for c in ip.configurables) == 1
    assert sum(isinstance(c, DeviceMagics) for c in ip.configurables) == 1
    result = run(ip, "z = torch.ones(3)")
    assert {row.cell for row in app.timeline.rows} == {result.execution_count}
    with capture_output() as captured:
        ip.run_cell("%devices", store_history=True)
    table = "\n".join(o.data.get("text/plain", "") for o in captured.outputs)
    assert "y " in table and "z " in table


@pytest.mark.kernel
def test_unload_leaves_nothing_alive_in_a_real_kernel() -> None:
    """Tables shown as widgets, a live table and a diagnosis with its fix button in a real
    kernel, then %unload_ext: every object of the extension is gone, and every widget comm it
    opened was closed (the frontend drops their views)."""
    manager, client = start_new_kernel(kernel_name="python3")
    opened: set[str] = set()
    closed: set[str] = set()
    try:

        def execute(code: str) -> str:
            printed: list[str] = []

            def collect(message: dict[str, Any]) -> None:
                kind, content = message["msg_type"], message["content"]
                if kind == "stream":
                    printed.append(content["text"])
                elif kind == "comm_open" and content["target_name"] == "jupyter.widget":
                    opened.add(content["comm_id"])
                elif kind == "comm_close":
                    closed.add(content["comm_id"])

            client.execute_interactive(code, timeout=120, output_hook=collect)
            return "".join(printed)

        for cell in (
            "%load_ext torchdevice_magic",
            "%config TorchDeviceMagic.allow_meta_target = True",
            "import gc, torch, weakref\nfrom torchdevice_magic.shell import get_session\n"
            "x = torch.ones(256)\nmodel = torch.nn.Linear(4, 2).to('meta')\n"
            "batch = torch.ones(3, 4)",
            "%devices",
            "%devices --live",
            "model(batch)",
            "session = get_session(get_ipython())\n"
            "refs = {'session': weakref.ref(session), 'controller': weakref.ref(session.app),\n"
            "        'channel': weakref.ref(session.channel),\n"
            "        'magics': weakref.ref(get_ipython().magics_manager.registry['DeviceMagics'])}\n"
            "print(sorted(type(w).__name__ for w in session.shown_widgets))\n"
            "del session",
        ):
            printed = execute(cell)
        assert printed.strip() == "['DeviceTable', 'DeviceTable', 'HBox']"
        assert len(opened) > 100 and not opened & closed
        execute("%unload_ext torchdevice_magic")
        assert opened <= closed
        printed = execute("gc.collect()\nprint(sorted(k for k, r in refs.items() if r()))")
        assert printed.strip() == "[]"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
