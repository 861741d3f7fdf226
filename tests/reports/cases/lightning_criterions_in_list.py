"""Class-weighted CrossEntropyLoss criteria kept in a plain Python list.

Lightning-AI/pytorch-lightning#2984. The reporter's LightningModule built one
``CrossEntropyLoss(weight=...)`` per letter position and appended them to ``self.criterions = []``;
on the GPU the validation step failed with a device mismatch. Resolution in the thread
(awaelchli): a module does not see submodules kept in a list -- make it
``self.criterions = nn.ModuleList()`` and the criteria (and their weights) move with the model.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torch import nn

    class JJG_Transformer(nn.Module):
        def __init__(self, letter_weights_per_position):
            super().__init__()
            self.net = nn.Linear(6, 2 * 5)
            self.criterions = []
            for weight in letter_weights_per_position:
                self.criterions.append(torch.nn.CrossEntropyLoss(weight=weight))

        def forward(self, batch_im):
            return self.net(batch_im).view(-1, 2, 5)

        def validation_step(self, batch, batch_idx):
            batch_im, batch_true_value_NT = batch
            out_NTA = self(batch_im)
            loss0 = self.criterions[0](out_NTA[:, 0, :], batch_true_value_NT[:, 0])
            loss1 = self.criterions[1](out_NTA[:, 1, :], batch_true_value_NT[:, 1])
            return loss0 + loss1
    """,
    """
    model = JJG_Transformer([torch.ones(5), torch.ones(5)]).to(DEV)
    batch = (torch.randn(3, 6, device=DEV), torch.randint(0, 5, (3, 2), device=DEV))
    """,
    """
    val_loss = model.validation_step(batch, 0)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("model.criterions|self.criterions|self.criterions[0]", "cpu"),),
    fix="moves the criteria's weights to DEV (nn.ModuleList, or the criteria moved)",
    check="val_loss.device == torch.device(DEV)",
)
