"""The memory chart's words (viewmodel/timeline.py): every size written by units.format_bytes,
the same text the tables and the sidebar show."""

from __future__ import annotations

import pytest

from torchdevice_magic import protocol
from torchdevice_magic.units import format_bytes
from torchdevice_magic.viewmodel import change_text, held_label, point_tooltip


def _row(**fields):
    row = {
        "cell": 3,
        "device": "cpu",
        "bytes": 50688,
        "delta": 0,
        "peak": None,
        "changes": [],
        "note": "",
        "outside": 0,
    }
    row.update(fields)
    return row


@pytest.mark.parametrize("nbytes", [0, 512, 1023, 1024, 1280, 5376, 1_310_720, 5 * 1024**3])
def test_every_size_is_format_bytes(nbytes):
    assert change_text(nbytes) == "+" + format_bytes(nbytes)
    if nbytes:
        assert change_text(-nbytes) == "-" + format_bytes(nbytes)
    assert held_label(_row(bytes=nbytes)).startswith(f"cpu: {format_bytes(nbytes)} held")


def test_1280_bytes_reads_as_the_kernel_writes_it():
    # 1.25 KiB: format_bytes rounds half to even (1.2); JavaScript's toFixed gives 1.3
    assert held_label(_row(bytes=1280, delta=1280)) == "cpu: 1.2 KiB held (+1.2 KiB last cell)"


def test_label_says_what_is_held_outside_the_variables():
    assert held_label(_row()) == "cpu: 49.5 KiB held (+0 B last cell)"
    assert held_label(_row(outside=5632)) == (
        "cpu: 49.5 KiB held, 5.5 KiB of it outside your variables (+0 B last cell)"
    )


def test_tooltip_says_the_change_the_peak_what_grew_and_the_note():
    text = point_tooltip(
        _row(
            cell=7,
            bytes=0,
            delta=-4096,
            peak=8192,
            changes=[["losses: 8 autograd graphs", 2048]],
            note="del x freed nothing of 4.0 KiB",
        )
    )
    assert text == (
        "cell 7, cpu: 0 B (-4.0 KiB), peak 8.0 KiB\n"
        "losses: 8 autograd graphs +2.0 KiB\n"
        "del x freed nothing of 4.0 KiB"
    )


def test_the_timeline_message_carries_the_words():
    message = protocol.timeline([{**_row(bytes=1280, delta=1280), "grew": "", "allocated": None}])
    (row,) = message["rows"]
    assert row["label"] == "cpu: 1.2 KiB held (+1.2 KiB last cell)"
    assert row["tooltip"] == "cell 3, cpu: 1.2 KiB (+1.2 KiB)"
