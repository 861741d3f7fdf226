"""DeviceTable (the ipywidgets table of ``%devices``) in an in-process IPython shell (``globalipapp``).

Buttons are pressed with ``Button.click()``; every test checks the namespace (what really
moved) and what the table shows. ``meta`` is the second device on machines without a GPU
(``session.config.allow_meta_target``); a move to meta cannot be undone (meta keeps no data),
so the undo round trip uses torch's ``lazy`` backend, a CPU-only device that keeps data, the
way the tests in tests/moves/ do.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

import ipywidgets
import pytest
import torch
from IPython.testing import globalipapp
from ipywidgets.widgets import widget as widget_module
from torch import nn

import torchdevice_magic.moves as moves
from torchdevice_magic.names import is_ipython_bookkeeping
from torchdevice_magic.shell.session import load
from torchdevice_magic.shell.widget import DeviceTable
from torchdevice_magic.viewmodel import Target

HAS_CUDA = torch.cuda.is_available()


@pytest.fixture
def ip() -> Iterator[Any]:
    """The shared in-process shell, with the user's names of earlier tests put aside (and put
    back afterwards): each test sees only what it creates."""
    shell = globalipapp.get_ipython()  # started once, shared by the test session
    shell.run_cell("import torch", store_history=False)
    shell.displayhook.flush()  # Out and _ of earlier tests
    ns = shell.user_ns
    aside = {
        name: ns.pop(name)
        for name in list(ns)
        if not is_ipython_bookkeeping(name) and name not in ("torch", "__builtins__")
    }
    yield shell
    shell.displayhook.flush()
    for name in list(ns):
        if not is_ipython_bookkeeping(name) and name != "torch":
            del ns[name]
    ns.update(aside)


@pytest.fixture
def session(ip: Any) -> Iterator[Any]:
    session = load(ip)
    session.config.allow_meta_target = False
    session.config.include_hidden = False
    session.config.default_device = ""
    session.undo_stack.clear()
    session.last_undoable = True
    session.full_scan()
    yield session
    session.config.allow_meta_target = False
    session.undo_stack.clear()
    session.last_action = None


@pytest.fixture
def make_table(session: Any) -> Iterator[Callable[..., DeviceTable]]:
    """Build tables; close them afterwards (ipywidgets keeps open widgets alive, and the
    session would go on refreshing them in later tests)."""
    made: list[DeviceTable] = []

    def make(**kwargs: Any) -> DeviceTable:
        table = DeviceTable(session, **kwargs)
        made.append(table)
        return table

    yield make
    for table in made:
        table.close()


def names(table: DeviceTable) -> list[str]:
    return [row[0] for row in table.rendered_rows()]


def column(table: DeviceTable, name: str, index: int = 2) -> str:
    """The cell of row ``name`` in the rendered table (2: device)."""
    for row in table.rendered_rows():
        if row[0] == name:
            return row[index]
    raise AssertionError(f"{name} is not on the page: {names(table)}")


def grid_html(table: DeviceTable) -> str:
    return "".join(w.value for w in table.grid.children if isinstance(w, ipywidgets.HTML))


def status_text(table: DeviceTable) -> str:
    return re.sub(r"<[^>]+>", "", table.status.value)


def is_error(table: DeviceTable) -> bool:
    return "#b91c1c" in table.status.value


@pytest.fixture
def small(ip: Any, session: Any) -> dict[str, Any]:
    """A tensor, a module with an optimizer, a dict batch, on the cpu; meta enabled."""
    session.config.allow_meta_target = True
    model = nn.Linear(4, 3)
    objects = {
        "x": torch.ones(100),
        "model": model,
        "opt": torch.optim.SGD(model.parameters(), lr=0.1),
        "batch": {"a": torch.ones(2), "b": torch.zeros(3)},
        "n": 5,
    }
    ip.user_ns.update(objects)
    return objects


# --------------------------------------------------------------------------------------------
# Moves


def test_move_all_to_meta_moves_tensors_and_modules(
    ip: Any, small: dict[str, Any], make_table: Callable[..., DeviceTable]
) -> None:
    table = make_table()
    if not HAS_CUDA:
        assert table.target_dropdown.options == ("cpu", "meta")
        # meta is enabled only to stand in for a missing accelerator: it is the default then
        assert table.target_dropdown.value == "meta"
        table.target_dropdown.value = "cpu"
        assert table.move_all_button.description == "Move all to cpu"
    table.target_dropdown.value = "meta"
    assert table.move_all_button.description == "Move all to meta"
    assert table.row_buttons["x"].description == "→ meta"

    table.move_all_button.click()

    ns = ip.user_ns
    assert ns["x"].device.type == "meta"
    assert ns["model"].weight.device.type == "meta" and ns["model"].bias.device.type == "meta"
    assert ns["batch"]["a"].device.type == "meta" and ns["batch"]["b"].device.type == "meta"
    assert ns["n"] == 5
    for name in ("x", "model", "batch['a']", "batch['b']"):
        assert column(table, name) == "meta", name
    assert column(table, "x", 5) == "0 B (meta; needs 400 B)"
    assert column(table, "model", 4) == "15 params"
    assert status_text(table).startswith("Moved 3 objects") and " to meta" in status_text(table)
    assert not is_error(table)
    # progress went through the move's progress callback: bytes done == total
    assert table.progress.max == 400 + 60 + 20 and table.progress.value == table.progress.max
    assert "480 B of 480 B" in table.progress_label.value
    # everything is on meta now: row buttons say so, and cannot be pressed
    assert table.row_buttons["x"].disabled
    assert "x cannot be moved" in table.row_buttons["x"].tooltip
    # the header: cpu holds nothing any more; meta shows what it would need
    header = " ".join(w.value for box in table.totals.children for w in box.children[::2])
    assert "meta" in header and "0 B (meta; needs 480 B)" in header


def test_row_button_moves_only_that_name(
    ip: Any, small: dict[str, Any], make_table: Callable[..., DeviceTable]
) -> None:
    table = make_table()
    table.target_dropdown.value = "meta"
    assert table.row_buttons["x"].tooltip == "Move x to meta"
    table.row_buttons["x"].click()

    assert ip.user_ns["x"].device.type == "meta"
    assert ip.user_ns["model"].weight.device.type == "cpu"
    assert ip.user_ns["batch"]["a"].device.type == "cpu"
    assert column(table, "x") == "meta" and column(table, "model") == "cpu"
    assert status_text(table).startswith("Moved 1 object (400 B) to meta")
    assert table.row_buttons["x"].disabled
    assert table.row_buttons["x"].tooltip.startswith("x cannot be moved")
    assert not table.row_buttons["model"].disabled


def test_row_of_a_container_element_moves_the_whole_container(
    ip: Any, small: dict[str, Any], make_table: Callable[..., DeviceTable]
) -> None:
    table = make_table()
    table.target_dropdown.value = "meta"
    button = table.row_buttons["batch['a']"]
    assert "Move batch (all of it" in button.tooltip
    button.click()
    assert ip.user_ns["batch"]["a"].device.type == "meta"
    assert ip.user_ns["batch"]["b"].device.type == "meta"
    assert ip.user_ns["x"].device.type == "cpu"
    assert column(table, "batch['b']") == "meta"


def test_move_selected_moves_only_checked_names(
    ip: Any, small: dict[str, Any], make_table: Callable[..., DeviceTable]
) -> None:
    table = make_table()
    table.target_dropdown.value = "meta"
    assert table.move_selected_button.disabled  # nothing checked yet
    # only movable rows have a checkbox; plain ints are not rows at all
    assert set(table.row_checkboxes) == {"x", "model", "opt", "batch['a']", "batch['b']"}
    table.row_checkboxes["x"].value = True
    table.row_checkboxes["model"].value = True
    assert table.move_selected_button.description == "Move selected (2)"
    assert not table.move_selected_button.disabled

    table.move_selected_button.click()

    ns = ip.user_ns
    assert ns["x"].device.type == "meta" and ns["model"].weight.device.type == "meta"
    assert ns["batch"]["a"].device.type == "cpu"
    assert column(table, "x") == "meta" and column(table, "model") == "meta"
    assert column(table, "batch['a']") == "cpu"
    # x and model (the SGD without momentum has no state to follow its parameters)
    assert status_text(table).startswith("Moved 2 objects (460 B) to meta")
    assert table.selected == []  # moved rows leave the selection
    assert table.move_selected_button.description == "Move selected (0)"


def test_selection_survives_paging_and_refresh(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    session.config.allow_meta_target = True
    ip.user_ns.update({f"t{i}": torch.ones(i + 1) for i in range(7)})
    table = make_table(page_size=3)
    table.target_dropdown.value = "meta"
    first = names(table)[0]
    table.row_checkboxes[first].value = True
    table.next_button.click()
    second = names(table)[0]
    table.row_checkboxes[second].value = True
    table.prev_button.click()
    assert table.row_checkboxes[first].value  # still checked when the page comes back
    ip.run_cell("unrelated = 1")
    assert sorted(table.selected) == sorted([first, second])
    table.move_selected_button.click()
    moved = {n for n in ip.user_ns if n.startswith("t") and ip.user_ns[n].device.type == "meta"}
    assert moved == {first, second}


# --------------------------------------------------------------------------------------------
# Undo


def test_undo_is_disabled_until_something_moved(
    small: dict[str, Any], lazy: str, make_table: Callable[..., DeviceTable]
) -> None:
    table = make_table()
    assert table.undo_button.disabled and table.undo_button.tooltip == "nothing to undo"
    table.target_dropdown.value = lazy  # a device that keeps data: the move can be undone
    table.row_buttons["x"].click()
    assert not table.undo_button.disabled
    assert table.undo_button.tooltip.startswith("Undo: Moved 1 object")


def test_a_move_to_meta_says_it_cannot_be_undone_and_disables_undo(
    ip: Any, small: dict[str, Any], make_table: Callable[..., DeviceTable]
) -> None:
    table = make_table()
    table.target_dropdown.value = "meta"
    table.move_all_button.click()
    assert ip.user_ns["x"].device.type == "meta"

    assert not is_error(table)
    assert "(cannot be undone: meta keeps no data)" in status_text(table)
    # meta keeps no data: undo is never offered, rather than offered and refused every time
    assert table.undo_button.disabled
    assert table.undo_button.tooltip == "the last move went to meta and cannot be undone"
    table.undo_button.click()  # a disabled button's click must not raise either
    assert ip.user_ns["x"].device.type == "meta"
    assert column(table, "x") == "meta"


@pytest.fixture
def lazy(monkeypatch: pytest.MonkeyPatch, session: Any, lazy_backend: str) -> str:
    """torch's TorchScript lazy backend, offered as a target: a device that keeps data."""
    del lazy_backend  # initialised (or the test skipped) by the fixture
    real_resolve, real_available = moves.resolve_device, moves.available_devices
    monkeypatch.setattr(
        moves,
        "resolve_device",
        lambda d, allow: torch.device("lazy", 0) if d == "lazy" else real_resolve(d, allow),
    )
    monkeypatch.setattr(
        moves, "available_devices", lambda allow: [*real_available(allow), ("lazy", True, "")]
    )
    return "lazy"


def test_undo_puts_things_back(ip: Any, lazy: str, make_table: Callable[..., DeviceTable]) -> None:
    values = torch.arange(6.0)
    model = nn.Linear(2, 2)
    weight = model.weight.detach().clone()
    ip.user_ns.update(v=values, model=model)
    table = make_table()
    assert "lazy" in table.target_dropdown.options
    table.target_dropdown.value = "lazy"
    table.move_all_button.click()
    assert ip.user_ns["v"].device.type == "lazy" and column(table, "v") == "lazy:0"
    assert not table.undo_button.disabled

    table.undo_button.click()

    assert not is_error(table), status_text(table)
    assert status_text(table).startswith("Moved 2 objects") and "to cpu" in status_text(table)
    assert ip.user_ns["v"].device.type == "cpu" and torch.equal(ip.user_ns["v"], values)
    assert ip.user_ns["model"] is model and torch.equal(model.weight.detach(), weight)
    assert column(table, "v") == "cpu" and column(table, "model") == "cpu"
    assert table.undo_button.disabled  # the stack is empty again
    assert table.progress.value == table.progress.max > 0


# --------------------------------------------------------------------------------------------
# Targets that are not available


def test_unavailable_targets_are_not_offered(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    ip.user_ns["x"] = torch.ones(3)
    table = make_table()  # allow_meta_target is False
    options = table.target_dropdown.options
    assert "meta" not in options
    assert "meta" not in table.target_note.value  # meta is off, not advertised
    if not HAS_CUDA:
        assert options == ("cpu",)
        assert "cuda: this kernel has no accelerator" in table.target_note.value
    with pytest.raises(Exception, match="Invalid selection"):  # the Dropdown refuses it
        table.target_dropdown.value = "meta"
    table.target_dropdown.value = "cpu"
    # everything is on the only target already: no row button can be pressed
    assert table.row_buttons["x"].disabled
    assert table.row_buttons["x"].tooltip == "x is already on cpu"
    table.move_all_button.click()
    assert status_text(table).startswith("Nothing to move to cpu")
    assert ip.user_ns["x"].device.type == "cpu"


def test_turning_meta_off_takes_it_out_of_the_dropdown(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    ip.user_ns["x"] = torch.ones(3)
    session.config.allow_meta_target = True
    table = make_table(live=True)
    table.target_dropdown.value = "meta"
    assert not table.row_buttons["x"].disabled
    session.config.allow_meta_target = False  # the session refreshes its live views
    target = table.target_dropdown.value
    assert "meta" not in table.target_dropdown.options
    assert target == ("cuda:0" if HAS_CUDA else "cpu")  # back to the default
    assert table.move_all_button.description == f"Move all to {target}"
    assert table.row_buttons["x"].description == f"→ {target}"


def test_a_target_that_disappeared_since_rendering_is_not_moved_to(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable], monkeypatch: pytest.MonkeyPatch
) -> None:
    ip.user_ns["x"] = torch.ones(3)
    session.config.allow_meta_target = True
    table = make_table()
    table.target_dropdown.value = "meta"
    # the dropdown still shows meta, but by the time of the click it is no longer enabled
    monkeypatch.setattr(type(session), "targets", lambda self: [Target("cpu", True, "")])
    table.move_all_button.click()
    table.row_buttons["x"].click()
    assert ip.user_ns["x"].device.type == "cpu"
    assert is_error(table) and "meta is not an available target" in status_text(table)
    assert session.undo_stack == []


# --------------------------------------------------------------------------------------------
# Refusals and failures: a status line, never a traceback


def test_refused_move_shows_the_numbers_and_changes_nothing(
    ip: Any, small: dict[str, Any], make_table: Callable[..., DeviceTable], monkeypatch
) -> None:
    # the engine's own free-memory check, told the target has 100 bytes free
    monkeypatch.setattr(moves, "move", functools.partial(moves.move, free_bytes=100))
    before = {name: ip.user_ns[name] for name in ("x", "model", "batch")}
    table = make_table()
    table.target_dropdown.value = "meta"

    table.move_all_button.click()

    assert is_error(table)
    assert status_text(table) == ("MoveError: needs 480 B, 100 B free on meta — nothing was moved")
    for name, obj in before.items():
        assert ip.user_ns[name] is obj
    assert ip.user_ns["x"].device.type == "cpu" and ip.user_ns["model"].weight.device.type == "cpu"
    assert column(table, "x") == "cpu" and column(table, "model") == "cpu"
    assert table.undo_button.disabled
    assert table.progress.bar_style == "danger"
    assert not table.move_all_button.disabled  # the table is usable again

    table.row_buttons["x"].click()  # 400 B do not fit either
    assert status_text(table) == "MoveError: needs 400 B, 100 B free on meta — nothing was moved"
    assert ip.user_ns["x"] is before["x"]


class Exploding(nn.Linear):
    """A module whose move fails part-way (after the check): the engine rolls back."""

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        raise RuntimeError("the device <b>went away</b>")


def test_failed_move_is_reported_and_rolled_back(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    session.config.allow_meta_target = True
    bad = Exploding(2, 2)
    ip.user_ns.update(bad=bad, x=torch.ones(3))
    table = make_table()
    table.target_dropdown.value = "meta"

    table.move_all_button.click()

    assert is_error(table)
    assert table.status.value == (
        '<span style="color:#b91c1c">Nothing was moved: bad: RuntimeError: '
        "the device &lt;b&gt;went away&lt;/b&gt;</span>"
    )
    assert table.progress.bar_style == "danger" and table.undo_button.disabled
    assert ip.user_ns["x"].device.type == "cpu" and ip.user_ns["bad"].weight.device.type == "cpu"
    assert column(table, "x") == "cpu"


def test_any_exception_from_the_session_becomes_a_status_line(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable], monkeypatch
) -> None:
    ip.user_ns["x"] = torch.ones(3)
    session.config.allow_meta_target = True
    table = make_table()
    table.target_dropdown.value = "meta"

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("kaboom <script>")

    monkeypatch.setattr(session, "move", broken)
    table.move_all_button.click()
    assert table.status.value.endswith("RuntimeError: kaboom &lt;script&gt;</span>")
    assert is_error(table)
    monkeypatch.setattr(session, "full_scan", broken)
    table.refresh_button.click()
    assert "RuntimeError: kaboom &lt;script&gt;" in table.status.value
    assert not table.refresh_button.disabled and not table.move_all_button.disabled


# --------------------------------------------------------------------------------------------
# Paging and sorting


@pytest.fixture
def ten_thousand(ip: Any, session: Any) -> dict[str, Any]:
    objects = {f"t{i:05d}": torch.ones(i % 97 + 1) for i in range(10_000)}
    ip.user_ns.update(objects)
    return objects


def test_ten_thousand_objects_render_one_page(
    ten_thousand: dict[str, Any], make_table: Callable[..., DeviceTable]
) -> None:
    before = len(widget_module._instances)
    table = make_table()
    created = len(widget_module._instances) - before

    assert len(table.rendered_rows()) == 50
    assert table.page_label.value == "rows 1–50 of 10,000"
    assert len(table.row_checkboxes) == 50 and len(table.row_buttons) == 50
    assert len(table.grid.children) == 3 + 50 * 3  # header + (checkbox, button, cells) a row
    assert table.prev_button.disabled and not table.next_button.disabled
    # size order (default): 97 elements of float32 first, names breaking ties
    assert table.rendered_rows()[0][5] == "388 B"
    assert names(table)[:2] == ["t00096", "t00193"]

    # the widget count follows the page size, not the namespace
    small = make_table(page_size=50)
    assert created < 400
    assert len(widget_module._instances) - before == 2 * created

    table.next_button.click()
    assert table.page_label.value == "rows 51–100 of 10,000"
    assert len(table.rendered_rows()) == 50
    assert not table.prev_button.disabled
    assert small.page == 0  # pages are per table


def test_last_page_is_partial_and_next_stops(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    ip.user_ns.update({f"t{i:02d}": torch.ones(1) for i in range(12)})
    table = make_table(page_size=5, include_hidden=False, live=True)
    table.sort_dropdown.value = "name"
    seen = []
    labels = []
    for _ in range(3):
        seen += names(table)
        labels.append(table.page_label.value)
        table.next_button.click()
    assert labels == ["rows 1–5 of 12", "rows 6–10 of 12", "rows 11–12 of 12"]
    assert seen == [f"t{i:02d}" for i in range(12)]
    assert table.next_button.disabled and table.page == 2
    assert len(table.grid.children) == 3 + 2 * 3
    ip.run_cell("del t10, t11")  # the page it was on is gone: back to the last page
    assert table.page_label.value == "rows 6–10 of 10"


def test_sorting_by_name_size_and_device(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    session.config.allow_meta_target = True
    ip.user_ns.update(
        b_small=torch.ones(1),
        a_big=torch.ones(1000),
        c_meta=torch.ones(500, device="meta"),
        d_mid=torch.ones(100),
    )
    table = make_table()
    assert names(table) == ["a_big", "d_mid", "b_small", "c_meta"]  # size: real bytes
    table.sort_dropdown.value = "name"
    assert names(table) == ["a_big", "b_small", "c_meta", "d_mid"]
    table.sort_dropdown.value = "device"
    assert names(table) == ["a_big", "d_mid", "b_small", "c_meta"]
    assert [row[2] for row in table.rendered_rows()] == ["cpu", "cpu", "cpu", "meta"]
    table.sort_dropdown.value = "size"
    assert names(table)[0] == "a_big"


# --------------------------------------------------------------------------------------------
# What the table shows


def test_module_and_container_rows_show_their_summary(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    ip.user_ns.update(net=nn.Linear(10, 10), many=[torch.ones(2) for _ in range(20)])
    table = make_table()
    assert column(table, "net", 4) == "110 params" and column(table, "net", 1) == "Linear"
    assert column(table, "many", 4) == "20 items"
    assert column(table, "many", 1) == "list[Tensor]"
    (many,) = [row for row in table.rows() if row.name == "many"]
    assert many.status == "20 Tensor objects"


def test_header_shows_each_device_and_mixed_warnings(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    model = nn.Linear(4, 4)
    model.bias = nn.Parameter(torch.zeros(4, device="meta"))
    ip.user_ns.update(model=model, big=torch.ones(256))
    table = make_table()
    rows = {box.children[0].value: box.children for box in table.totals.children}
    assert set(rows) == {"<b>cpu</b>", "<b>meta</b>"}
    cpu_bar, cpu_text = rows["<b>cpu</b>"][1], rows["<b>cpu</b>"][2].value
    assert isinstance(cpu_bar, ipywidgets.FloatProgress)
    assert cpu_bar.value == cpu_bar.max == 1.0  # the largest device: a full bar
    assert "1.1 KiB" in cpu_text
    assert rows["<b>meta</b>"][1].value == 0
    assert "0 B (meta; needs 16 B)" in rows["<b>meta</b>"][2].value
    assert "model spans cpu, meta" in table.warnings.value
    assert table.warnings.layout.display is None  # shown


def test_everything_shown_is_escaped(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    hostile = type("<img src=x onerror=alert(1)>", (torch.Tensor,), {})
    module = nn.Linear(2, 2)
    module.bias = nn.Parameter(torch.zeros(2, device="meta"))  # spans devices: a warning
    ip.user_ns.update(
        {
            "weird": torch.Tensor._make_subclass(hostile, torch.ones(2)),
            "batch": {"<script>alert(1)</script>": torch.ones(3)},
            "<b>m</b>": module,
        }
    )
    table = make_table()
    assert "weird" in names(table)
    assert column(table, "weird", 1) == "<img src=x onerror=alert(1)>"  # the data is raw...
    shown = grid_html(table) + table.warnings.value
    assert "&lt;img src=x onerror=alert(1)&gt;" in shown  # ...what is rendered is escaped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown
    assert "&lt;b&gt;m&lt;/b&gt; spans cpu, meta" in table.warnings.value
    for tag in ("<img", "<script", "<b>m"):
        assert tag not in shown


def test_hidden_rows_are_listed_only_on_request_and_never_movable(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    session.config.allow_meta_target = True
    ip.run_cell("torch.ones(7)", store_history=True)  # kept alive only by the output history
    plain = make_table()
    assert not any("output history" in row.status for row in plain.rows())
    try:
        table = make_table(include_hidden=True)
        table.target_dropdown.value = "meta"
        hidden = [row for row in table.rows() if "output history" in row.status]
        assert [row.shape for row in hidden] == ["(7)"]
        label = hidden[0].name
        assert label not in table.row_checkboxes
        assert table.row_buttons[label].disabled
        assert "output history" in table.row_buttons[label].tooltip
    finally:
        ip.displayhook.flush()  # drop Out and _ (the ip fixture does it too)


def test_a_static_table_keeps_its_moment_and_a_live_one_follows_cells(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    frozen = make_table(as_of=7)
    assert "as of [7]" in frozen.stamp.value
    table = make_table(live=True)
    assert "live" in table.stamp.value
    assert "y" not in names(table)
    ip.run_cell("y = torch.ones(3)")
    assert "y" in names(table) and column(table, "y", 4) == "(3)"
    ip.run_cell("y = torch.ones(5, 5)")
    assert column(table, "y", 4) == "(5, 5)"
    ip.run_cell("del y")
    assert "y" not in names(table)
    assert "y" not in names(frozen)
    ip.user_ns["y"] = torch.ones(2)
    frozen.refresh_button.click()  # its own button: it changes, and says so
    assert "y" in names(frozen)
    assert "refreshed by its button" in frozen.stamp.value


def test_without_torch_objects_the_table_says_so(
    session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    table = make_table()
    assert table.rendered_rows() == []
    assert "No tensors, modules or optimizers" in table.message.value
    assert table.page_label.value == "no rows"
    assert table.next_button.disabled and table.prev_button.disabled


def test_close_closes_every_widget_it_made(ip: Any, small: dict[str, Any], session: Any) -> None:
    before = len(widget_module._instances)
    table = DeviceTable(session)
    assert len(widget_module._instances) > before
    table.close()
    assert len(widget_module._instances) == before
    ip.run_cell("z = torch.ones(2)")  # a closed table ignores later refreshes
    assert "z" not in names(table)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
def test_move_all_to_cuda_and_back(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    values = torch.arange(1000.0)
    ip.user_ns.update(v=values, model=nn.Linear(8, 8))
    table = make_table()
    assert table.target_dropdown.value == "cuda:0"
    table.move_all_button.click()
    assert not is_error(table), status_text(table)
    assert ip.user_ns["v"].device.type == "cuda" and column(table, "v") == "cuda:0"
    # CUDA is initialised now: its bar is drawn against the device's capacity
    rows = {box.children[0].value: box.children for box in table.totals.children}
    bar = rows["<b>cuda:0</b>"][1]
    assert bar.max == torch.cuda.get_device_properties(0).total_memory
    assert (
        " of " in rows["<b>cuda:0</b>"][2].value and "allocated" in rows["<b>cuda:0</b>"][2].value
    )
    table.undo_button.click()
    assert ip.user_ns["v"].device.type == "cpu" and torch.equal(ip.user_ns["v"], values)
    assert column(table, "v") == "cpu"
