"""Reduced copy of the transformers code paths corpus cases go through (4.30-era).

- :class:`BatchEncoding` mirrors ``transformers/tokenization_utils_base.py``: a ``UserDict`` of
  tensors with ``.to(device)`` that moves every tensor and returns itself.
- :class:`AutoTokenizer` returns one from ``__call__`` (ids are character codes mod the vocab).
- :class:`AutoModelForCausalLM` mirrors ``generation/utils.py`` ``generate()``: it runs the
  model on ``input_ids`` as given (warning only about the device) and appends tokens with
  ``torch.cat``; its forward starts with the embedding lookup (``index_select`` on CUDA).
"""

from __future__ import annotations

import warnings
from collections import UserDict

import torch

VOCAB = 50


class BatchEncoding(UserDict):
    def __getattr__(self, item):
        try:
            return self.data[item]
        except KeyError as missing:
            raise AttributeError(item) from missing

    def to(self, device):
        self.data = {k: v.to(device=device) for k, v in self.data.items()}
        return self


class AutoTokenizer:
    @classmethod
    def from_pretrained(cls, name, **kwargs):
        return cls()

    def __call__(self, texts, return_tensors=None, padding=False, max_length=None, **kwargs):
        texts = [texts] if isinstance(texts, str) else list(texts)
        width = max(len(t) for t in texts)
        ids = [[ord(c) % VOCAB for c in t] + [0] * (width - len(t)) for t in texts]
        mask = [[1] * len(t) + [0] * (width - len(t)) for t in texts]
        return BatchEncoding({"input_ids": torch.tensor(ids), "attention_mask": torch.tensor(mask)})

    def batch_decode(self, ids, skip_special_tokens=True, **kwargs):
        return ["".join(chr(97 + int(i) % 26) for i in row) for row in ids]


class AutoModelForCausalLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(VOCAB, 8)
        self.lm_head = torch.nn.Linear(8, VOCAB)

    @classmethod
    def from_pretrained(cls, name, **kwargs):
        torch.manual_seed(0)
        return cls()

    @property
    def device(self):
        return next(self.parameters()).device

    def forward(self, input_ids, attention_mask=None, **kwargs):
        hidden = self.embed_tokens(input_ids)
        if attention_mask is not None:
            hidden = hidden * attention_mask.unsqueeze(-1)
        return self.lm_head(hidden)

    @torch.no_grad()
    def generate(self, input_ids=None, max_length=None, max_new_tokens=3, **kwargs):
        if input_ids.device.type != self.device.type:
            warnings.warn(
                "You are calling .generate() with the `input_ids` being on a device type "
                f"different than your model's device. `input_ids` is on {input_ids.device.type}, "
                f"whereas the model is on {self.device.type}.",
                UserWarning,
                stacklevel=2,
            )
        if max_length is not None:
            max_new_tokens = max(max_length - input_ids.shape[-1], 1)
        for _ in range(max_new_tokens):
            logits = self(input_ids, kwargs.get("attention_mask"))
            next_tokens = logits[:, -1, :].argmax(dim=-1)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            if kwargs.get("attention_mask") is not None:
                kwargs["attention_mask"] = None
        return input_ids
