"""A CPU ``torch.arange`` indexed with a boolean mask that lives on the GPU.

ykdai/BasicPBC#4. ``torch.arange(0, all_matches_origin[0].shape[0])[all_matches_origin[0] ==
indices0[0]]`` raised "indices should be either on cpu or on the same device as the indexed
tensor (cpu)". The reporter's fix, confirmed by the authors: make the range on the matches'
device (``torch.arange(...).to(all_matches_origin[0].device)``) -- "torch.arange() will create
tensors on CPU by default".
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    all_matches_origin = torch.tensor([[2, 0, 1, 2]], device=DEV)
    indices0 = torch.tensor([[2, 1, 1, 2]], device=DEV)
    """,
    """
    picked = torch.arange(0, all_matches_origin[0].shape[0])[all_matches_origin[0] == indices0[0]]
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("torch.arange(0, all_matches_origin[0].shape[0])", "cpu"),),
    fix="makes the arange on all_matches_origin's device",
    check="picked.tolist() == [0, 2, 3]",
    message="indices should be either on cpu or on the same device as the indexed tensor (cpu)",
)
