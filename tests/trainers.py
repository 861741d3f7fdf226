"""A trainer as users write one: a model, its optimizer and a DataLoader held in attributes
(shared by the view model's and the widget's tests of a loader's rows)."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    """``samples`` tensors of (8, 4) in the loader's dataset: more than 16 make the scan fold
    them into one row."""

    def __init__(self, samples: int) -> None:
        self.model = nn.Linear(4, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        data = TensorDataset(*(torch.randn(8, 4) for _ in range(samples)))
        self.loader = DataLoader(data, batch_size=4)
