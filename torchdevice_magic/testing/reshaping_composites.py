"""ATen composites that change a fresh result's shape in place, made to run on the simulated
accelerator.

A wrapper tensor of this backend keeps the shape it was made with (the Python backend offers
no way to change a storage-less tensor's sizes), so an operator that changes its tensor's shape
in place raises there (:func:`undo_reshape`). A few of ATen's composite operators do
that to a result of their own, never to the caller's tensor, so on CUDA they just work:

- ``nn.GRU`` and ``nn.RNN`` with ``batch_first=True`` turn their output around with
  ``transpose_`` (``aten/src/ATen/native/RNN.cpp``): :func:`batch_first_kernel` runs them
  time-major and turns input and output around out of place;
- ``torch.matmul`` with a 1-D operand removes the dimension it added with ``squeeze_``
  (``LinearAlgebra.cpp``): :func:`matmul_kernel` adds and removes it out of place;
- ``torch.stft`` turns the FFT's output around with ``transpose_`` and ``squeeze_``
  (``SpectralOps.cpp``), ``torch.quantile`` squeezes a scalar ``q``'s dimension away:
  :func:`cpu_round_trip_kernel` computes them on the cpu and brings the result back (autograd
  records both copies, so gradients reach the device's tensors; a ``%%devicecheck --trace``
  sees those two copies, which a GPU would not make).

All are registered for AutogradPrivateUse1, where ATen's composite would otherwise run, and
call that same C++ composite (its checks and messages) rather than the Python decomposition
``OpOverload.decompose`` would prefer. Arguments on more than one device go straight to the
composite, which raises CUDA's message before it reshapes anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: the recurrent operators whose batch_first output ATen turns around in place
BATCH_FIRST_IN_PLACE = ("gru.input", "rnn_tanh.input", "rnn_relu.input")
#: composites computed on the cpu and brought back
CPU_ROUND_TRIP = (
    "stft",
    "stft.center",
    "quantile",
    "quantile.scalar",
    "nanquantile",
    "nanquantile.scalar",
)


def _overload(name: str) -> Any:
    import torch

    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def batch_first_kernel(name: str) -> Callable[..., Any]:
    """The kernel for ``aten::<name>`` (``gru.input``...): time-major, with the batch_first
    transposes out of place (autograd records them as it records ATen's)."""
    import torch

    op = _overload(name)
    composite = torch._C.DispatchKey.CompositeImplicitAutograd

    def kernel(*args: Any) -> Any:
        *rest, batch_first = args
        if not batch_first:
            return op._op_dk(composite, *args)
        output, hidden = op._op_dk(composite, args[0].transpose(0, 1), *rest[1:], False)
        return output.transpose(0, 1), hidden

    return kernel


def matmul_kernel(name: str) -> Callable[..., Any]:
    """The kernel for ``aten::matmul``: a 1-D operand gets its dimension of 1 out of place
    (ATen's composite removes it with ``squeeze_``), as torch.matmul documents: prepended to
    the first (and removed after), appended to the second."""
    import torch

    op = _overload(name)
    composite = torch._C.DispatchKey.CompositeImplicitAutograd

    def kernel(first: Any, second: Any) -> Any:
        if first.dim() == 1 and second.dim() >= 2:
            return op._op_dk(composite, first.unsqueeze(0), second).squeeze(-2)
        if second.dim() == 1 and first.dim() >= 2:
            return op._op_dk(composite, first, second.unsqueeze(-1)).squeeze(-1)
        return op._op_dk(composite, first, second)

    return kernel


def cpu_round_trip_kernel(name: str) -> Callable[..., Any]:
    """The kernel for ``aten::<name>`` (``stft``...): ATen's composite on cpu copies of the
    arguments, its result copied back to their device."""
    import torch
    from torch.utils._pytree import tree_leaves, tree_map

    op = _overload(name)
    composite = torch._C.DispatchKey.CompositeImplicitAutograd

    def kernel(*args: Any, **kwargs: Any) -> Any:
        devices = {
            leaf.device for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)
        }
        if len(devices) != 1:  # mixed: ATen raises its own message first
            return op._op_dk(composite, *args, **kwargs)
        (device,) = devices
        on_cpu = tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, (args, kwargs))
        result = op._op_dk(composite, *on_cpu[0], **on_cpu[1])
        return tree_map(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v, result)

    return kernel


def reshaping_kernels() -> dict[str, Callable[..., Any]]:
    """Operator name -> its AutogradPrivateUse1 kernel."""
    kernels = {name: batch_first_kernel(name) for name in BATCH_FIRST_IN_PLACE}
    kernels.update({name: cpu_round_trip_kernel(name) for name in CPU_ROUND_TRIP})
    kernels["matmul"] = matmul_kernel("matmul")
    return kernels


def undo_reshape(name: str, host: Any, shape: Any, stride: Any, offset: int) -> None:
    """A wrapper's shape is fixed when it is made (this Python backend has no way to change a
    storage-less tensor's sizes), so an operator that changes its tensor's shape in place
    (``transpose_``, ``unsqueeze_``, ``resize_`` to another shape...) would leave the wrapper
    and its values disagreeing. The values get their shape back and the call raises, naming
    the out-of-place form (CUDA does these)."""
    host.as_strided_(shape, stride, offset)
    operator = name.partition("::")[2].partition(".")[0]
    if operator.startswith("resize"):
        instead = "make a tensor of the new shape (torch.empty(shape, device=x.device))"
    else:
        instead = f"use the out-of-place form (x = x.{operator.rstrip('_')}(...))"
    raise RuntimeError(
        f"the simulated accelerator simdev cannot change a tensor's shape in place "
        f"({operator}; a GPU can): {instead}, or run this step on the cpu"
    )
