"""The simulated accelerator keeps values, moves bit-exactly, trains, and fails like a real one.

Every test here runs in the one child process that registers it (``@pytest.mark.simulated``);
the last test checks, in the main process, that nothing was registered there.
"""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys

import pytest
import torch

MISMATCH = "Expected all tensors to be on the same device, but found at least two devices"


@pytest.mark.simulated
def test_values_move_bit_exactly_both_ways(simulated_device: str) -> None:
    host = torch.randn(4, 5, dtype=torch.float64)
    on_device = host.to(simulated_device)
    assert str(on_device.device) == simulated_device
    assert on_device.dtype == torch.float64 and on_device.shape == (4, 5)
    back = on_device.cpu()
    assert type(back) is torch.Tensor and back.device.type == "cpu"
    assert torch.equal(back, host)
    assert torch.equal((on_device * 2 + 1).cpu(), host * 2 + 1)


@pytest.mark.simulated
def test_mixing_with_cpu_raises_the_accelerator_message(simulated_device: str) -> None:
    x = torch.ones(3, device=simulated_device)
    with pytest.raises(RuntimeError, match=f"{MISMATCH}, {simulated_device} and cpu!"):
        x + torch.ones(3)
    # the ops meta lets through on torch 2.13 raise here (with CUDA's own messages: see
    # tests/testing/test_cuda_rules.py)
    for mixed in (
        lambda: torch.ones(2, 3) @ torch.ones(3, 2, device=simulated_device),
        lambda: torch.nn.Linear(3, 2, bias=False).to(simulated_device)(torch.ones(3)),
        lambda: torch.nn.Embedding(10, 3).to(simulated_device)(torch.tensor([1, 2])),
    ):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            mixed()
    # a 0-dim cpu tensor is a scalar, as on CUDA
    assert torch.equal((x * torch.tensor(2.0)).cpu(), torch.full((3,), 2.0))


@pytest.mark.simulated
def test_views_alias_their_base(simulated_device: str) -> None:
    x = torch.zeros(2, 3, device=simulated_device)
    x[0].add_(5)
    x.t()[2].fill_(7)
    assert x.cpu().tolist() == [[5, 5, 7], [0, 0, 7]]
    assert torch.equal(x.detach().cpu(), x.cpu())


@pytest.mark.simulated
def test_module_moves_keep_parameter_identity_and_train(simulated_device: str) -> None:
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    model = copy.deepcopy(reference)
    weight = model[0].weight
    model.to(simulated_device)
    assert model[0].weight is weight and str(weight.device) == simulated_device
    inputs = torch.randn(8, 3)
    for optimizer_class, options in [
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
        (torch.optim.Adam, {}),
        (torch.optim.AdamW, {"fused": True}),
    ]:
        on_cpu, on_device = copy.deepcopy(reference), copy.deepcopy(model)
        opt_cpu = optimizer_class(on_cpu.parameters(), **options)
        opt_device = optimizer_class(on_device.parameters(), **options)
        for _ in range(3):
            for net, opt, x in (
                (on_cpu, opt_cpu, inputs),
                (on_device, opt_device, inputs.to(simulated_device)),
            ):
                loss = net(x).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        state = opt_device.state[on_device[0].weight]
        assert (
            str(state["exp_avg" if "exp_avg" in state else "momentum_buffer"].device)
            == simulated_device
        )
        for a, b in zip(on_cpu.parameters(), on_device.parameters(), strict=True):
            assert torch.equal(a.detach(), b.detach().cpu()), optimizer_class.__name__


@pytest.mark.simulated
def test_pickle_and_deepcopy_keep_values_and_device(simulated_device: str) -> None:
    x = torch.arange(6.0).reshape(2, 3).to(simulated_device)
    for copied in (pickle.loads(pickle.dumps(x)), copy.deepcopy(x)):
        assert str(copied.device) == simulated_device
        assert torch.equal(copied.cpu(), x.cpu())


@pytest.mark.simulated
def test_accelerator_api_reports_it(simulated_device: str) -> None:
    assert torch.accelerator.current_accelerator().type == simulated_device.split(":")[0]
    assert torch.accelerator.device_count() == 1
    assert x_is_wrapped_storage_less(torch.ones(2, device=simulated_device))


def x_is_wrapped_storage_less(x: torch.Tensor) -> bool:
    # data_ptr() is 0 on the device; the values are reachable through __tensor_flatten__
    names, _ = x.__tensor_flatten__()
    host = getattr(x, names[0])
    return x.data_ptr() == 0 and host.device.type == "cpu" and host.untyped_storage().nbytes() == 8


def test_nothing_is_registered_on_import() -> None:
    code = (
        "import torch, torchdevice_magic, torchdevice_magic.testing as t;"
        "assert torch._C._get_privateuse1_backend_name() == 'privateuseone';"
        "assert not t.is_registered(); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


@pytest.mark.simulated
def test_losses_and_a_transformer_block_match_cpu(simulated_device: str) -> None:
    """Structured and composite kernels (mse_loss, cross_entropy, layer norm, attention) run on
    the host values: results have the real shapes and equal the CPU's."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    a, b = torch.randn(8, 1), torch.randn(8, 1)
    loss = F.mse_loss(a.to(simulated_device), b.to(simulated_device))
    assert loss.shape == () and torch.equal(loss.cpu(), F.mse_loss(a, b))
    logits, labels = torch.randn(4, 3), torch.tensor([0, 1, 2, 1])
    ce = F.cross_entropy(logits.to(simulated_device), labels.to(simulated_device))
    assert ce.shape == () and torch.allclose(ce.cpu(), F.cross_entropy(logits, labels))

    block = torch.nn.TransformerEncoderLayer(
        16, 2, dim_feedforward=32, dropout=0.0, batch_first=True
    )
    twin = copy.deepcopy(block).to(simulated_device)
    x = torch.randn(2, 5, 16)
    out_cpu, out_device = block(x), twin(x.to(simulated_device))
    assert out_device.shape == out_cpu.shape
    assert torch.allclose(out_device.cpu(), out_cpu, atol=1e-6)
    out_cpu.pow(2).mean().backward()
    out_device.pow(2).mean().backward()
    for p_cpu, p_device in zip(block.parameters(), twin.parameters(), strict=True):
        assert str(p_device.grad.device) == simulated_device
        assert torch.allclose(p_device.grad.cpu(), p_cpu.grad, atol=1e-6)
