"""Resuming: optimizer state loaded while the model was still on the CPU.

yyvhang/IAGNet#4. Training resumed with ``--resume`` loaded the checkpoint (model and optimizer
state) before ``model = model.to(device)``; the first step failed with "Expected all tensors to
be on the same device, but found at least two devices, cuda:0 and cpu!". Resolution (the
author, confirmed by the reporter): put ``model = model.to(device)`` before loading the
checkpoint -- the optimizer's state then follows parameters that are already on the GPU.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    torch.manual_seed(0)
    device = DEV
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    """,
    """
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    model = model.to(device)
    """,
    """
    optimizer.zero_grad()
    loss = model(torch.randn(3, 4, device=device)).sum()
    loss.backward()
    optimizer.step()
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("optimizer", "cpu"),),
    fix="moves the optimizer's state to DEV (or loads the checkpoint after model.to(device))",
    check="all(v.device == torch.device(DEV) for s in optimizer.state.values() for k, v in s.items() if k != 'step')",
)
