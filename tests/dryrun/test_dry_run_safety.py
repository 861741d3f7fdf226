"""A dry run touches nothing real: for any namespace of tensors (CPU and the simulated
accelerator, views, gradients), modules, optimizers with state and containers, and any cell
that mutates them (in place, optimizer steps, moves, appends, rebinding), every name keeps its
object (same id) and every tensor its bytes, device, gradient and flags afterwards."""

from __future__ import annotations

import weakref
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchdevice_magic.dryrun import dry_run

pytestmark = pytest.mark.simulated

CELLS = [
    "t0.add_(1)",
    "t1.mul_(3)",
    "view.fill_(7)",
    "model.weight.data.zero_()",
    "with torch.no_grad():\n    model.weight.add_(1)",
    "loss = model(x).sum()\nloss.backward()\nopt.step()",
    "opt.zero_grad()",
    "opt.step()",
    "model.to('cpu')",
    "model.to(DEV)",
    "model.bias = None",
    "kept.append(t0)\nkept.clear()",
    "table['new'] = t1\ndel table['w']",
    "t0 = t0 * 2\nt1 = None",
    "x.requires_grad_(True)",
    "del t0",
    "model.weight.grad = None",
    "out = model(x.to('cpu'))",
    "t0.item()",
    "torch.nn.init.normal_(model.weight)",
]


def _bytes(tensor: torch.Tensor) -> bytes:
    host = tensor.detach().to("cpu").reshape(-1).contiguous()
    return bytes(host.view(torch.uint8).tolist()) if host.numel() else b""


def _tensor_state(tensor: Any) -> tuple:
    grad = tensor.grad
    return (
        id(tensor),
        # a weak reference left on a tensor makes the user's next Module.to() refuse to swap it
        len(weakref.getweakrefs(tensor)),
        str(tensor.device),
        tensor.dtype,
        tuple(tensor.shape),
        tensor.requires_grad,
        _bytes(tensor),
        None if grad is None else (id(grad), _bytes(grad), len(weakref.getweakrefs(grad))),
    )


def snapshot(ns: dict[str, Any]) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for name, value in ns.items():
        if isinstance(value, torch.Tensor):
            state[name] = _tensor_state(value)
        elif isinstance(value, torch.nn.Module):
            state[name] = (
                id(value),
                [(key, _tensor_state(p)) for key, p in value.named_parameters()],
                [(key, _tensor_state(b)) for key, b in value.named_buffers()],
            )
        elif isinstance(value, torch.optim.Optimizer):
            state[name] = (
                id(value),
                [[id(p) for p in group["params"]] for group in value.param_groups],
                [group["lr"] for group in value.param_groups],
                sorted(
                    (id(p), key, _tensor_state(t) if isinstance(t, torch.Tensor) else t)
                    for p, per_param in value.state.items()
                    for key, t in per_param.items()
                ),
            )
        elif isinstance(value, (list, dict)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            state[name] = (id(value), [(k, id(v)) for k, v in items])
        else:
            state[name] = id(value)
    return state


@st.composite
def namespaces(draw: st.DrawFn, device: str) -> dict[str, Any]:
    def place() -> str:
        return draw(st.sampled_from(["cpu", device]))

    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    t0 = torch.randn(draw(st.integers(1, 6)), dtype=dtype, device=place())
    t1 = torch.randint(0, 9, (3, draw(st.integers(1, 4))), device=place())
    model = torch.nn.Linear(4, 3).to(place())
    x = torch.randn(2, 4, device=draw(st.sampled_from([str(model.weight.device), "cpu"])))
    if draw(st.booleans()):
        model(x.to(model.weight.device)).sum().backward()
    optimizer = draw(st.sampled_from(["sgd", "adam"]))
    opt: torch.optim.Optimizer = (
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if optimizer == "sgd"
        else torch.optim.Adam(model.parameters())
    )
    if draw(st.booleans()) and model.weight.grad is not None:
        opt.step()
    return {
        "torch": torch,
        "DEV": device,
        "t0": t0,
        "t1": t1,
        "view": t0[:1],
        "model": model,
        "opt": opt,
        "x": x,
        "kept": [t0, model],
        "table": {"w": model.weight, "n": 3},
    }


def simulated() -> str:
    # not the simulated_device fixture: a fixture of a @given test is set up in the parent
    # process too, which must not register the accelerator
    from torchdevice_magic.testing import simulated_accelerator

    return f"{simulated_accelerator()}:0"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), cells=st.lists(st.sampled_from(CELLS), min_size=1, max_size=3))
def test_a_dry_run_leaves_every_object_bit_identical_with_its_id(
    data: st.DataObject, cells: list[str]
) -> None:
    ns = data.draw(namespaces(simulated()))
    before = snapshot(ns)
    names = set(ns)
    dry_run("\n".join(cells), ns)
    assert set(ns) == names
    assert snapshot(ns) == before
