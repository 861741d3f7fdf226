"""The JSON views in tests/fixtures/ that the sidebar's jest tests draw are produced by the
kernel code (scan -> viewmodel -> protocol.snapshot); this test rebuilds them and checks the
committed files are exactly what the kernel produces. Rewrite them with UPDATE_FIXTURES=1."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import torchdevice_magic as tdm
from torchdevice_magic import devices, moves, protocol
from torchdevice_magic.viewmodel import Target

FIXTURES = Path(__file__).parent / "fixtures"


def cpu_only_targets(monkeypatch, allow_meta=True):
    # the targets of a kernel without accelerators, whatever this machine has
    monkeypatch.setattr(devices, "accelerator_type", lambda: None)
    return [Target(*t) for t in moves.available_devices(allow_meta)]


def basic_namespace():
    torch.manual_seed(0)
    kept = torch.zeros(256)
    return {
        "x": torch.zeros(8192),
        "model": torch.nn.Linear(32, 40),
        "y": torch.zeros(128),
        "batch": [torch.zeros(1024), torch.zeros(16)],
        "Out": {2: torch.zeros(64), 3: kept},
        "kept": kept,
    }


def mixed_namespace():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 16))
    model[1].to("meta")
    return {
        "model": model,
        "x": torch.zeros(2048),
        "w": torch.zeros(512, device="meta"),
        "labels": torch.zeros(32, dtype=torch.long),
    }


def build(name, monkeypatch):
    if name == "view_empty":
        inventory = tdm.Inventory({}, [], [], set(), torch_imported=False)
        return protocol.snapshot(inventory, seq=0, targets=[], default_target=None)
    targets = cpu_only_targets(monkeypatch)
    if name == "view_basic":
        inventory = tdm.scan(basic_namespace(), include_hidden=True)
        return protocol.snapshot(inventory, seq=3, targets=targets, default_target="meta")
    inventory = tdm.scan(mixed_namespace())
    return protocol.snapshot(
        inventory, seq=7, targets=targets, default_target="meta", device_notes=DEVICE_NOTES
    )


#: what the header says of an initialised CUDA device (the sidebar draws these lines as sent)
DEVICE_NOTES = (
    "CUDA was first initialised by cell [3], line 2: model = model.cuda()",
    "cuda:0: 6.5 GiB used of 80.0 GiB (what nvidia-smi shows) = 256.0 MiB in your variables + "
    "768.0 MiB in tensors held outside them (%devices --holders) + 5.0 GiB cached by PyTorch's "
    "allocator (torch.cuda.empty_cache() returns it) + 512.0 MiB this process's CUDA context "
    "and other processes",
)


def delta_sequence():
    """A view, the deltas a few cells produce, and the fresh view at the end (the jest test
    applies the deltas the way the sidebar does and must reach the fresh view exactly)."""
    from torchdevice_magic.viewmodel import LiveWindow, WindowSpec

    torch.manual_seed(0)
    namespace = {f"x{i}": torch.zeros(i * 16 + 1) for i in range(1, 8)}
    spec = WindowSpec(limit=5)
    inventory = tdm.scan(namespace)
    live = LiveWindow(spec)
    # the inventory itself, as the sidebar's channel passes it: deltas from the head's edits
    first = live.reset(inventory, spec, "meta")
    messages, seq = [], 1
    for change in (
        {"x1": torch.zeros(4096)},  # into the top of the window
        {"x9": torch.zeros(8)},  # a new name outside the window
        {"x7": torch.zeros(2)},  # out of the window
        {"x3": None},  # deleted
    ):
        for name, value in change.items():
            if value is None:
                del namespace[name]
            else:
                namespace[name] = value
        inventory = tdm.scan(namespace, previous=inventory, changed=tuple(change))
        delta = live.update(inventory)
        if delta is not None:
            messages.append(
                protocol.envelope(
                    "delta",
                    seq=seq + 1,
                    base=seq,
                    header=None,
                    window=delta.to_wire(),
                    last_action=None,
                    timeline=None,
                )
            )
            seq += 1
    from torchdevice_magic.viewmodel import window

    final = window(inventory.records, spec, "meta")
    return {"first": first.to_wire(), "deltas": messages, "final": final.to_wire()}


GENERATED = ["view_basic", "view_mixed", "view_empty"]

#: Bytes held after each cell of the timeline fixture: sizes where two formatters part ways
#: (1,280 B is 1.25 KiB: Python's format_bytes writes 1.2, JavaScript's toFixed(1) 1.3) among
#: plain ones. The sidebar's jest test draws the fixture and must show the kernel's text.
TIMELINE_BYTES = (0, 512, 1023, 1024, 1280, 5376, 2560, 1_310_720, 1_572_864, 5 * 1024**3 + 1)


def timeline_message():
    from torchdevice_magic.memory import CellMemory

    rows, held = [], 0
    for cell, nbytes in enumerate(TIMELINE_BYTES, start=1):
        change = nbytes - held
        row = CellMemory(
            cell=cell,
            device="cpu",
            bytes=nbytes,
            delta=change,
            peak=nbytes + 256 if cell % 3 == 0 else None,
            changes=((f"x{cell}", change),) if change else (),
            note="del x freed nothing" if change < 0 else "",
            outside=nbytes // 5 if cell % 2 == 0 else 0,
        )
        rows.append(row.to_dict())
        held = nbytes
    return protocol.timeline(rows, seq=5)


@pytest.mark.parametrize("name", GENERATED)
def test_committed_fixture_is_what_the_kernel_produces(name, monkeypatch):
    snapshot = json.loads(json.dumps(build(name, monkeypatch)))
    protocol.check_message(snapshot)
    path = FIXTURES / f"{name}.json"
    if os.environ.get("UPDATE_FIXTURES") == "1":
        path.write_text(json.dumps(snapshot, indent=2) + "\n")
    assert json.loads(path.read_text()) == snapshot


def test_generated_fixtures_cover_what_the_sidebar_must_show(monkeypatch):
    basic = build("view_basic", monkeypatch)
    names = {row["name"]: row for row in basic["window"]["rows"]}
    assert "output history" in names["Out[2]"]["status"]
    assert not names["Out[2]"]["selectable"] and not names["Out[2]"]["action"]["enabled"]
    # only the row the output history alone holds is marked hidden (the sidebar dims it)
    assert [name for name, row in names.items() if row["hidden"]] == ["Out[2]"]
    assert "Out[3]" not in names  # also reachable as `kept`: not hidden
    assert names["batch[0]"]["root"] == "batch"
    assert any(t["device"] == "cuda" and not t["enabled"] for t in basic["header"]["targets"])
    mixed = build("view_mixed", monkeypatch)
    assert mixed["header"]["warnings"] == ["model spans cpu, meta"]
    # a row that spans devices keeps its other notes (they were dropped with "spans")
    (model,) = [row for row in mixed["window"]["rows"] if row["name"] == "model"]
    assert model["status"] == "spans cpu, meta; meta parameters (no data)"
    assert {bar["device"] for bar in mixed["header"]["bars"]} == {"cpu", "meta"}
    assert mixed["header"]["device_notes"] == list(DEVICE_NOTES)


def test_delta_fixture_is_what_the_kernel_produces():
    sequence = json.loads(json.dumps(delta_sequence()))
    for message in sequence["deltas"]:
        protocol.check_message(message)
    assert len(sequence["deltas"]) >= 3
    path = FIXTURES / "deltas.json"
    if os.environ.get("UPDATE_FIXTURES") == "1":
        path.write_text(json.dumps(sequence, indent=2) + "\n")
    assert json.loads(path.read_text()) == sequence


def test_timeline_fixture_is_what_the_kernel_produces():
    message = json.loads(json.dumps(timeline_message()))
    protocol.check_timeline(message)
    path = FIXTURES / "timeline.json"
    if os.environ.get("UPDATE_FIXTURES") == "1":
        path.write_text(json.dumps(message, indent=2) + "\n")
    assert json.loads(path.read_text()) == message
    # the size where JavaScript's rounding differs is in it, as format_bytes writes it
    by_cell = {row["cell"]: row for row in message["rows"]}
    assert by_cell[TIMELINE_BYTES.index(1280) + 1]["tooltip"].startswith("cell 5, cpu: 1.2 KiB ")


def test_every_fixture_matches_the_schema():
    files = sorted(FIXTURES.glob("view_*.json"))
    assert {f.stem for f in files} >= set(GENERATED)
    for path in files:
        protocol.check_message(json.loads(path.read_text()))
