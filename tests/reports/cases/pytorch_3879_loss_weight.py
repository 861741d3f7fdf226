"""A loss's ``weight`` tensor not on the GPU while its inputs are.

pytorch/pytorch#3879 ("Setting the weight argument in nn.Loss functions"). "When the weight
Tensor argument in nn.Loss is NOT .cuda() when the Variables going into the function are
.cuda(), PyTorch will raise an uninformative error message." Resolution (jdhao, zou3519's
repro): put the weight vector on the GPU too.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    import torch.nn as nn
    x = torch.randn(2, 2).to(DEV).requires_grad_()
    t = torch.LongTensor([0, 1]).to(DEV)
    weight = torch.rand(2)
    m = nn.CrossEntropyLoss(weight=weight)
    """,
    """
    out = m(x, t)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("weight|m", "cpu"),),
    fix="moves the weight (m's weight buffer) to DEV",
    check="out.device == torch.device(DEV)",
)
