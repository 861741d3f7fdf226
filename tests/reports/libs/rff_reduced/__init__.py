"""Reduced copy of random-fourier-features-pytorch 1.0 (``rff/functional.py`` and
``rff/layers.py``): ``positional_encoding`` makes ``j = torch.arange(m)`` without a device,
so a CUDA input meets CPU coefficients (fixed by jmclong/random-fourier-features-pytorch#4,
which passes ``device=v.device``)."""

from __future__ import annotations

import numpy as np
import torch


def positional_encoding(v, sigma, m):
    j = torch.arange(m)
    coeffs = 2 * np.pi * sigma ** (j / m)
    vp = coeffs * torch.unsqueeze(v, -1)
    vp_cat = torch.cat((torch.cos(vp), torch.sin(vp)), dim=-1)
    return vp_cat.flatten(-2, -1)


class PositionalEncoding(torch.nn.Module):
    def __init__(self, sigma: float, m: int) -> None:
        super().__init__()
        self.sigma = sigma
        self.m = m

    def forward(self, v):
        return positional_encoding(v, self.sigma, self.m)
