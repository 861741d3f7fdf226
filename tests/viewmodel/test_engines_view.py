"""viewmodel/engines.py: an engine's summary is plain data from its records and totals, and the
client's table puts the answers together (one row per engine x device, missing engines named)."""

from __future__ import annotations

import json

import pytest
import torch

from torchdevice_magic.records import NO_STATE_YET, DeviceTotal, Record
from torchdevice_magic.viewmodel.engines import (
    EngineAnswer,
    Gathered,
    engine_summary,
    object_rows,
)


def _record(name: str, devices: tuple[str, ...], nbytes: int, kind: str = "tensor") -> Record:
    return Record(name=name, root=name.split(".")[0], kind=kind, type="Tensor", devices=devices,
                  bytes=nbytes)  # fmt: skip


RECORDS = [
    _record("w", ("cuda:1",), 4000),
    _record("x", ("cpu",), 64),
    _record("model", ("cpu", "cuda:1"), 500, kind="module"),
    _record("model.fc", ("cuda:1",), 400, kind="module"),  # a child row is not a name
]
TOTALS = [
    DeviceTotal("cpu", 164, 164),
    DeviceTotal("cuda:1", 4400, 4400, allocated=5000, reserved=6000, capacity=80_000),
]


def test_a_summary_counts_names_per_device_and_keeps_the_allocator_figures() -> None:
    summary = engine_summary(RECORDS, TOTALS, rank=1, host="node-a", pid=42)
    assert summary["devices"] == {"cpu": [164, 2], "cuda:1": [4400, 2]}
    assert summary["memory"] == {"cuda:1": [5000, 6000, 80_000]}
    assert summary["objects"] == 3
    assert (summary["rank"], summary["host"], summary["pid"]) == (1, "node-a", 42)
    assert json.loads(json.dumps(summary)) == summary  # plain data only


def test_object_rows_are_the_names_biggest_first_up_to_the_limit() -> None:
    assert object_rows(RECORDS) == [
        ["w", "tensor", "Tensor", "cuda:1", 4000, "cuda:1", "", ""],
        ["model", "module", "Tensor", "cpu, cuda:1", 500, "cpu, cuda:1", "", ""],
        ["x", "tensor", "Tensor", "cpu", 64, "cpu", "", ""],
    ]
    assert [row[0] for row in object_rows(RECORDS, limit=1)] == ["w"]


def test_the_table_has_a_row_per_engine_and_device_and_names_the_silent_engines() -> None:
    summary = engine_summary(RECORDS, TOTALS, rank=1, host="node-a", pid=42)
    empty = engine_summary([], [], rank=0, host="node-a", pid=41)
    gathered = Gathered(
        [EngineAnswer(1, summary), EngineAnswer(0, empty)],
        {2: "no answer within 2 s (busy: 1 of your requests not finished yet)"},
    )
    rows = gathered.rows()
    assert [(r["engine"], r["device"]) for r in rows] == [
        (0, None), (1, "cpu"), (1, "cuda:1"), (2, None)
    ]  # fmt: skip
    assert (rows[2]["used"], rows[2]["total"]) == (5000, 80_000)
    assert rows[3]["status"].startswith("no answer")
    text = gathered.text()
    assert "4.9 KiB / 78.1 KiB" in text
    assert text.splitlines()[-1] == (
        "engine 2 is not in the table: no answer within 2 s (busy: 1 of your requests not "
        "finished yet)"
    )
    frame = gathered.to_frame()
    assert frame.attrs["missing"] == {2: gathered.missing[2]}
    assert frame.engine.tolist() == [0, 1, 1, 2]


def test_expanded_objects_are_listed_and_escaped_in_html() -> None:
    summary = engine_summary(RECORDS, TOTALS, rank=None, host="<b>", pid=1)
    rows = [["<x>", "tensor", "Tensor", "cpu", 64]]
    gathered = Gathered([EngineAnswer(3, summary, rows)])
    assert "engine 3:\n  <x>  Tensor  cpu  64 B" in gathered.text()
    html = gathered._repr_html_()
    assert "&lt;x&gt;" in html and "&lt;b&gt;" in html and "<x>" not in html
    frame = gathered.to_frame(objects=True)
    assert frame.name.tolist() == ["<x>"]


def test_the_objects_frame_names_devices_only_as_devices_o_does() -> None:
    """``%devices --engines N -o``: the device column is for filtering; the words the tables
    add (an optimizer without state names its parameters' device) go to param_devices and
    note, as in ``%devices -o``."""
    from torchdevice_magic import scan

    model = torch.nn.Linear(2, 2)
    namespace = {"model": model, "opt": torch.optim.Adam(model.parameters()), "x": torch.ones(3)}
    inventory = scan(namespace)
    totals = inventory.device_totals()
    summary = engine_summary(inventory.records, totals, rank=0, host="h", pid=1)
    gathered = Gathered([EngineAnswer(0, summary, object_rows(inventory.records))])
    frame = gathered.to_frame(objects=True).set_index("name")
    local = inventory.to_frame().set_index("name")
    for column in ("device", "param_devices", "note"):
        assert frame[column].to_dict() == local[column].to_dict(), column
    assert frame.loc["opt", "device"] == "" and frame.loc["opt", "param_devices"] == "cpu"
    assert frame.loc["opt", "note"] == NO_STATE_YET
    assert sorted(frame[frame.device == "cpu"].index) == ["model", "x"]
    # the tables still say where the optimizer's parameters are, in words
    assert "opt  Adam  cpu (params; no state yet)" in gathered.text()
    assert json.loads(json.dumps(summary)) == summary


def test_an_initialised_accelerator_shows_the_memory_no_name_holds(monkeypatch) -> None:
    from torchdevice_magic.devices import MemoryFigures
    from torchdevice_magic.viewmodel import engines

    figures = {
        "cuda:0": MemoryFigures(4000, 8000, None, 80_000),  # shown with its names already
        "cuda:1": MemoryFigures(0, 0, None, 80_000),  # another rank's GPU: nothing of ours
        "cuda:2": MemoryFigures(0, 2048, None, 80_000),  # freed tensors the allocator keeps
    }
    initialised = {"cuda": False}
    monkeypatch.setattr(engines, "accelerator_type", lambda: "cuda")
    monkeypatch.setattr(engines, "is_initialized", lambda kind: initialised[kind])
    monkeypatch.setattr(engines, "device_count", lambda kind: 3)
    monkeypatch.setattr(engines, "memory_figures", lambda device: figures[device])
    assert engines.accelerator_totals(["cpu", "cuda:0"]) == []  # never initialised by asking
    initialised["cuda"] = True
    assert engines.accelerator_totals(["cpu", "cuda:0"]) == [
        DeviceTotal("cuda:2", 0, 0, allocated=0, reserved=2048, capacity=80_000)
    ]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_freed_cuda_memory_the_allocator_keeps_is_reported_on_cuda() -> None:
    from torchdevice_magic.viewmodel.engines import accelerator_totals

    kept = torch.ones(1024, device="cuda")
    del kept  # the caching allocator keeps the block: reserved, not allocated
    [total] = [t for t in accelerator_totals(["cpu"]) if t.device == "cuda:0"]
    assert total.reserved and total.reserved >= 4096
    assert total.capacity == torch.cuda.get_device_properties(0).total_memory
    summary = engine_summary([], [total], rank=0, host="h", pid=1)
    assert summary["memory"]["cuda:0"][1] == total.reserved
