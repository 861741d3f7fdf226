"""torchsummary probes a model on the CPU with an input it makes on the GPU.

sksq96/pytorch-summary#16. ``print(summary(model, (3, 30, 16)))`` raised "Input type
(torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same" although the
model trained fine: ``summary`` makes its probe input on "cuda" by default. The reporter's fix:
``summary(model.to(device), (3, 30, 16))``.
"""

from case import Culprit, Expected

REQUIRES = ("conv_type_message",)

CELLS = [
    """
    import torch
    import torch.nn as nn
    from torchsummary_reduced import summary
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten())
    """,
    """
    summary(model, (3, 6, 5))
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("model", "cpu"),),
    fix="moves model to DEV before the summary (summary(model.to(device), ...))",
    check="next(model.parameters()).device == torch.device(DEV)",
    message="Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
)
