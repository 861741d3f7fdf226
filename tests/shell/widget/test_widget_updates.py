"""What a live DeviceTable sends its frontend after a cell: a row that moves on the page keeps
its row widgets (the grid is reordered), so a cell that changes one row sends that row, not the
whole page; the buttons and checkboxes still act on the row they show."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import ipywidgets
import pytest
import torch
from tablereading import names

from torchdevice_magic.shell.widget import DeviceTable


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Any, Any]]]:
    """Every state update a widget sends its frontend: (widget, the traits it sends)."""
    updates: list[tuple[Any, Any]] = []
    send_state = ipywidgets.Widget.send_state

    def recording(widget: Any, key: Any = None) -> None:
        updates.append((widget, key))
        send_state(widget, key)

    monkeypatch.setattr(ipywidgets.Widget, "send_state", recording)
    yield updates


def test_a_row_entering_the_page_sends_that_row_not_the_page(
    ip: Any,
    session: Any,
    make_table: Callable[..., DeviceTable],
    sent: list[tuple[Any, Any]],
) -> None:
    ip.user_ns.update({f"t{i:02d}": torch.ones(10 + i) for i in range(60)})
    table = make_table(live=True)
    page = names(table)
    assert len(page) == 50 and page[0] == "t59"
    rows = {id(w) for w in table.grid.children[3:]}  # past the header: 50 rows' widgets
    sent.clear()
    ip.run_cell("big = torch.ones(100)")  # first by size: every other row moves down one
    assert names(table) == ["big", *page[:49]]
    row_updates = [widget for widget, _ in sent if id(widget) in rows]
    # the slot of the row that left the page shows the new one: its cells, its checkbox's and
    # its button's tooltips; the other 49 rows send nothing (their text did not change)
    assert len(row_updates) <= 3, [(type(w).__name__, key) for w, key in sent]
    assert sum(widget is table.grid for widget, _ in sent) == 1  # the order, once
    # a wider size ("3.9 KiB") widens the column: every row once; narrower again, only its row
    ip.run_cell("big = torch.ones(1000)")
    sent.clear()
    ip.run_cell("big = torch.ones(100)")
    assert [w for w, _ in sent if id(w) in rows] == [table.grid.children[4]]
    # the widgets act on the row they show
    grid = table.grid.children
    assert grid[3] is table.row_checkboxes["big"] and grid[5] is table.row_buttons["big"]
    assert "big" in grid[4].value
    table.row_checkboxes["t20"].value = True
    assert table.selected == ["t20"]
    ip.run_cell("del big")
    assert names(table) == page and table.selected == ["t20"]
    assert table.row_checkboxes["t20"].value


def test_a_row_button_moves_the_row_it_shows_after_the_page_moved(
    ip: Any,
    session: Any,
    make_table: Callable[..., DeviceTable],
) -> None:
    session.config.allow_meta_target = True
    ip.user_ns.update({f"t{i:02d}": torch.ones(10 + i) for i in range(5)})
    # on meta already: a row moved there widens no column (every row would be drawn again)
    ip.user_ns["on_meta"] = torch.ones(100, device="meta")
    table = make_table(live=True)
    ip.run_cell("big = torch.ones(1000)")
    table.target_dropdown.value = "meta"
    table.row_buttons["t02"].click()
    assert ip.user_ns["t02"].device.type == "meta"
    assert ip.user_ns["big"].device.type == "cpu" and ip.user_ns["t03"].device.type == "cpu"
    # while the move ran every row's button was disabled; the rows it did not touch are
    # enabled again, though their text did not change
    assert not table.row_buttons["t03"].disabled and not table.row_buttons["big"].disabled
    assert table.row_buttons["t02"].disabled  # already on meta
    # a click that moves nothing (a meta tensor holds no data) draws no row while it runs:
    # every button it disabled is enabled again all the same
    table.row_buttons["t02"].click()
    assert "cannot be moved" in table.status.value
    assert not table.row_buttons["t03"].disabled and not table.row_buttons["big"].disabled
