"""A model the real accelerate package offloaded, as the widget table and ``%devices`` show it:
where the weights are, a disk total apart from RAM, no "meta" anywhere, no warning, and a
disabled button that says accelerate's hooks own the placement."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.utils.capture import capture_output
from offloadmodels import disk_offloaded
from tablereading import column, status_text

from torchdevice_magic.shell.widget import DeviceTable


def test_widget_and_devices_show_where_offloaded_weights_are(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable], tmp_path: Path
) -> None:
    ip.user_ns["model"] = disk_offloaded(tmp_path)
    session.app.full_scan()
    table = make_table()
    assert column(table, "model") == "disk" and column(table, "model", 5) == "32.5 KiB"
    totals = {box.children[0].value: box.children[2].value for box in table.totals.children}
    assert set(totals) == {"<b>disk</b>"}
    assert "32.5 KiB (memory-mapped offload files, not in RAM)" in totals["<b>disk</b>"]
    assert table.warnings.layout.display == "none"
    button = table.row_buttons["model"]
    assert button.disabled and "accelerate's hooks own its placement" in button.tooltip
    assert "meta" not in status_text(table)
    with capture_output() as captured:
        ip.run_line_magic("devices", "")
    shown = "\n".join(o.data.get("text/plain", "") for o in captured.outputs)
    assert "disk: 32.5 KiB (memory-mapped offload files, not in RAM)" in shown
    assert "offloaded: disk 32.5 KiB (memory-mapped)" in shown and "meta" not in shown
