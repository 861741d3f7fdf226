"""The demo moves its input to the device but never the model.

yuanyuanli85/Fast_Human_Pose_Estimation_Pytorch#7. ``mpii_demo.py ... --device cuda`` raised
"Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same".
Resolution (commit 13fa58a, the author): "Just add one line code to push model to device.
``model = model.to(device)``".
"""

from case import Culprit, Expected

REQUIRES = ("conv_type_message",)

CELLS = [
    """
    import torch
    import torch.nn as nn
    device = DEV
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 2, 1))
    """,
    """
    input = torch.rand(1, 3, 8, 8).to(device)
    with torch.no_grad():
        score_map = model(input)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("model", "cpu"),),
    fix="moves model to device (model = model.to(device)); never the input back to the CPU",
    check="score_map.device == torch.device(DEV)",
    message="Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same",
)
