"""A positional encoding built with numpy and ``torch.from_numpy`` lands on the CPU.

wingedsheep/transformer#4. The transformer's positional encoding was computed with numpy and
returned as ``torch.from_numpy(positional_encoding).float()``, then added to embeddings on the
GPU: "Expected all tensors to be on the same device, but found at least two devices, cuda:0
and cpu!". The reporter's fix (adopted): ``.to(get_device())`` on the returned tensor.
"""

from case import Culprit, Expected

CELLS = [
    """
    import numpy as np
    import torch

    def get_device():
        return DEV

    class PositionalEncoding(torch.nn.Module):
        def __init__(self, d_model, max_len):
            super().__init__()
            self.d_model, self.max_len = d_model, max_len

        def forward(self, x):
            pos = np.arange(self.max_len)[:, None]
            i = np.arange(self.d_model)[None, :]
            angle = pos / np.power(10000, (2 * (i // 2)) / self.d_model)
            positional_encoding = np.where(i % 2 == 0, np.sin(angle), np.cos(angle))
            positional_encoding = torch.from_numpy(positional_encoding).float()
            return x + positional_encoding[: x.size(1)]
    """,
    """
    pe = PositionalEncoding(d_model=4, max_len=10)
    embeddings = torch.nn.Embedding(20, 4).to(get_device())
    x = pe(embeddings(torch.tensor([[1, 2, 3]], device=get_device())))
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("positional_encoding", "cpu"),),
    fix="moves positional_encoding to x's device in forward: .to(get_device())",
    check="x.device == torch.device(DEV)",
)
