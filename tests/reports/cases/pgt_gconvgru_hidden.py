"""torch_geometric_temporal's GConvGRU makes its hidden state regardless of the input's device.

benedekrozemberczki/pytorch_geometric_temporal#20. "In the GConvGRU class the hidden state is
created regardless of the device type of the input"; the suggested fix, adopted for every
cell of the library: ``H = torch.zeros(X.shape[0], self.out_channels).to(X.device)``. On the
user's side (before upgrading), pass ``H`` made on the input's device.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torch_geometric_temporal_reduced import GConvGRU
    recurrent = GConvGRU(in_channels=2, out_channels=3, K=2).to(DEV)
    X = torch.randn(4, 2, device=DEV)
    edge_index = torch.tensor([[0, 1], [1, 2]], device=DEV)
    """,
    """
    H = recurrent(X, edge_index)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("H", "cpu"),),
    fix="passes H made on X.device (the library's _set_hidden_state makes it without a device)",
    check="H.device == torch.device(DEV)",
)
