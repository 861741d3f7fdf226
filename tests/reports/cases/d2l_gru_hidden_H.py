"""A GRU written from scratch makes its hidden state ``H`` in forward without a device.

d2l-ai/d2l-en#2233. In the book's scratch GRU, ``if H is None: H = torch.zeros(inputs.shape[1],
self.num_hiddens)`` puts ``H`` on the CPU while the inputs and weights are on the GPU. The
change proposed in the thread: ``torch.zeros(..., device=inputs.device)``.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torch import nn

    class GRUScratch(nn.Module):
        def __init__(self, num_inputs, num_hiddens, sigma=0.01):
            super().__init__()
            self.num_hiddens = num_hiddens
            init_weight = lambda *shape: nn.Parameter(torch.randn(*shape) * sigma)
            self.W_xz = init_weight(num_inputs, num_hiddens)
            self.W_hz = init_weight(num_hiddens, num_hiddens)
            self.b_z = nn.Parameter(torch.zeros(num_hiddens))

        def forward(self, inputs, H=None):
            if H is None:
                H = torch.zeros(inputs.shape[1], self.num_hiddens)
            outputs = []
            for X in inputs:
                Z = torch.sigmoid(torch.matmul(X, self.W_xz) + torch.matmul(H, self.W_hz) + self.b_z)
                H = Z * H
                outputs.append(H)
            return outputs, H
    """,
    """
    gru = GRUScratch(num_inputs=5, num_hiddens=4).to(DEV)
    inputs = torch.randn(3, 2, 5, device=DEV)
    outputs, H = gru(inputs)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("H", "cpu"),),
    fix="makes H with device=inputs.device in forward",
    check="H.device == torch.device(DEV)",
)
