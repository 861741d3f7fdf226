"""What the view says of models the real accelerate package offloaded: the row shows where the
weights are (never "0 B (meta; needs ...)" nor "+... on meta"), the header gives disk its own
total apart from RAM, no warning is raised, and the row's button says why it cannot move."""

from __future__ import annotations

from pathlib import Path

import torch
from offloadmodels import cpu_offloaded, disk_offloaded, dispatched

from torchdevice_magic import scan
from torchdevice_magic import viewmodel as vm
from torchdevice_magic.viewmodel import Target, WindowSpec

CPU_AND_META = (Target("cpu", True, ""), Target("meta", True, ""))


def _rows(namespace: dict) -> tuple[vm.Header, dict[str, vm.Row]]:
    inventory = scan(namespace)
    head = vm.header(inventory, CPU_AND_META)
    window = vm.window(inventory.records, WindowSpec(), head.target)
    return head, {row.name: row for row in window.rows}


def test_rows_say_where_the_offloaded_weights_are(tmp_path: Path) -> None:
    head, rows = _rows(
        {
            "on_cpu": cpu_offloaded(),
            "on_disk": disk_offloaded(tmp_path / "a"),
            "mapped": dispatched(tmp_path / "b"),
        }
    )
    assert (rows["on_cpu"].device, rows["on_cpu"].size) == ("cpu", "32.5 KiB")
    assert rows["on_cpu"].status.startswith("offloaded: cpu 32.5 KiB")
    assert (rows["on_disk"].device, rows["on_disk"].size) == ("disk", "32.5 KiB")
    assert rows["on_disk"].status.startswith("offloaded: disk 32.5 KiB (memory-mapped)")
    assert (rows["mapped"].device, rows["mapped"].size) == ("cpu, disk", "32.5 KiB")
    assert rows["mapped"].status.startswith("offloaded: disk 16.2 KiB (memory-mapped)")
    for row in rows.values():
        assert "meta" not in row.size and "meta" not in row.status
        assert not row.selectable and not row.action.enabled
        assert "accelerate's hooks own its placement" in row.action.reason
    assert head.warnings == ()


def test_header_gives_disk_its_own_total_apart_from_ram(tmp_path: Path) -> None:
    head, _ = _rows({"model": disk_offloaded(tmp_path), "x": torch.ones(256)})
    bars = {bar.device: bar for bar in head.bars}
    assert list(bars) == ["cpu", "disk"]
    assert bars["cpu"].text == "1.0 KiB" and bars["cpu"].fraction == 1.0
    assert bars["disk"].text == "32.5 KiB (memory-mapped offload files, not in RAM)"
    assert bars["disk"].bytes == 33280 and bars["disk"].fraction == 0.0
    assert head.move_all.enabled  # x can move; the model is left to accelerate
