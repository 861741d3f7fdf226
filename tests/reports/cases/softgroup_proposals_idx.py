"""A CPU tensor indexed with a GPU index tensor inside the model's forward.

thangvubk/SoftGroup#215. ``cur_proposals_idx = proposals_idx[mask_inds].long()`` raised
"indices should be either on cpu or on the same device as the indexed tensor (cpu)":
``proposals_idx`` came back from a CPU op while ``mask_inds`` was on cuda. Fix posted in the
thread: ``proposals_idx = proposals_idx.to(mask_inds.device)`` before that line.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch

    def forward_instance(scores, proposals_idx):
        mask_inds = torch.nonzero(scores > 0.5).view(-1)
        cur_proposals_idx = proposals_idx[mask_inds].long()
        return cur_proposals_idx
    """,
    """
    scores = torch.tensor([0.9, 0.1, 0.7], device=DEV)
    proposals_idx = torch.tensor([[0, 4], [1, 5], [2, 6]])
    picked = forward_instance(scores, proposals_idx)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("proposals_idx", "cpu"),),
    fix="moves proposals_idx to mask_inds' device (DEV)",
    check="picked.device == torch.device(DEV) and picked.tolist() == [[0, 4], [2, 6]]",
    message="indices should be either on cpu or on the same device as the indexed tensor (cpu)",
)
