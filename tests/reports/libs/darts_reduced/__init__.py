"""Reduced copy of darts' TFT module (``darts/models/forecasting/tft_model.py``): the causal
``attention_mask`` is a plain attribute, made on the input's device at the first forward and
reused after; moving the model to another device leaves it behind (unit8co/darts#3052, fixed
by registering it with ``register_buffer(..., persistent=False)``)."""

from __future__ import annotations

import torch


class _TFTModule(torch.nn.Module):
    def __init__(self, input_chunk_length: int, output_chunk_length: int, d: int = 4) -> None:
        super().__init__()
        self.input_chunk_length = input_chunk_length
        self.output_chunk_length = output_chunk_length
        self.embed = torch.nn.Linear(1, d)
        self.head = torch.nn.Linear(d, 1)
        self.attention_mask = None
        self.relative_index = None

    def get_attention_mask_full(self, time_steps, batch_size, dtype, device):
        eye = torch.eye(time_steps, dtype=dtype, device=device)
        mask = torch.cumsum(eye.unsqueeze(0).repeat(batch_size, 1, 1), dim=1)
        return mask < 1

    def forward(self, x):
        batch_size, time_steps = x.shape[0], x.shape[1]
        if self.attention_mask is None:
            self.attention_mask = self.get_attention_mask_full(
                time_steps, batch_size, x.dtype, x.device
            )
        h = self.embed(x)
        scores = h @ h.transpose(1, 2)
        scores = scores.masked_fill(self.attention_mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        return self.head(attn @ h)[:, -self.output_chunk_length :]
