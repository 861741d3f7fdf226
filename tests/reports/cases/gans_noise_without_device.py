"""A GAN notebook's ``noise()`` and target helpers make their tensors on the CPU.

diegoalejogm/gans#12. With the networks on the GPU, training failed with "Expected object of
device type cuda but got device type cpu for argument #2 'mat1' in call to _th_addmm".
Resolution in the thread (karamjotsinghmalik): each tensor the notebook makes for its own
purposes -- the noise, the real/fake targets -- must be made on (moved to) the device in use.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torch import nn
    device = DEV

    def noise(size):
        return torch.randn(size, 8)

    generator = nn.Sequential(nn.Linear(8, 6), nn.Tanh()).to(device)
    discriminator = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid()).to(device)
    """,
    """
    fake_data = generator(noise(4))
    prediction = discriminator(fake_data)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("noise(4)", "cpu"),),
    fix="makes the noise on device (torch.randn(size, 8, device=device))",
    check="prediction.device == torch.device(DEV)",
    message="Expected object of device type cuda but got device type cpu for argument #2 'mat1' in call to _th_addmm",
)
