"""A target made with ``torch.arange`` inside the training step, without a device.

Lightning-AI/pytorch-lightning#2400. ``target = torch.arange(x1.size()[0])`` in
``training_step`` lives on the CPU while the predictions are on the GPU: "Expected object of
device type cuda but got device type cpu for argument #2 'target' in call to
_thnn_nll_loss_forward". The thread (closed) does not record the reporter's change; the fix
the error calls for is to make the target on the batch's device
(``torch.arange(..., device=x1.device)``).
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torch import nn

    class NPairs(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(4, 4)
            self.loss_fn = nn.CrossEntropyLoss()

        def forward(self, x1, x2):
            return self.proj(x1) @ self.proj(x2).t()

        def training_step(self, batch, batch_idx):
            x1, x2 = batch["x1"], batch["x2"]
            predict = self(x1, x2)
            target = torch.arange(x1.size()[0])
            loss = self.loss_fn(predict, target)
            return {"loss": loss}
    """,
    """
    model = NPairs().to(DEV)
    batch = {"x1": torch.randn(3, 4, device=DEV), "x2": torch.randn(3, 4, device=DEV)}
    out = model.training_step(batch, 0)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("target", "cpu"),),
    fix="makes target with device=x1.device in training_step",
    check="out['loss'].device == torch.device(DEV)",
    message="Expected object of device type cuda but got device type cpu for argument #2 'target'",
)
