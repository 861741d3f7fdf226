"""Negative: CPU 0-dim tensors mix freely with accelerator tensors.

pytorch/pytorch#119609. ``torch.ones(()) + torch.ones(1).cuda()`` works; albanD: "Only scalar
Tensor (ndim==0) are automatically moved to cuda". A loss scaled by a CPU scalar tensor and a
CPU scalar threshold are not device errors.
"""

from case import Negative

CELLS = [
    """
    import torch
    logits = torch.ones(1).to(DEV)
    total = torch.ones(()) + logits
    loss = (logits * 2).sum() * torch.tensor(0.5)
    keep = logits > torch.tensor(0.3)
    """,
]

NEGATIVE = Negative(why="CPU 0-dim tensors are allowed with accelerator tensors", raises=None)
