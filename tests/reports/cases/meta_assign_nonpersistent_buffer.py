"""A model built on ``meta`` and loaded with ``assign=True`` keeps a non-persistent buffer on meta.

pytorch/pytorch#102212 (the PR adding ``load_state_dict(..., assign=True)``): "what happens to
nonpersistent buffers ... They would still be on ``meta`` and need to be manually initialized".
Reported in practice for rotary ``inv_freq`` buffers (huggingface/transformers#25555). The
resolution: re-create the non-persistent buffer on the device after loading (here by computing
it again), since no checkpoint holds it.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torch import nn

    class Rotary(nn.Module):
        def __init__(self, dim=4):
            super().__init__()
            self.proj = nn.Linear(dim, dim)
            inv_freq = 1.0 / (10000 ** (torch.arange(0, dim).float() / dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        def forward(self, x):
            return self.proj(x) * self.inv_freq

    torch.manual_seed(0)
    reference = Rotary()
    state_dict = {k: v.to(DEV) for k, v in reference.state_dict().items()}
    x = torch.randn(2, 4, device=DEV)
    """,
    """
    with torch.device("meta"):
        m = Rotary()
    m.load_state_dict(state_dict, assign=True)
    """,
    """
    y = m(x)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("m.inv_freq|self.inv_freq", "meta"),),
    fix="re-creates the non-persistent buffer inv_freq on DEV (its values recomputed)",
    check="torch.allclose(y.cpu(), reference(x.cpu()))",
)
