"""A tensor made in ``__init__`` as a plain attribute stays on the CPU when the model moves.

Lightning-AI/pytorch-lightning#1978 ("How to convert a tensor created in __init__() to the
same device as the model"). Resolution (awaelchli, "WOWW this is awesome!!"): register it as a
buffer (``self.register_buffer``), and it moves with the module.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    import torch.nn as nn

    class LitModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Linear(4, 4)
            self.scale = torch.linspace(0.5, 2.0, 4)

        def forward(self, x):
            return self.layer(x) * self.scale
    """,
    """
    model = LitModel().to(DEV)
    out = model(torch.randn(2, 4, device=DEV))
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("model.scale|self.scale", "cpu"),),
    fix='self.register_buffer("scale", torch.linspace(0.5, 2.0, 4)) in __init__ (or moves model.scale)',
    check="out.device == torch.device(DEV)",
)
