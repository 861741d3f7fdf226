"""SGD momentum buffers restored on the CPU, the model moved to the GPU afterwards.

pytorch/pytorch#2830 ("optimizer load_state_dict() problem?"). After ``optimizer.load_state_dict``
the state stayed where it was loaded while ``model.cuda()`` moved the parameters, and
``optimizer.step()`` failed on mixed devices. Resolution in the thread (dogancan's, confirmed by
several users): move the model first and create/load the optimizer after -- i.e. the optimizer
state must end up on the parameters' device.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.randn(2, 3)).sum().backward()
    opt.step()
    saved = opt.state_dict()
    """,
    """
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    opt.load_state_dict(saved)
    net.to(DEV)
    """,
    """
    net(torch.randn(2, 3, device=DEV)).sum().backward()
    opt.step()
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("opt", "cpu"),),
    fix="moves opt's momentum buffers to DEV",
    check="all(s['momentum_buffer'].device == torch.device(DEV) for s in opt.state.values())",
)
