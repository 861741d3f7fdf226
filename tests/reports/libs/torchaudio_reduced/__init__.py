"""Reduced copy of torchaudio 0.4's ``TimeStretch`` (``torchaudio/transforms.py``) and
``phase_vocoder`` (``torchaudio/functional.py``): ``phase_advance`` is a plain tensor
attribute made in ``__init__``, so ``TimeStretch().cuda()`` leaves it on the CPU (fixed by
pytorch/audio#457, which registers it as a buffer). The vocoder keeps its real/imag pairs
in the last dimension, as torchaudio 0.4 did; its arithmetic is reduced to the phase update.
"""

from __future__ import annotations

import math

import torch


def phase_vocoder(complex_specgrams, rate, phase_advance):
    time_steps = torch.arange(0, complex_specgrams.size(-2), rate, device=complex_specgrams.device)
    real, imag = complex_specgrams[..., 0], complex_specgrams[..., 1]
    phase = torch.atan2(imag, real)
    norm = torch.sqrt(real * real + imag * imag)
    phase = phase - phase_advance
    phase_acc = torch.cumsum(phase, -1)
    out = torch.stack([norm * torch.cos(phase_acc), norm * torch.sin(phase_acc)], dim=-1)
    return out[..., : len(time_steps), :]


class TimeStretch(torch.nn.Module):
    def __init__(self, hop_length=None, n_freq=201, fixed_rate=None):
        super().__init__()
        self.fixed_rate = fixed_rate
        n_fft = (n_freq - 1) * 2
        hop_length = hop_length if hop_length is not None else n_fft // 2
        self.phase_advance = torch.linspace(0, math.pi * hop_length, n_freq)[..., None]

    def forward(self, complex_specgrams, overriding_rate=None):
        rate = overriding_rate if overriding_rate is not None else self.fixed_rate
        if rate == 1.0:
            return complex_specgrams
        return phase_vocoder(complex_specgrams, rate, self.phase_advance)
