"""Linear heads kept in a Python list are not moved by ``model.cuda()``.

pytorch/pytorch#15005 ("model.cuda() doesn't automatically detect layers initialized in a
list"). A multitask model appended its ``nn.Linear`` heads to ``self.softmaxes = []`` and moved
the batch to the GPU inside ``forward``. The issue was closed as expected behaviour; the answer
given for this in pytorch/pytorch#1053 and #8017: layers in a list are not submodules -- use
``nn.ModuleList`` (then ``model.cuda()`` moves them).
"""

from case import Culprit, Expected

CELLS = [
    """
    import numpy as np
    import torch
    import torch.nn as nn
    num_classes = [5, 2, 10, 3]

    class test(nn.Module):
        def __init__(self, input_features):
            super().__init__()
            self.softmaxes = []
            for i in range(4):
                self.softmaxes.append(nn.Linear(input_features, num_classes[i]))

        def forward(self, batch_in):
            batch_in = torch.FloatTensor(batch_in).to(DEV)
            classify = []
            for i in range(4):
                classify.append(self.softmaxes[i](batch_in))
            return classify
    """,
    """
    model = test(6).to(DEV)
    X_train = np.random.rand(4, 6)
    outputs = model(X_train)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("model.softmaxes|self.softmaxes|self.softmaxes[i]", "cpu"),),
    fix="moves the heads to DEV (nn.ModuleList in __init__)",
    check="all(o.device == torch.device(DEV) for o in outputs)",
)
