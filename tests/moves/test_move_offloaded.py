"""Moves refuse models the real accelerate package offloaded (its hooks own their placement),
in one line with the way out, leave them exactly as they were, and Move-all skips them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from offloadmodels import cpu_offloaded, disk_offloaded, dispatched

from torchdevice_magic.moves import MoveError, move

MAKERS = {
    "cpu": lambda folder: cpu_offloaded(),
    "disk": disk_offloaded,
    "device_map": dispatched,
}


@pytest.mark.parametrize("make", ["cpu", "disk", "device_map"])
def test_offloaded_models_are_refused_and_left_as_they_were(make: str, tmp_path: Path) -> None:
    model = MAKERS[make](tmp_path)
    before = [(name, p.device.type) for name, p in model.named_parameters()]
    x = torch.ones(4)
    with pytest.raises(MoveError) as info:
        move({"model": model}, "meta", names=["model"])
    text = str(info.value)
    assert "accelerate's hooks own its weights' placement" in text and "\n" not in text
    assert "remove_hook_from_module(model, recurse=True)" in text
    assert [(name, p.device.type) for name, p in model.named_parameters()] == before
    result = move({"model": model, "x": x}, "meta")
    assert result.ok and [item.name for item in result.moved] == ["x"]
    assert "accelerate's hooks" in dict(result.skipped)["model"]
    assert [(name, p.device.type) for name, p in model.named_parameters()] == before
    assert torch.equal(model(torch.ones(1, 64)), model(torch.ones(1, 64)))  # hooks still work
