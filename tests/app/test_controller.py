"""The controller (``torchdevice_magic.app.DeviceController``) driven the way a script would:
a plain dict for a namespace, plain settings, no IPython. What the shell's hook, the sidebar's
comm, the widget and the fix button ask of it works here alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from torchdevice_magic.app import DeviceController, PlainSettings
from torchdevice_magic.moves import MoveError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def namespace() -> dict[str, Any]:
    model = nn.Linear(4, 3)
    return {
        "x": torch.ones(100),
        "model": model,
        "opt": torch.optim.SGD(model.parameters(), lr=0.1),
        "n": 5,
    }


@pytest.fixture
def app(namespace: dict[str, Any]) -> DeviceController:
    return DeviceController(namespace, PlainSettings(allow_meta_target=True))


def test_scan_after_a_cell_sees_what_the_cell_named(
    app: DeviceController, namespace: dict[str, Any]
) -> None:
    app.full_scan()
    namespace["y"] = torch.zeros(7)
    names, inventory = app.scan_after_cell("y = torch.zeros(7)")
    assert "y" in names and "torch" in names
    assert "y" in inventory.names() and app.inventory is inventory


@pytest.mark.parametrize(
    "cell",
    [
        "list(model.double() for _ in range(1))",  # a generator expression's own code
        "(lambda: model.double())()",
        "def f():\n    model.double()\nf()",
    ],
)
def test_a_module_changed_from_nested_code_is_seen_after_the_cell(
    app: DeviceController, namespace: dict[str, Any], cell: str
) -> None:
    """The names a cell mentions include those of its nested code: a module reached only
    there is still looked at again (the rescan skips modules a cell cannot have reached)."""
    app.full_scan()
    exec(cell, namespace)
    namespace.pop("__builtins__", None)
    _, inventory = app.scan_after_cell(cell)
    assert {r.dtype for r in inventory.records_of("model")} == {"float64"}


def test_move_then_undo_keeps_one_history_and_tells_every_listener(
    namespace: dict[str, Any], lazy_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchdevice_magic.moves as moves

    real_resolve = moves.resolve_device
    monkeypatch.setattr(
        moves,
        "resolve_device",
        lambda d, allow: torch.device("lazy", 0) if d == "lazy" else real_resolve(d, allow),
    )
    app = DeviceController(namespace)
    heard: list[int] = []
    app.add_listener(lambda controller: heard.append(controller.actions))

    result = app.move(lazy_backend, ["x"])
    assert result.ok and namespace["x"].device.type == "lazy"
    assert len(app.undo_stack) == 1 and app.last_action is not None
    assert app.last_action["message"].startswith("Moved 1 object")
    assert app.header().undo.enabled

    app.undo()
    assert namespace["x"].device.type == "cpu" and not app.undo_stack
    assert heard == [1, 2]  # each action refreshed the listeners once, after its full scan
    with pytest.raises(MoveError, match="nothing to undo"):
        app.undo()


def test_a_move_to_meta_clears_the_history_it_cannot_undo(
    app: DeviceController, namespace: dict[str, Any]
) -> None:
    app.undo_stack.append(object())  # an earlier move
    app.move("meta", ["x"])
    assert namespace["x"].device.type == "meta"
    assert not app.undo_stack and not app.last_undoable
    assert app.last_action is not None
    assert app.last_action["message"].endswith("(cannot be undone: meta keeps no data)")


def test_targets_and_default_follow_the_settings(namespace: dict[str, Any]) -> None:
    settings = PlainSettings()
    app = DeviceController(namespace, settings)
    meta = [t for t in app.targets() if t.device == "meta"]
    assert not meta or not meta[0].enabled
    settings.allow_meta_target = True
    assert any(t.device == "meta" and t.enabled for t in app.targets())
    if not torch.cuda.is_available():
        assert app.default_target() == "meta"  # stands in for the missing accelerator
    settings.default_device = "cpu"
    assert app.default_target() == "cpu" and app.choose_target("nowhere") == "cpu"


def test_can_move_asks_the_planner_without_moving(
    app: DeviceController, namespace: dict[str, Any]
) -> None:
    assert app.can_move("meta", ["x"]) is None
    assert namespace["x"].device.type == "cpu"
    assert "nope" in (app.can_move("meta", ["nope"]) or "")


def test_diagnose_uses_the_namespace_and_the_parse(app: DeviceController) -> None:
    error = RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        "meta and cpu!"
    )
    diagnosis = app.diagnose(error, "model(x)")
    assert diagnosis is not None and "x" in diagnosis.text()
    assert app.diagnose(ValueError("unrelated"), "model(x)") is None


def test_mixed_devices_are_warned_about_once(
    app: DeviceController, namespace: dict[str, Any]
) -> None:
    namespace["model"].bias = nn.Parameter(torch.zeros(3, device="meta"))
    inventory = app.full_scan()
    first = app.new_mixed_warnings(inventory)
    assert any("model (Linear) spans cpu, meta" in w for w in first)
    assert app.new_mixed_warnings(app.full_scan()) == []


def test_a_closed_view_just_goes(app: DeviceController) -> None:
    class View:
        def __init__(self) -> None:
            self.refreshed = 0

        def refresh(self, controller: DeviceController) -> None:
            self.refreshed += 1

    view = View()
    app.add_view(view)
    app.refresh_views()
    assert view.refreshed == 1 and app.has_views()
    del view
    assert not app.has_views()


def test_the_controller_imports_no_ipython_layer() -> None:
    code = (
        "import sys, torchdevice_magic.app as app\n"
        "ns = {}\n"
        "app.DeviceController(ns).full_scan()\n"
        "bad = [m for m in ('IPython', 'traitlets', 'ipywidgets', 'comm', 'ipykernel') "
        "if m in sys.modules]\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


@pytest.mark.simulated
def test_adams_step_counters_left_on_the_cpu_are_named_in_the_totals_note(
    simulated_device: str,
) -> None:
    """After Adam's state moved to the accelerator, torch keeps its 0-dim step counters on
    the CPU: the cpu total shows their bytes though no row is on the cpu, and the note says
    what they are."""
    model = nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    app = DeviceController({"model": model, "opt": opt}, PlainSettings())
    assert "step counters" not in app.header().totals_note  # all on the cpu: nothing apart
    assert app.move(simulated_device).ok
    header = app.header()
    steps = 2 * 4  # one float32 counter per parameter
    assert {bar.device: bar.bytes for bar in header.bars}["cpu"] == steps
    assert header.totals_note.endswith(
        f"; {steps} B on the cpu are optimizer step counters, which torch keeps on the CPU."
    ), header.totals_note
