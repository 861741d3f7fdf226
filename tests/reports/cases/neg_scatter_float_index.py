"""Negative: ``scatter_`` with a float index is a dtype error.

samleoqh/MSCG-Net#7. ``one_hot_label.scatter_(0, target.unsqueeze(1), 1)`` raised "Expected
object of scalar type Long but got scalar type Float for argument #3 'index'" -- the target
was float; every tensor was on the GPU.
"""

from case import Negative

CELLS = [
    """
    import torch
    pred = torch.randn(4, 3, device=DEV)
    target = torch.tensor([0.0, 2.0, 1.0, 1.0], device=DEV)
    one_hot_label = pred.detach() * 0
    """,
    """
    one_hot_label.scatter_(1, target.unsqueeze(1), 1)
    """,
]

NEGATIVE = Negative(why="a float index tensor for scatter_", raises="RuntimeError")
