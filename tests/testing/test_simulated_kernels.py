"""Recurrent layers and ``torch.stft`` run on the simulated accelerator as on CUDA without
cuDNN, and a shape change in place, which its wrappers cannot follow, raises instead of leaving
a tensor whose shape and values disagree.

ATen sends an accelerator's ``nn.LSTM`` / ``nn.GRU`` to the fused cell kernels, which exist for
CUDA only (aten/src/ATen/native/cuda/RNN.cu); torchdevice_magic/testing/rnn_kernels.py computes
them on the host values. ``nn.GRU``/``nn.RNN`` with ``batch_first`` and ``torch.stft`` reshape
a result in place inside ATen (testing/reshaping_composites.py). Each runs twice, on the cpu and
on the simulated device from the same values, and outputs, states and gradients must agree.
"""

from __future__ import annotations

import itertools

import pytest
import torch

LAYERS = ("LSTM", "GRU", "RNN")


def _twins(kind: str, device: str, **options: object) -> tuple[torch.nn.Module, torch.nn.Module]:
    on_cpu = getattr(torch.nn, kind)(5, 7, **options)
    on_device = getattr(torch.nn, kind)(5, 7, **options)
    on_device.load_state_dict(on_cpu.state_dict())
    return on_cpu, on_device.to(device)


def _run(layer: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Output and final hidden state, after a backward through both."""
    output, state = layer(x)
    hidden = state[0] if isinstance(state, tuple) else state
    (output.sum() + hidden.pow(2).sum()).backward()
    return output, hidden


@pytest.mark.simulated
@pytest.mark.parametrize("kind", LAYERS)
def test_recurrent_layers_match_the_cpu_in_values_and_gradients(
    simulated_device: str, kind: str
) -> None:
    torch.manual_seed(0)
    for batch_first, layers, bidirectional, bias in itertools.product(
        (False, True), (1, 2), (False, True), (True, False)
    ):
        options = dict(
            batch_first=batch_first, num_layers=layers, bidirectional=bidirectional, bias=bias
        )
        on_cpu, on_device = _twins(kind, simulated_device, **options)
        x = torch.randn(3, 4, 5)
        expected, expected_hidden = _run(on_cpu, x)
        output, hidden = _run(on_device, x.to(simulated_device))
        assert str(output.device) == simulated_device, options
        assert output.shape == expected.shape, options
        torch.testing.assert_close(output.cpu(), expected, msg=str(options))
        torch.testing.assert_close(hidden.cpu(), expected_hidden, msg=str(options))
        for (name, cpu_param), device_param in zip(
            on_cpu.named_parameters(), on_device.parameters(), strict=True
        ):
            assert device_param.grad is not None, (name, options)
            torch.testing.assert_close(device_param.grad.cpu(), cpu_param.grad, msg=name)


@pytest.mark.simulated
def test_the_cells_and_double_precision_run_too(simulated_device: str) -> None:
    torch.manual_seed(1)
    for cell_type in (torch.nn.LSTMCell, torch.nn.GRUCell):
        on_cpu = cell_type(3, 4).double()
        on_device = cell_type(3, 4).double()
        on_device.load_state_dict(on_cpu.state_dict())
        on_device.to(simulated_device)
        x = torch.randn(2, 3, dtype=torch.float64)
        expected = on_cpu(x)
        got = on_device(x.to(simulated_device))
        if isinstance(expected, tuple):  # LSTMCell: (h, c)
            expected, got = expected[1], got[1]
        assert got.dtype == torch.float64
        torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.simulated
def test_a_hidden_state_left_on_the_cpu_gets_cudas_rnn_message(simulated_device: str) -> None:
    for kind, batch_first in itertools.product(LAYERS, (False, True)):
        layer = getattr(torch.nn, kind)(3, 4, batch_first=batch_first).to(simulated_device)
        h0 = torch.zeros(1, 2 if batch_first else 5, 4)  # the input is (2, 5, 3)
        with pytest.raises(RuntimeError, match="Input and hidden tensors are not at the same"):
            layer(torch.randn(2, 5, 3, device=simulated_device), (h0, h0) if kind == "LSTM" else h0)


@pytest.mark.simulated
def test_a_shape_change_in_place_raises_and_leaves_the_tensor_as_it_was(
    simulated_device: str,
) -> None:
    values = torch.arange(24.0).reshape(4, 3, 2)
    x = values.to(simulated_device)
    for change, name in (
        (lambda t: t.transpose_(0, 1), "transpose_"),
        (lambda t: t.unsqueeze_(0), "unsqueeze_"),
        (lambda t: t.resize_(24), "resize_"),
    ):
        with pytest.raises(
            RuntimeError, match=rf"cannot change a tensor's shape in place \({name}"
        ):
            change(x)
        assert x.shape == (4, 3, 2)
        assert torch.equal(x.cpu(), values)
        assert torch.equal((x + 1).cpu(), values + 1)
    y = torch.ones(2, 3, device=simulated_device)
    y.transpose_(0, 0)  # in place, same shape: allowed
    y.add_(1)
    assert torch.equal(y.cpu(), torch.full((2, 3), 2.0))


@pytest.mark.simulated
def test_stft_matches_the_cpu_and_a_window_left_on_the_cpu_gets_atens_message(
    simulated_device: str,
) -> None:
    torch.manual_seed(2)
    signal = torch.randn(2, 64, requires_grad=True)
    window = torch.hann_window(16)
    expected = torch.stft(signal, 16, 4, window=window, return_complex=True)
    on_device = signal.detach().to(simulated_device).requires_grad_()
    got = torch.stft(on_device, 16, 4, window=window.to(simulated_device), return_complex=True)
    assert str(got.device) == simulated_device and got.shape == expected.shape == (2, 9, 17)
    torch.testing.assert_close(got.cpu(), expected)
    expected.abs().sum().backward()
    got.abs().sum().backward()
    assert on_device.grad is not None and signal.grad is not None
    assert str(on_device.grad.device) == simulated_device
    torch.testing.assert_close(on_device.grad.cpu(), signal.grad)
    with pytest.raises(RuntimeError, match="stft input and window must be on the same device"):
        torch.stft(on_device, 16, 4, window=window, return_complex=True)


@pytest.mark.simulated
def test_matmul_with_a_vector_and_quantile_match_the_cpu(simulated_device: str) -> None:
    """ATen's composites squeeze a dimension of their own result away in place here."""
    torch.manual_seed(3)
    shapes = [((3,), (3, 5)), ((3,), (2, 3, 5)), ((2, 3), (3,)), ((4, 2, 3), (3,)), ((3,), (3,))]
    for first_shape, second_shape in shapes:
        first = torch.randn(*first_shape, requires_grad=True)
        second = torch.randn(*second_shape, requires_grad=True)
        expected = first @ second
        first_on = first.detach().to(simulated_device).requires_grad_()
        second_on = second.detach().to(simulated_device).requires_grad_()
        got = first_on @ second_on
        assert got.shape == expected.shape, (first_shape, second_shape)
        torch.testing.assert_close(got.cpu(), expected)
        expected.sum().backward()
        got.sum().backward()
        assert first_on.grad is not None and first.grad is not None
        torch.testing.assert_close(first_on.grad.cpu(), first.grad)
    values = torch.randn(7)
    for quantile in (torch.quantile, torch.nanquantile):
        got = quantile(values.to(simulated_device), 0.5)
        assert got.shape == () and str(got.device) == simulated_device
        torch.testing.assert_close(got.cpu(), quantile(values, 0.5))


@pytest.mark.simulated
def test_an_in_place_op_named_with_its_overload_is_guarded_too(simulated_device: str) -> None:
    x = torch.ones(1, 5, device=simulated_device)
    with pytest.raises(RuntimeError, match=r"shape in place \(squeeze_; a GPU can\)"):
        x.squeeze_(0)  # aten::squeeze_.dim
    assert x.shape == (1, 5) and torch.equal(x.cpu(), torch.ones(1, 5))


@pytest.mark.simulated
def test_backward_through_linear_algebra_reads_the_tensors_autograd_saved(
    simulated_device: str,
) -> None:
    """Backward formulas (cholesky, inv, qr, eigh) get tensors autograd saved, which torch
    made in C++: plain Tensors whose storage carries the values (they failed with "'Tensor'
    object has no attribute 'host'")."""
    torch.manual_seed(4)
    a = torch.randn(4, 4)
    a = a @ a.T + 4 * torch.eye(4)
    for f in (
        torch.linalg.cholesky,
        torch.linalg.inv,
        lambda t: torch.linalg.qr(t)[0],
        lambda t: torch.linalg.eigh(t)[0],
    ):
        on_cpu = a.clone().requires_grad_()
        on_device = a.to(simulated_device).requires_grad_()
        f(on_cpu).sum().backward()
        f(on_device).sum().backward()
        assert on_device.grad is not None and on_cpu.grad is not None
        torch.testing.assert_close(on_device.grad.cpu(), on_cpu.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.simulated
def test_a_gradient_through_an_in_place_write_into_a_view_reads_the_views_part(
    simulated_device: str,
) -> None:
    """Circular padding writes into views of its output; autograd's default backward for
    that reads the view's part by the wrapper's (contiguous) strides and offset, and the
    gradient came out wrong (max difference 10). The simulated accelerator replays views."""
    import torch.nn.functional as F

    torch.manual_seed(5)
    for shape, pad in (((1, 3, 3), (1, 2)), ((3, 3, 5, 5), (1, 2, 1, 2)), ((2, 3, 4), (-1, 2))):
        on_cpu = torch.randn(*shape, requires_grad=True)
        on_device = on_cpu.detach().to(simulated_device).requires_grad_()
        expected = F.pad(on_cpu, pad, mode="circular")
        got = F.pad(on_device, pad, mode="circular")
        weights = torch.arange(expected.numel()).reshape(expected.shape) % 7 + 1.0
        (expected * weights).sum().backward()
        (got * weights.to(simulated_device)).sum().backward()
        assert on_device.grad is not None and on_cpu.grad is not None
        torch.testing.assert_close(on_device.grad.cpu(), on_cpu.grad, msg=str((shape, pad)))


@pytest.mark.simulated
def test_a_conjugate_view_says_so_and_hfft_has_its_gradient(simulated_device: str) -> None:
    """``conj()`` is a lazy view: the values carry the conjugate bit, and so must the wrapper,
    or ``view_as_real`` in hfft's backward refused ("unresolved conjugated tensors")."""
    values = torch.randn(3, dtype=torch.complex64)
    conjugated = values.to(simulated_device).conj()
    assert conjugated.is_conj()
    assert torch.equal(conjugated.cpu(), values.conj())
    torch.manual_seed(6)
    on_cpu = torch.randn(6, dtype=torch.complex64, requires_grad=True)
    on_device = on_cpu.detach().to(simulated_device).requires_grad_()
    weights = torch.arange(10) % 7 + 1.0
    (torch.fft.hfft(on_cpu) * weights).sum().backward()
    (torch.fft.hfft(on_device) * weights.to(simulated_device)).sum().backward()
    assert on_device.grad is not None and on_cpu.grad is not None
    torch.testing.assert_close(on_device.grad.cpu(), on_cpu.grad)
