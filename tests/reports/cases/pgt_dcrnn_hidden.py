"""torch_geometric_temporal's DCRNN makes its initial hidden state ``H`` on the CPU.

benedekrozemberczki/pytorch_geometric_temporal#18. "Why the initial hidden ``H`` won't be moved
to GPU?": ``_set_hidden_state`` does ``H = torch.zeros(X.shape[0], self.out_channels)`` when no
``H`` is passed ("All input tensors must be on the same device. Received cuda:0 and cpu").
The reporter's resolution: pass ``h0`` on the GPU to ``forward()`` (the library was fixed later).
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torch_geometric_temporal_reduced import DCRNN
    device = DEV
    model = DCRNN(in_channels=3, out_channels=4, K=1).to(device)
    x = torch.randn(5, 3).to(device)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]]).to(device)
    """,
    """
    h = model(x, edge_index)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("H", "cpu"),),
    fix="passes H=torch.zeros(..., device=DEV) to the model (the library's line makes H without a device)",
    check="h.device == torch.device(DEV)",
    message="All input tensors must be on the same device. Received cuda:0 and cpu",
)
