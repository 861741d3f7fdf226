"""Conv1d layers kept in a Python list stay on the CPU under Lightning.

Lightning-AI/pytorch-lightning#2623 ("Data is on GPU, some of the nn.Module still on CPU").
``self.conv_layers = []`` filled with ``nn.Conv1d``: "Input type (torch.cuda.FloatTensor) and
weight type (torch.FloatTensor) should be the same" at the first conv. The fix for layers kept
in a Python list (the answer in pytorch/pytorch#1053 and #8017): ``nn.ModuleList``, so the layers
are registered and moved.
"""

from case import Culprit, Expected

REQUIRES = ("conv_type_message",)

CELLS = [
    """
    import math
    import torch
    import torch.nn as nn

    class Conv1DClassifier(nn.Module):
        def __init__(self, num_classes):
            super().__init__()
            encoder_out_channels = 4
            n_layers = int(math.log2(encoder_out_channels))
            self.conv_layers = []
            for layer_idx in range(n_layers):
                self.conv_layers.append(
                    nn.Conv1d(in_channels=2 ** layer_idx, out_channels=2 ** (layer_idx + 1),
                              kernel_size=2, stride=2)
                )
            self.fc1 = nn.Linear(encoder_out_channels, num_classes)

        def forward(self, x):
            for conv_layer in self.conv_layers:
                x = conv_layer(x)
            return self.fc1(x.flatten(1))
    """,
    """
    model = Conv1DClassifier(num_classes=3).to(DEV)
    logits = model(torch.randn(2, 1, 4, device=DEV))
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("model.conv_layers|self.conv_layers|conv_layer", "cpu"),),
    fix="moves the conv layers to DEV (nn.ModuleList in __init__)",
    check="logits.device == torch.device(DEV)",
    message="Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
)
