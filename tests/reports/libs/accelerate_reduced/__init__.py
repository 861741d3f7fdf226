"""Reduced copy of accelerate's ``Accelerator.prepare`` (``accelerate/accelerator.py``,
1.0-era): modules are moved to ``accelerator.device``, data loaders are wrapped so every batch
arrives on it, and anything else -- a bare tensor used as a "model" -- is returned unchanged
(huggingface/accelerate#3157)."""

from __future__ import annotations

import torch


class _DeviceLoader:
    def __init__(self, loader, device):
        self.loader = loader
        self.device = device

    def __iter__(self):
        for batch in self.loader:
            yield [t.to(self.device) for t in batch]

    def __len__(self):
        return len(self.loader)


class Accelerator:
    def __init__(self, gradient_accumulation_steps: int = 1) -> None:
        found = torch.accelerator.current_accelerator()
        self.device = torch.device(found.type, 0) if found is not None else torch.device("cpu")
        self.gradient_accumulation_steps = gradient_accumulation_steps

    def prepare(self, *objects):
        return tuple(self._prepare_one(obj) for obj in objects)

    def _prepare_one(self, obj):
        if isinstance(obj, torch.nn.Module):
            return obj.to(self.device)
        if isinstance(obj, torch.utils.data.DataLoader):
            return _DeviceLoader(obj, self.device)
        return obj

    def backward(self, loss):
        loss.backward()
