"""trace(): the first op whose inputs span devices (its line, function, module path, the
variables' names) and the copies between devices, on cpu + the simulated accelerator (and meta
where meta is honest).

Tests marked ``simulated`` run in the one child process that registers the simulated
accelerator (see conftest.py)."""

from __future__ import annotations

import os

import pytest
import torch
from trace_checks import MISMATCH, cell, no_modes_left

from torchdevice_magic.trace import trace

MOVE_THEN_MIX = cell(
    """
    a = torch.randn(4, 8)
    b = torch.randn(4, 8)
    a_dev = a.to(DEV)
    c = b * 2
    d = a_dev + b
    e = "never reached"
    """
)


@pytest.mark.simulated
def test_a_move_at_line_3_and_a_mix_at_line_5(simulated_device: str) -> None:
    namespace = {"torch": torch, "DEV": simulated_device}
    report = trace(MOVE_THEN_MIX, namespace)

    assert [(t.line, t.source, t.target, t.count, t.bytes) for t in report.transfers] == [
        (3, "cpu", simulated_device, 1, 4 * 8 * 4)
    ]
    assert report.transfers[0].names == ("a",)
    d = report.first_divergence
    assert d is not None
    assert (d.line, d.function, d.op, d.module) == (5, "<cell>", "add.Tensor", None)
    assert d.names == ("a_dev", "b")
    assert d.devices == ("cpu", simulated_device)
    assert d.raised and d.source == "d = a_dev + b"
    # the cell's error is kept; everything before it is reported, nothing after it ran
    assert isinstance(report.error, RuntimeError) and MISMATCH in str(report.error)
    assert "e" not in namespace and torch.equal(namespace["c"], namespace["b"] * 2)
    assert no_modes_left()

    text = report.text()
    assert "First divergence: line 5: add.Tensor failed mixing a_dev (4×8) on " in text
    assert "b (4×8) on cpu" in text and "    d = a_dev + b" in text
    assert f"line 3     cpu -> {simulated_device} a: 1 copy, 128 B" in text


def step_in_a_file(x, w, device):
    y = x.to(device)
    z = w * 2
    return y + z


@pytest.mark.simulated
def test_the_same_inside_a_user_function(simulated_device: str) -> None:
    source = cell(
        """
        def step(x, w):
            y = x.to(DEV)
            z = w * 2
            return y + z
        a = torch.randn(3)
        b = torch.randn(3)
        out = step(a, b)
        """
    )
    report = trace(source, {"torch": torch, "DEV": simulated_device})
    d = report.first_divergence
    assert (d.function, d.line, d.names) == ("step", 4, ("y", "z"))
    assert d.source == "return y + z"
    [copy] = report.transfers
    assert (copy.function, copy.line, copy.names, copy.bytes) == ("step", 2, ("x",), 12)
    assert "First divergence: step() line 4: add.Tensor" in report.text()

    # a function from a file: its own name, file and line
    namespace = {"torch": torch, "DEV": simulated_device, "step": step_in_a_file}
    report = trace("a = torch.randn(3)\nout = step(a, torch.ones(3), DEV)\n", namespace)
    d = report.first_divergence
    first_line = step_in_a_file.__code__.co_firstlineno
    assert (d.function, d.line, d.names) == ("step_in_a_file", first_line + 3, ("y", "z"))
    assert d.filename == __file__
    assert f"step_in_a_file() {os.path.basename(__file__)} line {first_line + 3}" in report.text()


NESTED_MODEL = cell(
    """
    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)
            self.register_buffer("scale", torch.ones(8))
        def forward(self, x):
            h = self.proj(x)
            return h * self.scale
    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = Attention()
        def forward(self, x):
            return self.attn(x)
    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(Layer() for _ in range(4))
        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = Encoder()
        def forward(self, x):
            return self.encoder(x)
    model = Model()
    model.to(DEV)
    model.encoder.layers[3].attn.scale = torch.ones(8)  # a buffer left on the cpu
    out = model(torch.randn(2, 8, device=DEV))
    """
)


@pytest.mark.simulated
def test_the_same_inside_a_module_forward_names_the_module_path(simulated_device: str) -> None:
    report = trace(NESTED_MODEL, {"torch": torch, "DEV": simulated_device})
    d = report.first_divergence
    assert d.module == "model.encoder.layers.3.attn"
    assert (d.function, d.line, d.op) == ("forward", 8, "mul.Tensor")
    assert d.names == ("h", "model.encoder.layers.3.attn.scale")
    assert d.devices == ("cpu", simulated_device)
    assert "in model.encoder.layers.3.attn: mul.Tensor failed mixing" in report.text()
    # the layers before ran on the device, each in its own module
    assert report.modules["model.encoder.layers.0.attn.proj"] >= 1
    assert report.modules["model.encoder.layers.2.attn"] >= 1
    # model.to(DEV): every parameter and buffer copied once, from one line: no loop hint
    [move] = report.transfers
    assert move.line == 30 and move.count == 4 * 3 and not move.repeated
    assert move.names[0] == "model.encoder.layers.0.attn.proj.weight"
    assert not report.hints()
    assert no_modes_left()


@pytest.mark.simulated
def test_backward_on_the_device_thread_is_attributed_to_the_backward_line(
    simulated_device: str,
) -> None:
    # like CUDA, the simulated device runs backward on autograd's own thread: no line of the
    # user's is on its stack, but the thread that called backward() waits on that line
    source = cell(
        """
        w = torch.randn(3, requires_grad=True)
        x = w.to(DEV)
        loss = (x * 2).sum()
        loss.backward()
        """
    )
    namespace = {"torch": torch, "DEV": simulated_device}
    report = trace(source, namespace)
    assert report.error is None and torch.equal(namespace["w"].grad, torch.full((3,), 2.0))
    copies = {(t.line, t.source, t.target, t.bytes) for t in report.transfers}
    assert copies == {(2, "cpu", simulated_device, 12), (4, simulated_device, "cpu", 12)}
    assert report.unattributed == 0


def test_meta_mixes_that_return_garbage_are_still_divergences() -> None:
    # on torch 2.13 a matmul with one meta input raises nothing; the trace still sees the mix
    namespace = {"torch": torch}
    report = trace(
        "x = torch.randn(4, 3)\nw = torch.randn(3, 2, device='meta')\ny = x @ w\n", namespace
    )
    assert report.error is None
    d = report.first_divergence
    assert (d.line, d.op, d.names, d.raised) == (3, "mm", ("x", "w"), False)
    assert "mm mixed x (4×3) on cpu, w (3×2) on meta" in report.text()


@pytest.mark.simulated
def test_cpu_scalars_beside_device_tensors_are_not_divergences(simulated_device: str) -> None:
    source = "x = torch.ones(3, device=DEV)\ny = x * torch.tensor(2.0)\nz = x.sum() + 1\n"
    report = trace(source, {"torch": torch, "DEV": simulated_device})
    assert report.error is None and report.first_divergence is None


def test_names_are_found_by_identity_not_by_value() -> None:
    source = cell(
        """
        x = torch.ones(2)
        twin = torch.ones(2)
        y = twin.to('meta')
        z = (x + 0).to('meta')
        _h = torch.ones(2)
        w = _h.to('meta')
        """
    )
    report = trace(source, {"torch": torch})
    names = {t.line: t.names for t in report.transfers}
    # equal values are not the same tensor; a temporary has no name; a _private name is used
    # when nothing else holds the tensor
    assert names == {3: ("twin",), 4: (), 6: ("_h",)}
