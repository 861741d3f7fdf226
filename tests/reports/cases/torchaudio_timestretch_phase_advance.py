"""torchaudio's ``TimeStretch`` keeps ``phase_advance`` as a plain tensor attribute.

pytorch/audio#457 ("phase_advance should be a buffer so it moves device correctly"). With
``m = TimeStretch().cuda()`` and a cuda spectrogram, ``m(x, 1.3)`` raised "expected device
cuda:0 but got device cpu": ``.cuda()`` does not move plain attributes. The library's fix
registers it as a buffer; the user-side equivalent is to move that attribute
(``m.phase_advance = m.phase_advance.to(device)``) or register it.
"""

from case import Culprit, Expected

CELLS = [
    """
    import torch
    from torchaudio_reduced import TimeStretch
    m = TimeStretch(n_freq=9).to(DEV)
    spec = torch.randn(1, 2, 9, 6, 2).to(DEV)
    """,
    """
    stretched = m(spec, 1.3)
    """,
]

EXPECTED = Expected(
    culprits=(Culprit("m.phase_advance|phase_advance", "cpu"),),
    fix="moves m.phase_advance to DEV (register_buffer in the library)",
    check="stretched.device == torch.device(DEV)",
    message="expected device cuda:0 but got device cpu",
)
