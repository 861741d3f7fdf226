"""Reduced copy of mozilla/TTS's ``sequence_mask`` and ``L1LossMasked``
(``TTS/tts/layers/losses.py`` and ``TTS/tts/utils/data.py``, autumn 2020): ``sequence_mask``
makes ``seq_range = torch.arange(max_len)`` without a device, so it meets CUDA lengths in the
comparison (mozilla/TTS#473; PR #549 passes ``device=sequence_length.device``)."""

from __future__ import annotations

import torch


def sequence_mask(sequence_length, max_len=None):
    if max_len is None:
        max_len = sequence_length.data.max()
    seq_range = torch.arange(max_len)
    return seq_range.unsqueeze(0) < sequence_length.unsqueeze(1)


class L1LossMasked(torch.nn.Module):
    def forward(self, x, target, length):
        mask = sequence_mask(sequence_length=length, max_len=target.size(1)).unsqueeze(2).float()
        mask = mask.expand_as(x)
        loss = torch.nn.functional.l1_loss(x * mask, target * mask, reduction="sum")
        return loss / mask.sum()
