"""Negative: CPU index tensors may index accelerator tensors.

cxliu0/PET#4. ``points_queries_win[:, v_idx]`` failed only because ``v_idx`` was on another
device than the CPU; the fix ``v_idx = v_idx.cpu()`` works because CUDA accepts indices "either
on cpu or on the same device as the indexed tensor" (the message itself). Indexing a device
tensor with CPU indices (``x[idx]``, ``index_put_``) is no device error.
"""

from case import Negative

REQUIRES = ("cpu_indices",)

CELLS = [
    """
    import torch
    points_queries_win = torch.randn(3, 6, 2, device=DEV)
    v_idx = torch.tensor([0, 2, 5])
    picked = points_queries_win[:, v_idx].reshape(-1, 2)
    points_queries_win[:, v_idx] = 0.0
    """,
]

NEGATIVE = Negative(why="CPU indices into an accelerator tensor are allowed on CUDA", raises=None)
