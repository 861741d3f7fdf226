"""The quickstart's final prediction feeds a dataset sample on the CPU to a model on the GPU.

pytorch/tutorials#1890 ("Ensure test data on device before running model"). In the
quickstart, ``x, y = test_data[0][0], test_data[0][1]`` then ``pred = model(x)`` "fails with
RuntimeError: Expected all tensors to be on the same device" when ``device`` is not the CPU.
The PR's fix: ``x = x.to(device)`` before running the model.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset
    device = DEV
    test_data = TensorDataset(torch.rand(4, 1, 3, 3), torch.tensor([0, 1, 2, 1]))

    class NeuralNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.linear_relu_stack = nn.Sequential(nn.Linear(9, 8), nn.ReLU(), nn.Linear(8, 3))

        def forward(self, x):
            return self.linear_relu_stack(self.flatten(x))

    model = NeuralNetwork().to(device)
    """,
    """
    model.eval()
    x, y = test_data[0][0], test_data[0][1]
    with torch.no_grad():
        pred = model(x)
        predicted = pred[0].argmax(0)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("x", "cpu"),),
    fix="moves x to device: x = x.to(device)",
    check="pred.device == torch.device(DEV)",
)
