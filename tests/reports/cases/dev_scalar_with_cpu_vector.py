"""A 0-dim tensor on the GPU with a 1-element CPU tensor: only CPU scalars may mix.

pytorch/pytorch#119609. ``torch.ones(()) + torch.ones(1).cuda()`` works but
``torch.ones(()).cuda() + torch.ones(1)`` fails with "Expected all tensors to be on the same
device, but found at least two devices, cuda:0 and cpu!". Answer (albanD): only CPU scalar
tensors are moved to the device automatically; a non-scalar CPU tensor must be moved.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    temperature = torch.ones(()).to(DEV)
    logits = torch.ones(1)
    """,
    """
    scaled = temperature + logits
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("logits", "cpu"),),
    fix="moves logits to DEV (the 0-dim tensor cannot go to the CPU side automatically)",
    check="scaled.device == torch.device(DEV)",
)
