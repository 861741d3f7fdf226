"""Reduced copy of sub-sentence-encoder's model input and model (``utils/data_utils.py``
``PropPairModelInput`` and the encoder's forward): the input object holds a tokenizer batch
and proposition masks, made on the CPU, and has its own ``.to(device)`` (schen149/
sub-sentence-encoder#1)."""

from __future__ import annotations

import torch


class PropPairModelInput:
    def __init__(self, input_ids, all_prop_mask):
        self.encoder_inputs = {"input_ids": input_ids}
        self.all_prop_mask = all_prop_mask

    def to(self, device):
        self.all_prop_mask = self.all_prop_mask.to(device)
        self.encoder_inputs = {k: v.to(device) for k, v in self.encoder_inputs.items()}
        return self


def convert_example_to_input(sentence, spans):
    ids = torch.tensor([[ord(c) % 20 for c in sentence]])
    mask = torch.zeros(len(spans), ids.shape[1])
    for row, (start, end) in enumerate(spans):
        mask[row, start:end] = 1.0
    return PropPairModelInput(ids, mask)


class SubEncoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(20, 4)

    def forward(self, model_input):
        hidden = self.embed(model_input.encoder_inputs["input_ids"])[0]
        return model_input.all_prop_mask @ hidden
