"""The JSON snapshots in tests/fixtures/ that the sidebar's jest tests render are produced by
the kernel code (scan -> protocol.snapshot); this test rebuilds them and checks the committed
files are exactly what the kernel produces. Rewrite them with UPDATE_FIXTURES=1.

snapshot_cuda.json cannot be produced on a machine without CUDA: it is checked against the
schema only (regenerate it on a GPU machine with UPDATE_FIXTURES=1)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import torchdevice_magic as tdm
from torchdevice_magic import devices, moves, protocol

FIXTURES = Path(__file__).parent / "fixtures"


def cpu_only_targets(monkeypatch, allow_meta=True):
    # the targets of a kernel without accelerators, whatever this machine has
    monkeypatch.setattr(devices, "accelerator_type", lambda: None)
    return [protocol.target(*t) for t in moves.available_devices(allow_meta)]


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
    if name == "snapshot_empty":
        inventory = tdm.Inventory({}, [], [], set(), torch_imported=False)
        return protocol.snapshot(inventory, seq=0, targets=[], default_target=None)
    targets = cpu_only_targets(monkeypatch)
    if name == "snapshot_basic":
        inventory = tdm.scan(basic_namespace(), include_hidden=True)
        return protocol.snapshot(inventory, seq=3, targets=targets, default_target="meta")
    inventory = tdm.scan(mixed_namespace())
    return protocol.snapshot(
        inventory,
        seq=7,
        targets=targets,
        default_target="meta",
        can_undo=True,
        last_action={"action": "move", "ok": True, "message": "Moved 1 object (4.1 KiB) to meta"},
    )


GENERATED = ["snapshot_basic", "snapshot_mixed", "snapshot_empty"]


@pytest.mark.parametrize("name", GENERATED)
def test_committed_fixture_is_what_the_kernel_produces(name, monkeypatch):
    snapshot = json.loads(json.dumps(build(name, monkeypatch)))
    protocol.check_snapshot(snapshot)
    path = FIXTURES / f"{name}.json"
    if os.environ.get("UPDATE_FIXTURES") == "1":
        path.write_text(json.dumps(snapshot, indent=2) + "\n")
    assert json.loads(path.read_text()) == snapshot


def test_generated_fixtures_cover_what_the_sidebar_must_show(monkeypatch):
    basic = build("snapshot_basic", monkeypatch)
    names = {row["name"]: row for row in basic["rows"]}
    assert names["Out[2]"]["hidden"] and not names["Out[2]"]["movable"]
    assert "Out[3]" not in names  # also reachable as `kept`: not hidden
    assert names["batch[0]"]["root"] == "batch"
    assert any(t["device"] == "cuda" and not t["enabled"] for t in basic["targets"])
    mixed = build("snapshot_mixed", monkeypatch)
    assert mixed["warnings"] == ["model spans cpu, meta"]
    assert {d["device"] for d in mixed["devices"]} == {"cpu", "meta"}


def test_every_fixture_matches_the_schema():
    files = sorted(FIXTURES.glob("*.json"))
    assert {f.stem for f in files} >= set(GENERATED) | {"snapshot_cuda"}
    for path in files:
        protocol.check_snapshot(json.loads(path.read_text()))
