"""DeviceTable's buttons (the ipywidgets table of ``%devices``) in an in-process IPython shell:
move all, selected and one row, undo, targets, refusals and failures.

Buttons are pressed with ``Button.click()``; every test checks the namespace (what really
moved) and what the table shows. ``meta`` is the second device on machines without a GPU
(``session.config.allow_meta_target``); a move to meta cannot be undone (meta keeps no data),
so the undo round trip uses torch's ``lazy`` backend, a CPU-only device that keeps data, the
way the tests in tests/moves/ do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from tablereading import column, is_error, names, status_text
from torch import nn

import torchdevice_magic.moves as moves
from torchdevice_magic.shell.widget import DeviceTable
from torchdevice_magic.viewmodel import Target

HAS_CUDA = torch.cuda.is_available()


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


def test_status_names_each_skip_once(
    ip: Any, small: dict[str, Any], make_table: Callable[..., DeviceTable]
) -> None:
    # opt has no state yet: skipped with a reason the move's summary already gives
    table = make_table()
    table.target_dropdown.value = "meta"
    table.move_all_button.click()

    status = status_text(table)
    assert "opt (optimizer state is already with its parameters)" in status, status
    assert status.count("optimizer state is already with its parameters") == 1, status


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
    monkeypatch.setattr(type(session.app), "targets", lambda self: [Target("cpu", True, "")])
    table.move_all_button.click()
    table.row_buttons["x"].click()
    assert ip.user_ns["x"].device.type == "cpu"
    assert is_error(table) and "meta is not an available target" in status_text(table)
    assert session.app.undo_stack == []


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

    monkeypatch.setattr(session.app, "move", broken)
    table.move_all_button.click()
    assert table.status.value.endswith("RuntimeError: kaboom &lt;script&gt;</span>")
    assert is_error(table)
    monkeypatch.setattr(session.app, "full_scan", broken)
    table.refresh_button.click()
    assert "RuntimeError: kaboom &lt;script&gt;" in table.status.value
    assert not table.refresh_button.disabled and not table.move_all_button.disabled


def test_after_refresh_the_last_moves_status_is_marked_as_earlier_news(
    ip: Any, small: dict[str, Any], make_table: Callable[..., DeviceTable], monkeypatch
) -> None:
    """Refresh shows the namespace of now: the line saying what the last move did stays, but
    muted and marked as the last action before that refresh, not as what the table shows."""
    table = make_table()
    table.target_dropdown.value = "meta"
    table.move_all_button.click()
    moved = status_text(table)
    assert moved.startswith("Moved 3 objects") and "color:#166534" in table.status.value
    ip.user_ns["x"] = torch.ones(100)  # a new x on the cpu: the move is history
    monkeypatch.setattr(table.app, "cell_number", lambda: 12)  # the kernel's [12]
    table.refresh_button.click()
    assert column(table, "x") == "cpu"
    said = status_text(table)
    assert said == f"last action, before the refresh at [12]: {moved}"
    assert "color:#166534" not in table.status.value and not is_error(table)
    table.refresh_button.click()  # a second refresh: marked once, not twice
    assert status_text(table) == said
    table.move_all_button.click()  # new news is shown as news
    assert status_text(table).startswith("Moved 1 object")
