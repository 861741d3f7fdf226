"""Class weights computed on the CPU and handed to the loss of a model on the GPU.

sacdallago/biotrainer#67. With ``use_class_weights: True`` the trainer computed per-class
weights from the label counts and built ``CrossEntropyLoss(weight=class_weights)``; training on
cuda then failed with a device mismatch in the loss. Resolution (the issue's title and fix):
the class weights need to be sent to the device.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    device = DEV
    labels = torch.tensor([0, 1, 1, 2, 2, 2, 1, 0])
    counts = torch.bincount(labels)
    class_weights = len(labels) / (len(counts) * counts.float())
    loss_function = torch.nn.CrossEntropyLoss(weight=class_weights)
    model = torch.nn.Linear(4, 3).to(device)
    """,
    """
    embeddings = torch.randn(8, 4).to(device)
    targets = labels.to(device)
    loss = loss_function(model(embeddings), targets)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("class_weights|loss_function", "cpu"),),
    fix="moves class_weights (the loss's weight) to DEV",
    check="loss.device == torch.device(DEV)",
)
