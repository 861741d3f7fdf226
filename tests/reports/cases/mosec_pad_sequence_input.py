"""A worker pads a batch of request tensors on the CPU and feeds a model on the GPU.

mosecorg/mosec#98 ("Make sure input and model are on the same device"). In the example worker,
``self.model(torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True))[0]`` raised a device
error with the model on cuda. The merged fix: ``pad_sequence(tensors,
batch_first=True).to(self.device)``.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch

    class Inference:
        def __init__(self, device):
            self.device = device
            self.model = torch.nn.Sequential(torch.nn.Embedding(10, 3), torch.nn.Flatten()).to(device)

        def forward(self, data):
            tensors = [torch.tensor(item) for item in data]
            with torch.no_grad():
                result = self.model(torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True))[0]
            return result
    """,
    """
    worker = Inference(DEV)
    result = worker.forward([[1, 2, 3], [4, 5]])
    """,
]

EXPECTED = Expected(
    culprits=(
        Culprit("torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True)|tensors", "cpu"),
    ),
    fix="moves the padded batch to self.device",
    check="result.device == torch.device(DEV)",
)
