"""Tracing is safe: it changes no value, always removes its modes (a failing cell, Ctrl-C),
runs nothing on a syntax error, survives hostile objects and torch.compile, and never imports
torch on the user's behalf.

Tests marked ``simulated`` run in the one child process that registers the simulated
accelerator (see conftest.py)."""

from __future__ import annotations

import pytest
import torch
from trace_checks import cell, no_modes_left

from torchdevice_magic.trace import Tracer, trace

TRAINING_STEP = cell(
    """
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model = model.to(DEV)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    data = torch.randn(32, 6)
    target = data.sum(1, keepdim=True)
    losses = []
    for step in range(3):
        batch, want = data.to(DEV), target.to(DEV)
        loss = torch.nn.functional.mse_loss(model(batch), want)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    picked = data[data[:, 0] > 0].tolist()
    weights = [p.detach().cpu() for p in model.parameters()]
    """
)


def run_plain(source: str, namespace: dict) -> dict:
    exec(compile(source, "<plain>", "exec"), namespace)
    return namespace


def assert_same_values(plain: dict, traced: dict) -> None:
    assert plain["losses"] == traced["losses"]
    assert plain["picked"] == traced["picked"]
    for a, b in zip(plain["weights"], traced["weights"], strict=True):
        assert torch.equal(a, b)
    for a, b in zip(
        plain["optimizer"].state.values(), traced["optimizer"].state.values(), strict=True
    ):
        assert torch.equal(a["exp_avg"].cpu(), b["exp_avg"].cpu())


@pytest.mark.simulated
def test_values_are_identical_with_and_without_tracing(simulated_device: str) -> None:
    plain = run_plain(TRAINING_STEP, {"torch": torch, "DEV": simulated_device})
    traced = {"torch": torch, "DEV": simulated_device}
    report = trace(TRAINING_STEP, traced)
    assert report.error is None
    assert_same_values(plain, traced)
    # and the report saw the loop: two inputs copied each step, one .item() per step
    [loop] = [t for t in report.transfers if t.line == 9]
    assert (loop.names, loop.count, loop.bytes) == (("data", "target"), 6, 3 * (32 * 6 + 32) * 4)
    assert loop.in_loop and loop.repeated
    assert loop.hint() == (
        f"line 9 copies data, target from cpu to {simulated_device} 6 times, 2.6 KiB: "
        "move the dataset once, or use pin_memory + non_blocking"
    )
    reads = {r.line: (r.count, r.ops) for r in report.host_reads}
    assert reads[14] == (3, (".item()",))
    assert reads[15][0] >= 2 and {"boolean mask", ".tolist()"} <= set(reads[15][1])


def test_values_are_identical_with_and_without_tracing_on_cpu() -> None:
    plain = run_plain(TRAINING_STEP, {"torch": torch, "DEV": "cpu"})
    traced = {"torch": torch, "DEV": "cpu"}
    report = trace(TRAINING_STEP, traced)
    assert report.error is None and not report.transfers and report.first_divergence is None
    assert_same_values(plain, traced)


def test_the_modes_are_removed_after_a_failing_cell() -> None:
    report = trace("x = torch.ones(2)\ny = x.to('meta') + x\n", {"torch": torch})
    assert isinstance(report.error, RuntimeError)
    assert report.first_divergence.line == 2 and report.first_divergence.names == (None, "x")
    assert no_modes_left()
    # and an ordinary error is an error too
    report = trace("x = torch.ones(2)\nraise ValueError('boom')\n", {"torch": torch})
    assert isinstance(report.error, ValueError) and report.first_divergence is None
    assert no_modes_left()


def test_the_modes_are_removed_when_the_cell_is_interrupted() -> None:
    namespace = {"torch": torch}
    with pytest.raises(KeyboardInterrupt):
        trace("x = torch.ones(2) * 2\nraise KeyboardInterrupt\n", namespace)
    assert no_modes_left()
    assert torch.equal(namespace["x"], torch.full((2,), 2.0))
    tracer = Tracer(namespace)
    with pytest.raises(KeyboardInterrupt), tracer:
        torch.ones(2).to("meta")
        raise KeyboardInterrupt
    assert no_modes_left() and isinstance(tracer.error, KeyboardInterrupt)
    [copy] = tracer.report().transfers  # recorded up to the interrupt, in this function
    assert (copy.source, copy.target, copy.bytes) == ("cpu", "meta", 8)
    assert copy.function == "test_the_modes_are_removed_when_the_cell_is_interrupted"


def test_a_syntax_error_runs_nothing() -> None:
    with pytest.raises(SyntaxError):
        trace("x = (", {"torch": torch})
    assert no_modes_left()


class _Hostile:
    """An object that raises on everything a careless inspector might touch."""

    @property
    def __class__(self):  # type: ignore[override]
        raise RuntimeError("do not read my class")

    def __eq__(self, other):
        raise RuntimeError("do not compare me")

    __hash__ = object.__hash__


class _HostileModule(torch.nn.Module):
    def named_modules(self, *args, **kwargs):
        raise RuntimeError("do not walk me")

    def forward(self, x):
        return x * 2


def test_hostile_objects_in_the_namespace_do_not_break_tracing() -> None:
    namespace = {"torch": torch, "weird": _Hostile(), "hostile": _HostileModule()}
    source = (
        "torch.manual_seed(0)\n"
        "y = hostile(torch.nn.Linear(2, 2)(torch.ones(2)))\n"
        "z = y.to('meta')\n"
    )
    report = trace(source, namespace)
    assert report.error is None and report.internal_errors == 0
    torch.manual_seed(0)
    assert torch.equal(namespace["y"], torch.nn.Linear(2, 2)(torch.ones(2)) * 2)
    # the Linear no name reaches keeps its type's name; the moved tensor is still named
    assert set(report.modules) == {"Linear", "hostile"}
    assert report.transfers[0].names == ("y",)
    assert no_modes_left()


def test_a_compiled_function_runs_under_the_trace_with_the_same_values() -> None:
    # dynamo leaves frames alone while a dispatch mode is active (it runs them eagerly), and
    # the recorder's own code is marked so that torch.compile never traces into it
    source = cell(
        """
        @torch.compile(backend="eager")
        def f(a, b):
            return (a * b).sin() + 1
        x = torch.randn(8)
        y = torch.randn(8)
        r = f(x, y)
        moved = r.to('meta')
        """
    )
    namespace = {"torch": torch}
    report = trace(source, namespace)
    assert report.error is None, report.error
    x, y = namespace["x"], namespace["y"]
    assert torch.equal(namespace["r"], (x * y).sin() + 1)
    assert [(t.line, t.names) for t in report.transfers] == [(7, ("r",))]
    assert no_modes_left()


def test_importing_the_module_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys, torchdevice_magic as tdm, torchdevice_magic.trace; "
        "print('torch' in sys.modules, callable(tdm.trace))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # no torch imported, and the package's trace is still the function after the submodule
    assert out.stdout.strip() == "False True"
