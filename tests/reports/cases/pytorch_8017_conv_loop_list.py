"""Conv2d layers created in a loop into a list stay on the CPU after ``Module.to()``.

pytorch/pytorch#8017 ("failed to move parameters to GPU"). ``self.conv = []`` filled in a loop;
``model.to(torch.device("cuda"))`` left ``model.conv[0].weight`` on the CPU. Resolution
(zou3519, soumith): the layers are not registered -- use ``nn.Sequential`` / ``nn.ModuleList``.
"""

from case import Culprit, Expected

REQUIRES = ("conv_type_message",)

CELLS = [
    """
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, in_channels, out_channels, layer_size):
            super().__init__()
            self.conv = []
            for idx in range(layer_size):
                self.conv.append(nn.Conv2d(in_channels=in_channels, out_channels=out_channels, kernel_size=(3, 3)))
                in_channels = out_channels
                out_channels *= 2

        def forward(self, x):
            for conv in self.conv:
                x = conv(x)
            return x
    """,
    """
    model = Model(in_channels=1, out_channels=2, layer_size=2).to(torch.device(DEV))
    y = model(torch.randn(1, 1, 7, 7, device=DEV))
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("model.conv|self.conv|conv", "cpu"),),
    fix="moves the layers to DEV (nn.Sequential / nn.ModuleList)",
    check="y.device == torch.device(DEV)",
)
