"""Ten cells whose peak memory the dry run must predict (training steps of an MLP, a small
transformer and a CNN, inference under ``torch.no_grad``), and the ways to run one: faked
(the prediction), real with :class:`MemoryCounter` (the same rule) and real with PyTorch's own
``MemTracker`` (the measurement). Shared by tests/dryrun/test_memory.py and
benchmarks/dryrun_memory.py."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from torchdevice_magic.dryrun.memory import MemoryCounter, MemoryForecast


def mlp(width: int = 512) -> nn.Module:
    return nn.Sequential(
        nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10)
    )


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 10),
    )  # fmt: skip


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 1000, width: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


def _mlp_adamw(device: str) -> dict[str, Any]:
    model = mlp()
    return {
        "model": model,
        "opt": torch.optim.AdamW(model.parameters(), lr=1e-3),
        "x": torch.randn(128, 256, device=device),
        "y": torch.randint(0, 10, (128,), device=device),
    }


def _mlp_sgd(device: str) -> dict[str, Any]:
    ns = _mlp_adamw(device)
    ns["opt"] = torch.optim.SGD(ns["model"].parameters(), lr=0.1, momentum=0.9)
    return ns


def _mlp_eval(device: str) -> dict[str, Any]:
    return {"model": mlp(1024).eval(), "x": torch.randn(512, 256, device=device)}


def _cnn_adamw(device: str) -> dict[str, Any]:
    model = cnn()
    return {
        "model": model,
        "opt": torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01),
        "images": torch.randn(32, 3, 32, 32, device=device),
        "labels": torch.randint(0, 10, (32,), device=device),
    }


def _cnn_eval(device: str) -> dict[str, Any]:
    return {"model": cnn().eval(), "images": torch.randn(64, 3, 32, 32, device=device)}


def _transformer_adamw(device: str) -> dict[str, Any]:
    model = TinyTransformer()
    return {
        "model": model,
        "opt": torch.optim.AdamW(model.parameters(), lr=1e-3),
        "tokens": torch.randint(0, 1000, (8, 64), device=device),
    }


def _transformer_adam(device: str) -> dict[str, Any]:
    ns = _transformer_adamw(device)
    ns["opt"] = torch.optim.Adam(ns["model"].parameters(), lr=1e-3)
    return ns


def _transformer_eval(device: str) -> dict[str, Any]:
    return {
        "model": TinyTransformer().eval(),
        "tokens": torch.randint(0, 1000, (16, 64), device=device),
    }


TRAIN_STEP = """\
opt.zero_grad()
logits = model(x)
loss = nn.functional.cross_entropy(logits, y)
loss.backward()
opt.step()
"""

GRAD_ACCUMULATION = """\
opt.zero_grad(set_to_none=True)
for part_x, part_y in zip(x.chunk(4), y.chunk(4)):
    loss = nn.functional.cross_entropy(model(part_x), part_y) / 4
    loss.backward()
opt.step()
"""

MLP_INFERENCE = """\
with torch.no_grad():
    probs = model(x).softmax(dim=-1)
    top = probs.topk(3, dim=-1)
"""

CNN_TRAIN_STEP = """\
opt.zero_grad()
loss = nn.functional.cross_entropy(model(images), labels)
loss.backward()
opt.step()
"""

CNN_INFERENCE = """\
with torch.no_grad():
    features = model[:8](images)
    predicted = model[8:](features).argmax(dim=-1)
"""

LM_STEP = """\
opt.zero_grad()
logits = model(tokens[:, :-1])
loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
opt.step()
"""

LM_TWO_STEPS = """\
for step in range(2):
    opt.zero_grad(set_to_none=True)
    logits = model(tokens)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
    loss.backward()
    opt.step()
del logits
"""

LM_INFERENCE = """\
with torch.no_grad():
    next_token = model(tokens)[:, -1].argmax(dim=-1)
"""


@dataclass(frozen=True)
class Cell:
    name: str
    make: Callable[[str], dict[str, Any]]
    source: str
    training: bool

    @property
    def filename(self) -> str:
        return f"<dry-run-cell {self.name}>"

    def namespace(self, device: str) -> dict[str, Any]:
        """Built on ``device`` (modules made there: under fake mode ``.to()`` swaps tensors)."""
        torch.manual_seed(0)
        with torch.device(device):
            return {"torch": torch, "nn": nn, **self.make(device)}

    def run(self, namespace: dict[str, Any]) -> None:
        exec(compile(self.source, self.filename, "exec"), namespace)


CELLS = (
    Cell("mlp_adamw_step", _mlp_adamw, TRAIN_STEP, True),
    Cell("mlp_sgd_momentum_step", _mlp_sgd, TRAIN_STEP, True),
    Cell("mlp_grad_accumulation", _mlp_adamw, GRAD_ACCUMULATION, True),
    Cell("mlp_inference_no_grad", _mlp_eval, MLP_INFERENCE, False),
    Cell("cnn_adamw_step", _cnn_adamw, CNN_TRAIN_STEP, True),
    Cell("cnn_inference_no_grad", _cnn_eval, CNN_INFERENCE, False),
    Cell("transformer_adamw_clip_step", _transformer_adamw, LM_STEP, True),
    Cell("transformer_adam_two_steps", _transformer_adam, LM_TWO_STEPS, True),
    Cell("transformer_inference_no_grad", _transformer_eval, LM_INFERENCE, False),
    Cell("cnn_adamw_two_steps", _cnn_adamw, CNN_TRAIN_STEP + CNN_TRAIN_STEP, True),
)


def fake_copy(namespace: dict[str, Any], mode: FakeTensorMode) -> dict[str, Any]:
    """A shadow of the namespace, the way a dry run makes one: every tensor, parameter,
    buffer, gradient and optimizer state replaced by a fake copy from ``mode`` (an optimizer's
    0-dim CPU ``step`` counters stay real: Adam reads them with ``.item()``), the modules and
    optimizers copied around them."""
    memo: dict[int, Any] = {}

    def fake(tensor: torch.Tensor) -> None:
        if id(tensor) not in memo:
            memo[id(tensor)] = mode.from_tensor(tensor, static_shapes=True)
            if tensor.grad is not None:
                memo[id(tensor)].grad = mode.from_tensor(tensor.grad, static_shapes=True)

    for value in namespace.values():
        if isinstance(value, torch.Tensor):
            fake(value)
        elif isinstance(value, nn.Module):
            for tensor in [*value.parameters(), *value.buffers()]:
                fake(tensor)
        elif isinstance(value, torch.optim.Optimizer):
            for group in value.param_groups:
                for param in group["params"]:
                    fake(param)
            for state in value.state.values():
                for tensor in state.values():
                    if isinstance(tensor, torch.Tensor) and tensor.dim() > 0:
                        fake(tensor)
    modules = {k: v for k, v in namespace.items() if k in ("torch", "nn")}
    plain = {k: v for k, v in namespace.items() if k not in modules}
    return {**modules, **copy.deepcopy(plain, memo)}


def predicted(cell: Cell, device: str = "cpu") -> tuple[MemoryForecast, dict[str, Any]]:
    """The dry run's figures: the cell run on a fake copy of its namespace."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    shadow = fake_copy(cell.namespace(device), mode)
    with mode, MemoryCounter(cell.filename) as counter:
        cell.run(shadow)
    return counter.forecast(shadow), shadow


def counted(cell: Cell, device: str = "cpu") -> tuple[MemoryForecast, dict[str, Any]]:
    """The same counter on a real run."""
    namespace = cell.namespace(device)
    with MemoryCounter(cell.filename) as counter:
        cell.run(namespace)
    return counter.forecast(namespace), namespace


def measured_by_memtracker(cell: Cell, device: str = "cpu") -> int:
    """PyTorch's ``MemTracker`` peak of a real run, everything the namespace holds tracked."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class RepeatingMemTracker(MemTracker):
        """Lets a cell call its model again (a loop of steps): the previous call's per-module
        statistics are dropped, as MemTracker's own error message advises
        (``reset_mod_stats``); the per-device peak is kept apart from them."""

        def _pre_fw_hook(self, module: nn.Module, inputs: Any) -> None:
            name = self._mod_tracker.get_known_fqn(module)
            called_again = module in self.memory_tracking and not self._mod_tracker.is_bw
            if called_again and set(self._mod_tracker.parents) - {name} == {"Global"}:
                self.reset_mod_stats()
            super()._pre_fw_hook(module, inputs)

    namespace = cell.namespace(device)
    tracker = RepeatingMemTracker()
    tracker.track_external(*(v for v in namespace.values() if _trackable(v)))
    with tracker:
        cell.run(namespace)
    peak = tracker.get_tracker_snapshot("peak")
    return sum(int(snap["Total"]) for dev, snap in peak.items() if str(dev) == device)


def _trackable(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, nn.Module, torch.optim.Optimizer))
