"""Negative: a float target for CrossEntropyLoss is a dtype error, not a device error.

milesial/Pytorch-UNet#93. "Expected object of scalar type Long but got scalar type Float for
argument #2 'target'": the masks must be class indices (``long``); the maintainer pointed to
the documentation. Input and target were both on the GPU.
"""

from case import Negative

CELLS = [
    """
    import torch
    criterion = torch.nn.CrossEntropyLoss()
    masks_pred = torch.randn(1, 3, 4, 4, device=DEV)
    true_masks = torch.randint(0, 3, (1, 4, 4), device=DEV).float()
    """,
    """
    loss = criterion(masks_pred, true_masks)
    """,
]

NEGATIVE = Negative(why="a float target where class indices are expected", raises="RuntimeError")
