"""Models offloaded by the real accelerate package, as users make them: ``cpu_offload``,
``disk_offload`` (into a test's tmp_path) and a ``device_map`` dispatch with one module on the
cpu and one on disk. Each Linear(64, 64) holds 64 * 64 * 4 + 64 * 4 = 16,640 bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

accelerate = pytest.importorskip("accelerate")

LINEAR_BYTES = 64 * 64 * 4 + 64 * 4


def model() -> nn.Sequential:
    """Two Linear(64, 64) with a ReLU between: 0 and 2 hold the weights."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))


def cpu_offloaded() -> nn.Module:
    return accelerate.cpu_offload(model(), execution_device="cpu")


def disk_offloaded(folder: Path) -> nn.Module:
    return accelerate.disk_offload(model(), str(folder), execution_device="cpu")


def dispatched(folder: Path) -> nn.Module:
    """Module 0 placed on the cpu, module 2 offloaded to disk, by a device map."""
    return accelerate.dispatch_model(
        model(), device_map={"0": "cpu", "1": "cpu", "2": "disk"}, offload_dir=str(folder)
    )
