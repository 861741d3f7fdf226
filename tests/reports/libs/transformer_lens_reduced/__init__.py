"""Reduced copy of TransformerLens ``HookedTransformer.generate`` (``HookedTransformer.py``,
before PR #1509): ``input_tokens`` is bound to the input *before* ``input = input.to(device)``,
so CPU tokens passed to a model whose ``cfg.device`` is the accelerator meet the sampled
tokens (made on the model's device) in ``torch.cat`` (TransformerLens#1508)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class HookedTransformerConfig:
    d_vocab: int = 12
    d_model: int = 8
    n_ctx: int = 16
    device: str | None = None

    def __post_init__(self) -> None:
        if self.device is None:  # the accelerator when there is one, as the library does
            self.device = str(torch.accelerator.current_accelerator() or "cpu")


class HookedTransformer(torch.nn.Module):
    def __init__(self, cfg: HookedTransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = torch.nn.Embedding(cfg.d_vocab, cfg.d_model)
        self.unembed = torch.nn.Linear(cfg.d_model, cfg.d_vocab)
        self.to(cfg.device)

    def forward(self, tokens):
        return self.unembed(self.embed(tokens))

    @torch.no_grad()
    def generate(self, input, max_new_tokens=3, do_sample=False, **kwargs):
        input_tokens = input if isinstance(input, torch.Tensor) else None
        device = self.cfg.device
        input = input.to(device)
        sampled_tokens_list = []
        tokens = input
        for _ in range(max_new_tokens):
            logits = self(tokens)
            sampled = logits[:, -1, :].argmax(dim=-1)
            sampled_tokens_list.append(sampled[:, None])
            tokens = torch.cat([tokens, sampled[:, None]], dim=-1)
        sampled_tokens = torch.cat(sampled_tokens_list, dim=1)
        return torch.cat((input_tokens, sampled_tokens), dim=1)
