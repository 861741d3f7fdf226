"""Reduced copy of torchsummary 1.5 (``torchsummary/torchsummary.py``): ``summary`` makes its
probe input on ``device`` ("cuda" by default) whatever device the model is on, then runs the
model (sksq96/pytorch-summary#16). Here the default device is the machine's accelerator."""

from __future__ import annotations

import torch


def summary(model, input_size, batch_size=-1, device=None):
    if device is None:
        device = torch.accelerator.current_accelerator()
    if isinstance(input_size, tuple):
        input_size = [input_size]
    x = [torch.rand(2, *in_size, device=device) for in_size in input_size]
    lines = []

    def hook(module, inputs, output):
        lines.append(f"{type(module).__name__:>20} {list(output.shape)}")

    hooks = [m.register_forward_hook(hook) for m in model.modules() if m is not model]
    try:
        model(*x)
    finally:
        for h in hooks:
            h.remove()
    print("\n".join(lines))
