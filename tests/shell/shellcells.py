"""Cells the shell's tests run in IPython's in-process test shell, and running one."""

from __future__ import annotations

from IPython.utils.capture import capture_output

SETUP = """
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(3, 2).to("meta")
x = torch.randn(4, 3)
loader = DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 2)), batch_size=4)
def train(model, loader):
    for batch_X, batch_y in loader:
        out = model(batch_X)
    return out
"""

#: a trainer whose evaluation keeps each loss with its graph in ``self.val_losses``; the batch
#: the graph saved (64 KiB) gets a weak reference in ``refs``, which the cell's namespace has
TRAINER_KEEPING_GRAPHS = """
class Trainer:
    def __init__(self):
        self.w = torch.ones(64, requires_grad=True)
        self.val_losses = []
    def evaluate(self):
        batch = torch.randn(256, 64)
        refs.append(weakref.ref(batch))
        self.val_losses.append((batch * self.w).sum())
trainer = Trainer()
trainer.evaluate()
"""


def run(shell, cell):
    with capture_output() as captured:
        result = shell.run_cell(cell)
    texts = [o.data.get("text/plain", "") for o in captured.outputs]
    return result, captured.stdout + captured.stderr, "\n".join(texts)
