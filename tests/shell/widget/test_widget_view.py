"""What DeviceTable (the ipywidgets table of ``%devices``) shows, in an in-process IPython
shell: one page of many rows, paging, sorting, summaries, the per-device header, escaping,
hidden rows, a table's moment versus a live table, closing, and the CUDA round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets
import pytest
import torch
from ipywidgets.widgets import widget as widget_module
from tablereading import column, grid_html, is_error, names, status_text
from torch import nn

from torchdevice_magic.shell.widget import DeviceTable
from torchdevice_magic.units import format_bytes

HAS_CUDA = torch.cuda.is_available()


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


def test_an_optimizer_without_state_shows_its_parameters_device_in_words(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    net = nn.Linear(2, 2)
    ip.user_ns.update(net=net, adam=torch.optim.Adam(net.parameters()))
    table = make_table()
    assert column(table, "adam") == "cpu (params; no state yet)"
    assert column(table, "net") == "cpu"


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
    table = DeviceTable(session.app)
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
    # CUDA is initialised now: its bar is filled to the share of the device's capacity that
    # the names hold (a bar of its own size would be full), its figures say of how much
    rows = {box.children[0].value: box.children for box in table.totals.children}
    _name, bar, figures = rows["<b>cuda:0</b>"]
    capacity = torch.cuda.get_device_properties(0).total_memory
    held = values.nbytes + sum(p.nbytes for p in ip.user_ns["model"].parameters())
    assert bar.max == 1.0 and bar.value == pytest.approx(held / capacity)
    assert f"{format_bytes(held)} of {format_bytes(capacity)} (allocated " in figures.value
    table.undo_button.click()
    assert ip.user_ns["v"].device.type == "cpu" and torch.equal(ip.user_ns["v"], values)
    assert column(table, "v") == "cpu"
