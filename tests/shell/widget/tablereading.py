"""Reading what a widget table shows: row names, a row's cell, the grid's HTML, the status."""

from __future__ import annotations

import re

import ipywidgets

from torchdevice_magic.shell.widget import DeviceTable


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
