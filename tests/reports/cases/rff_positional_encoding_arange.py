"""random-fourier-features' ``PositionalEncoding`` makes ``torch.arange(m)`` on the CPU.

jmclong/random-fourier-features-pytorch#4 (fixes #2's sibling bug): "The ``torch.arange(m)``
was being created on CPU, regardless of the input tensor"; the PR passes the input's device.
The culprit is library code (``rff/functional.py``): the user can only work around it until
the upgrade -- run the encoding where its constants are and move the result
(``encoding(X).to(device)``), or upgrade.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    import rff_reduced as rff
    encoding = rff.PositionalEncoding(sigma=1.0, m=10)
    X = torch.randn(5, 2).to(DEV)
    """,
    """
    Xp = encoding(X)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("coeffs|j|torch.arange(m)", "cpu"),),
    fix="names the library's torch.arange(m) (needs device=v.device) and gives a user-side workaround",
    check="Xp.shape == (5, 40)",
)
