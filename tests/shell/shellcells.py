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


def run(shell, cell):
    with capture_output() as captured:
        result = shell.run_cell(cell)
    texts = [o.data.get("text/plain", "") for o in captured.outputs]
    return result, captured.stdout + captured.stderr, "\n".join(texts)
