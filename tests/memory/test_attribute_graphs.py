"""Autograd graphs kept by an object's attributes: a trainer whose evaluation loop appends
``out.loss`` to ``self.val_losses`` (no backward, so every batch's activations stay), and a
module that caches its last output with its graph. The scan names the losses themselves (a few
bytes); the graphs behind them are the memory. Cell by cell in IPython's in-process shell with
the extension loaded; what a release frees is checked by a weak reference."""

from __future__ import annotations

import gc
import textwrap

from IPython.utils.capture import capture_output

import torchdevice_magic as tdm

TRAINER = """
import torch, weakref

class Trainer:
    def __init__(self):
        self.model = torch.nn.Sequential(
            torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 2)
        )
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.val_losses = []
        self.saved = []  # weak references to activations the graphs saved

    def evaluate(self):
        for _ in range(4):
            hidden = self.model[1](self.model[0](torch.randn(32, 64)))
            self.saved.append(weakref.ref(hidden))
            self.val_losses.append(self.model[2](hidden).sum())

    def train(self):
        for _ in range(4):
            loss = self.model(torch.randn(32, 64)).sum()
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()
            self.val_losses.append(loss)

trainer = Trainer()
"""


def run(shell, cell: str) -> str:
    with capture_output() as captured:
        result = shell.run_cell(textwrap.dedent(cell).strip() + "\n", store_history=True)
    assert result.success, result.error_in_exec or result.error_before_exec
    return captured.stdout + captured.stderr


def test_a_trainers_evaluation_loop_keeping_its_losses_graphs_is_a_growing_holder(ip) -> None:
    run(ip, TRAINER)
    assert "torchdevice_magic" not in run(ip, "trainer.evaluate()")
    warned = run(ip, "trainer.evaluate()") + run(ip, "trainer.evaluate()")
    assert "⚠ torchdevice_magic: trainer.val_losses keeps 8 autograd graphs alive" in warned
    assert "more after every run: append loss.item() or loss.detach()" in warned
    found = {h.where: h for h in tdm.holders(ip.user_ns)}
    holder = found["trainer.val_losses: 12 autograd graphs"]
    assert holder.bytes >= 12 * 32 * 512 * 4  # every batch's hidden activations, at least
    trainer = ip.user_ns["trainer"]
    assert all(ref() is not None for ref in trainer.saved)
    assert holder.release() >= holder.bytes
    gc.collect()
    assert all(ref() is None for ref in trainer.saved)  # the activations are gone
    assert len(trainer.val_losses) == 12 and all(
        loss.grad_fn is None for loss in trainer.val_losses
    )  # the values stay, detached
    assert not any(h.where.startswith("trainer.") for h in tdm.holders(ip.user_ns))


def test_a_training_loop_whose_graphs_backward_freed_holds_nothing(ip) -> None:
    run(ip, TRAINER)
    for _ in range(3):
        assert "torchdevice_magic" not in run(ip, "trainer.train()")
    assert not any(h.where.startswith("trainer.") for h in tdm.holders(ip.user_ns))


def test_a_module_caching_its_output_with_the_graph_is_a_holder(ip) -> None:
    run(
        ip,
        """
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(64, 256)

            def forward(self, x):
                self.last = self.layer(x).relu()
                return self.last.sum()

        net = Net()
        out = net(torch.randn(16, 64)).item()
        """,
    )
    found = {h.where: h for h in tdm.holders(ip.user_ns)}
    holder = found["net.last (autograd graph)"]
    assert holder.fix == "net.last = net.last.detach() once backward() ran"
    assert holder.release() > 0
    assert ip.user_ns["net"].last.grad_fn is None
    assert "net.last" not in {h.where for h in tdm.holders(ip.user_ns)}


def test_a_long_history_is_looked_at_by_its_last_elements_only(ip) -> None:
    """A trainer's history of 10,000 floats is read after every cell that mentions the trainer:
    only its last elements are looked at for graphs, where a list of losses grows."""
    from torchdevice_magic.memory.graphs import GRAPH_ELEMENTS_LOOKED_AT

    run(
        ip,
        """
        import torch
        class Trainer:
            def __init__(self):
                self.w = torch.ones(64, requires_grad=True)
                self.history = [0.5] * 10_000
        trainer = Trainer()
        trainer.history.insert(0, (torch.randn(256, 64) * trainer.w).sum())
        for _ in range(3):
            trainer.history.append((torch.randn(256, 64) * trainer.w).sum())
        """,
    )
    assert GRAPH_ELEMENTS_LOOKED_AT < 10_000
    found = [h.where for h in tdm.holders(ip.user_ns) if h.where.startswith("trainer.")]
    assert found == ["trainer.history: 3 autograd graphs"]  # the first one is past the bound
