"""The training loop moves images and labels to the device, the model stays on the CPU.

PacktPublishing/Mastering-PyTorch#9 ("Minor bug fixes"): "If working with GPUs the model has
to be moved to the current device, since the images and labels of the mini-batch is also being
moved." The fix in the PR: ``model = ConvNet().to(device)``.
"""

from case import Culprit, Expected

REQUIRES = ("conv_type_message",)

CELLS = [
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    device = DEV

    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.cn1 = nn.Conv2d(1, 2, 3)
            self.fc1 = nn.Linear(2 * 4 * 4, 10)

        def forward(self, x):
            return F.log_softmax(self.fc1(torch.flatten(F.relu(self.cn1(x)), 1)), dim=1)

    model = ConvNet()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.5)
    train_dataloader = [(torch.rand(2, 1, 6, 6), torch.tensor([1, 7]))]
    """,
    """
    model.train()
    for b_i, (X, y) in enumerate(train_dataloader):
        X, y = X.to(device), y.to(device)
        optimizer.zero_grad()
        pred_prob = model(X)
        loss = F.nll_loss(pred_prob, y)
        loss.backward()
        optimizer.step()
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("model", "cpu"),),
    fix="moves model to device; never the batch back to the CPU, never the DataLoader",
    check="loss.device == torch.device(DEV)",
)
