"""Conv1d submodules defined in a list are not moved by ``.cuda()``.

pytorch/pytorch#1053 ("submodules defined in list are not auto-registered as parameters").
After ``a.cuda()`` the ``Conv1d`` layers in ``self.conv1d = [...]`` were still on the CPU.
Resolution (apaszke): "This is expected. Use ``nn.ModuleList``."
"""

from case import Culprit, Expected

REQUIRES = ("conv_type_message",)

CELLS = [
    """
    import torch as th

    class Net(th.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1d = [th.nn.Conv1d(4, 1, 3), th.nn.Conv1d(4, 1, 2)]

        def forward(self, x):
            return [conv(x).max(-1).values for conv in self.conv1d]
    """,
    """
    a = Net()
    a.to(DEV)
    features = a(th.randn(2, 4, 6, device=DEV))
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("a.conv1d|self.conv1d|conv", "cpu"),),
    fix="moves the convolutions to DEV (nn.ModuleList)",
    check="all(f.device == th.device(DEV) for f in features)",
)
