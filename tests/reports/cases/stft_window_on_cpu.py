"""``torch.stft`` of a GPU signal with a Hann window left on the CPU.

pytorch/pytorch#30865. ``window = torch.hann_window(window_length=400)`` then ``torch.stft(x,
n_fft=400, ..., window=window)`` with ``x`` on cuda raised "expected device cuda:0 but got
device cpu". Answer in the thread (SsnL): "The issue is that your window is still on CPU" --
make the window on the signal's device.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    x = torch.randn(64).to(DEV)
    window = torch.hann_window(window_length=16)
    """,
    """
    spec = torch.stft(x, n_fft=16, hop_length=4, win_length=16, window=window, return_complex=True)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("window", "cpu"),),
    fix="moves window to DEV (or hann_window(..., device=x.device))",
    check="spec.device == torch.device(DEV)",
    message="expected device cuda:0 but got device cpu",
)
