"""A Python list of a module's buffers keeps the CPU tensors after ``.cuda()``.

pytorch/pytorch#29807 ("list of registered buffers does not move to cuda"). The module
registered buffers ``param_0..3`` and also kept them in ``self.params = []``; after ``a.cuda()``
the buffers moved but the list still held the CPU tensors. Resolution (ailzhang): the buffers
did move -- read them through the module (``getattr(self, f"param_{i}")`` /
``self.buffers()``), not through the list, which ``.to()`` does not touch.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    import torch.nn as nn

    class MyModule(nn.Module):
        def __init__(self):
            super().__init__()
            params = [torch.rand(1, 3) for i in range(4)]
            self.params = []
            for i, param in enumerate(params):
                self.register_buffer("param_{}".format(i), param)
                self.params.append(getattr(self, "param_{}".format(i)))

        def forward(self, x):
            return sum(p * x for p in self.params)
    """,
    """
    a = MyModule()
    a.to(DEV)
    y = a(torch.ones(1, 3, device=DEV))
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("a.params|self.params|p", "cpu"),),
    fix="reads the registered buffers (getattr(self, f'param_{i}')) instead of the list, or refreshes the list",
    check="y.device == torch.device(DEV)",
)
