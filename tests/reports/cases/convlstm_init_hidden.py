"""ConvLSTM's ``init_hidden`` makes the hidden state on the CPU.

ndrplz/ConvLSTM_pytorch#10. ``init_hidden`` returned ``torch.zeros(batch_size,
self.hidden_dim, height, width)`` with no device, so a model on the GPU concatenated its input
with a CPU hidden state. The PR (integrated upstream through another PR): make it on the
device of the cell's conv weights (``device=self.conv.weight.device``).
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    import torch.nn as nn

    class ConvLSTMCell(nn.Module):
        def __init__(self, input_dim, hidden_dim):
            super().__init__()
            self.hidden_dim = hidden_dim
            self.gates = nn.Linear(input_dim + hidden_dim, 4 * hidden_dim)

        def forward(self, input_tensor, cur_state):
            h_cur, c_cur = cur_state
            combined = torch.cat([input_tensor, h_cur], dim=1)
            i, f, o, g = torch.split(self.gates(combined), self.hidden_dim, dim=1)
            c_next = torch.sigmoid(f) * c_cur + torch.sigmoid(i) * torch.tanh(g)
            h_next = torch.sigmoid(o) * torch.tanh(c_next)
            return h_next, c_next

        def init_hidden(self, batch_size):
            return (torch.zeros(batch_size, self.hidden_dim),
                    torch.zeros(batch_size, self.hidden_dim))
    """,
    """
    cell = ConvLSTMCell(input_dim=3, hidden_dim=4).to(DEV)
    x = torch.randn(2, 3, device=DEV)
    h, c = cell(x, cell.init_hidden(batch_size=2))
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("h_cur", "cpu"),),
    fix="makes the hidden state in init_hidden on the cell's device",
    check="h.device == torch.device(DEV)",
)
