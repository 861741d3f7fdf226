"""CrossEntropyLoss weights left on the CPU while output and labels are on the GPU.

pytorch/pytorch#122757. The reporter's model output and labels were on cuda, the class
weights were not; the loss was defined far from where it was called, so the error
("Expected all tensors to be on the same device, but found at least two devices, cuda:0 and
cpu!") did not say which tensor. Resolution in the thread (and PR #150750's test): the weights
must be put on the device (``weights.cuda()``).
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    model_output = torch.randn(10, 5).to(DEV)
    labels = torch.randint(0, 5, (10,)).to(DEV)
    weights = torch.randn(5).abs()
    """,
    """
    loss_fn = torch.nn.CrossEntropyLoss(weight=weights)
    """,
    """
    loss = loss_fn(input=model_output, target=labels)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("weights|loss_fn", "cpu"),),
    fix="moves the class weights (loss_fn.weight / weights) to DEV",
    check="loss.device == torch.device(DEV)",
    message="but got weight is on cpu, different from other tensors on cuda:0",
)
