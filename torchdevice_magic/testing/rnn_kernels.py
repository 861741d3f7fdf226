"""The fused LSTM and GRU cell kernels of the simulated accelerator, on its host values.

ATen sends ``nn.LSTM`` / ``nn.GRU`` (and ``nn.LSTMCell`` / ``nn.GRUCell``) on an accelerator
that is not cuDNN's -- CUDA without cuDNN, XPU, a PrivateUse1 backend such as ``simdev`` -- to
the fused cell operators ``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell`` and their
backward. Those have CUDA kernels only (``aten/src/ATen/native/cuda/RNN.cu``), so the boxed
fallback, which runs every operator on the host values, finds no CPU kernel for them. These
functions compute what the CUDA kernels compute, element for element, with the same outputs
and the same workspace layout (what the backward reads back):

- LSTM: gates ``[i | f | g | o]`` per row (``4 * hidden``); ``cy = f * cx + i * g``,
  ``hy = o * tanh(cy)``; the workspace holds the activated gates.
- GRU: gates ``[r | z | n]`` per row (``3 * hidden``); ``n = tanh(in + b_in + r * (hn + b_hn))``,
  ``hy = n + z * (hx - n)``; the workspace holds ``[r | z | n | hx | hn + b_hn]``.

Half and bfloat16 are computed in float32 and rounded once at the end, as the CUDA kernels
accumulate in ``acc_type``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _wide(*tensors: Any) -> tuple[Any, ...]:
    """The tensors in float32 when they are half or bfloat16 (None stays None)."""
    import torch

    narrow = (torch.float16, torch.bfloat16)
    return tuple(t.float() if t is not None and t.dtype in narrow else t for t in tensors)


def lstm_cell(
    input_gates: Any, hidden_gates: Any, cx: Any, input_bias: Any = None, hidden_bias: Any = None
) -> tuple[Any, Any, Any]:
    """``aten::_thnn_fused_lstm_cell``: (hy, cy, workspace)."""
    import torch

    dtype = input_gates.dtype
    gates, other, cell = _wide(input_gates, hidden_gates, cx)
    gates = gates + other
    if input_bias is not None:
        first, second = _wide(input_bias, hidden_bias)
        gates = gates + first + second
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cell + i * g
    hy = o * cy.tanh()
    workspace = torch.cat((i, f, g, o), 1)
    return hy.to(dtype), cy.to(dtype), workspace.to(dtype)


def lstm_cell_backward(
    grad_hy: Any, grad_cy: Any, cx: Any, cy: Any, workspace: Any, has_bias: bool
) -> tuple[Any, Any, Any]:
    """``aten::_thnn_fused_lstm_cell_backward_impl``: (grad of the gates, grad of cx, grad of
    the bias: the gates' grad summed over the batch, or None without a bias)."""
    import torch

    if grad_hy is None and grad_cy is None:
        return None, None, None
    dtype = workspace.dtype
    cell, cell_out, saved = _wide(cx, cy, workspace)
    zeros = torch.zeros_like(cell)
    go = _wide(grad_hy)[0] if grad_hy is not None else zeros
    goc = _wide(grad_cy)[0] if grad_cy is not None else zeros
    i, f, g, o = saved.chunk(4, 1)
    tanh_cy = cell_out.tanh()
    grad_c = go * o * (1 - tanh_cy * tanh_cy) + goc
    grad_gates = torch.cat(
        (
            grad_c * g * (1 - i) * i,
            grad_c * cell * (1 - f) * f,
            grad_c * i * (1 - g * g),
            go * tanh_cy * (1 - o) * o,
        ),
        1,
    )
    grad_bias = grad_gates.sum(0).to(dtype) if has_bias else None
    return grad_gates.to(dtype), (grad_c * f).to(dtype), grad_bias


def gru_cell(
    input_gates: Any, hidden_gates: Any, hx: Any, input_bias: Any = None, hidden_bias: Any = None
) -> tuple[Any, Any]:
    """``aten::_thnn_fused_gru_cell``: (hy, workspace)."""
    import torch

    dtype = input_gates.dtype
    gates, other, hidden = _wide(input_gates, hidden_gates, hx)
    ir, ii, in_ = gates.chunk(3, 1)
    hr, hi, hn = other.chunk(3, 1)
    if input_bias is not None:
        first, second = _wide(input_bias, hidden_bias)
        b1r, b1i, b1n = first.chunk(3)
        b2r, b2i, b2n = second.chunk(3)
        ir, ii, in_ = ir + b1r, ii + b1i, in_ + b1n
        hr, hi, hn = hr + b2r, hi + b2i, hn + b2n
    r = (ir + hr).sigmoid()
    z = (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    hy = n + z * (hidden - n)
    workspace = torch.cat((r, z, n, hidden, hn), 1)
    return hy.to(dtype), workspace.to(dtype)


def gru_cell_backward(
    grad_hy: Any, workspace: Any, has_bias: bool
) -> tuple[Any, Any, Any, Any, Any]:
    """``aten::_thnn_fused_gru_cell_backward``: (grad of the input gates, grad of the hidden
    gates, grad of hx, grads of the two biases or None without them)."""
    import torch

    dtype = workspace.dtype
    go, saved = _wide(grad_hy, workspace)
    r, z, n, hx, hn = saved.chunk(5, 1)
    grad_z = go * (hx - n) * (1 - z) * z
    grad_n = go * (1 - z) * (1 - n * n)
    grad_r = grad_n * hn * (1 - r) * r
    grad_input = torch.cat((grad_r, grad_z, grad_n), 1)
    grad_hidden = torch.cat((grad_r, grad_z, grad_n * r), 1)
    grad_hx = go * z
    biases = (grad_input.sum(0), grad_hidden.sum(0)) if has_bias else (None, None)
    return (
        grad_input.to(dtype),
        grad_hidden.to(dtype),
        grad_hx.to(dtype),
        *(b.to(dtype) if b is not None else None for b in biases),
    )


#: operator name -> what computes it on the host values
HOST_KERNELS: dict[str, Callable[..., Any]] = {
    "aten::_thnn_fused_lstm_cell": lstm_cell,
    "aten::_thnn_fused_lstm_cell_backward_impl": lstm_cell_backward,
    "aten::_thnn_fused_gru_cell": gru_cell,
    "aten::_thnn_fused_gru_cell_backward": gru_cell_backward,
}
