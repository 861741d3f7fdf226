"""The simulated accelerator follows CUDA's device rules: one row per operator family, with what
CUDA does (the PyTorch source it comes from, torch 2.13, in the row's comment) and what the
simulated device must do -- "cuda:0" reads "simdev:0", and the generated check's method name
carries the dispatch key the simulated device uses (wrapper_CUDA_mm reads wrapper_PrivateUse1_mm).

Every row runs in the one child process that registers the device (``@pytest.mark.simulated``);
on a GPU machine the same rows run on ``cuda:0`` with CUDA's names (``@pytest.mark.cuda``), so
``./dev gpu-check`` proves the table is CUDA's behaviour.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

DEV = "simdev:0"
SAME = "Expected all tensors to be on the same device"


def generated(argument: str, device: str, common: str, method: str) -> str:
    """aten/src/ATen/core/adaption.cpp, common_device_check_failure (torchgen's device check)."""
    return (
        f"{SAME}, but got {argument} is on {device}, different from other tensors on {common} "
        f"(when checking argument in method {method})"
    )


def iterator(common: str, other: str) -> str:
    """aten/src/ATen/TensorIterator.cpp, TensorIteratorBase::compute_types."""
    return f"{SAME}, but found at least two devices, {common} and {other}!"


@dataclass(frozen=True)
class Row:
    run: Callable[[], Any]
    error: type[BaseException] | None  # None: CUDA accepts the mix
    message: str = ""
    result: Callable[[], Any] | None = None  # what an accepted mix returns, computed on the CPU


def _index_put(dev: str, values: torch.Tensor, accumulate: bool = False) -> torch.Tensor:
    y = torch.zeros(5, device=dev)
    y.index_put_((torch.tensor([1, 3]),), values, accumulate=accumulate)
    return y


def _set_item(dev: str) -> torch.Tensor:
    y = torch.zeros(5, device=dev)
    y[torch.tensor([1, 3])] = torch.tensor(7.0)
    return y


def _foreach_copy(dev: str) -> torch.Tensor:
    targets = [torch.zeros(3, device=dev), torch.zeros(2, device=dev)]
    torch._foreach_copy_(targets, [torch.arange(3.0), torch.arange(2.0) + 5])
    return torch.cat(targets)


def _data_parallel(dev: str) -> Any:
    model = nn.DataParallel(nn.Linear(3, 2))  # on one device it moves the module there
    model.module.cpu()
    return model(torch.ones(2, 3, device=dev))


def _rows(dev: str, key: str, float_type: str) -> dict[str, Row]:
    """The table for ``dev``, whose generated checks carry dispatch ``key`` and whose float
    tensors print as ``float_type`` in conv's message."""
    x = torch.arange(5.0)
    return {
        # TensorIterator.cpp compute_types: the common device is the first non-CPU operand's
        "elementwise, cpu tensor": Row(
            lambda: x.to(dev) + torch.ones(5), RuntimeError, iterator(dev, "cpu")
        ),
        "elementwise, device scalar with a cpu tensor": Row(
            lambda: torch.ones(5) + torch.tensor(1.0, device=dev),
            RuntimeError,
            iterator(dev, "cpu"),
        ),
        # native_functions.yaml _foreach_copy_: "device_check: NoCheck # foreach kernels fall
        # back to slow path when tensor are on different devices" (one copy_ per pair)
        "foreach copy from cpu tensors": Row(
            lambda: _foreach_copy(dev),
            None,
            result=lambda: torch.cat([torch.arange(3.0), torch.arange(2.0) + 5]),
        ),
        # TensorIterator.cpp compute_types: "Handles CPU scalars on CUDA kernels that support them"
        "elementwise, cpu 0-dim scalar joins": Row(
            lambda: x.to(dev) * torch.tensor(2.0), None, result=lambda: x * 2
        ),
        # native_functions.yaml mm.out "CUDA: mm_out_cuda", no NoCheck: torchgen's
        # gen_device_check (register_dispatch_key.py) checks self, mat2
        "matmul": Row(
            lambda: torch.ones(2, 3) @ torch.ones(3, 2, device=dev),
            RuntimeError,
            generated("mat2", dev, "cpu", f"wrapper_{key}_mm"),
        ),  # fmt: skip
        # linear is CompositeImplicitAutograd: addmm(bias, input, weight.t()) is checked
        "linear, cpu input": Row(
            lambda: nn.Linear(3, 2).to(dev)(torch.ones(4, 3)),
            RuntimeError,
            generated("mat1", "cpu", dev, f"wrapper_{key}_addmm"),
        ),  # fmt: skip
        # adaption.h check_and_update_common_device has no CPU-scalar exception
        "addmm, cpu 0-dim bias": Row(
            lambda: torch.addmm(
                torch.tensor(1.0), torch.ones(2, 3, device=dev), torch.ones(3, 2, device=dev)
            ),
            RuntimeError,
            generated("mat1", dev, "cpu", f"wrapper_{key}_addmm"),
        ),  # fmt: skip
        "bmm": Row(
            lambda: torch.bmm(torch.ones(1, 2, 3, device=dev), torch.ones(1, 3, 2)),
            RuntimeError,
            generated("mat2", "cpu", dev, f"wrapper_{key}_bmm"),
        ),  # fmt: skip
        # native_functions.yaml cat.out: checked (the list argument is named once)
        "cat": Row(
            lambda: torch.cat([torch.ones(2, device=dev), torch.ones(2)]),
            RuntimeError,
            generated("tensors", "cpu", dev, f"wrapper_{key}_cat"),
        ),  # fmt: skip
        # index_select: "CUDA: index_select_cuda", unstructured: wrapper_CUDA__index_select
        "index_select, cpu index": Row(
            lambda: torch.index_select(x.to(dev), 0, torch.tensor([1, 2])),
            RuntimeError,
            generated("index", "cpu", dev, f"wrapper_{key}__index_select"),
        ),  # fmt: skip
        # embedding is CompositeExplicitAutograd (Embedding.cpp embedding_symint): index_select
        "embedding, cpu indices": Row(
            lambda: nn.Embedding(10, 3).to(dev)(torch.tensor([1, 2])),
            RuntimeError,
            generated("index", "cpu", dev, f"wrapper_{key}__index_select"),
        ),  # fmt: skip
        "layer norm, cpu input": Row(
            lambda: nn.LayerNorm(3).to(dev)(torch.ones(2, 3)),
            RuntimeError,
            generated("weight", dev, "cpu", f"wrapper_{key}__native_layer_norm"),
        ),
        "cross entropy, cpu target": Row(
            lambda: F.cross_entropy(torch.ones(2, 3, device=dev), torch.tensor([0, 1])),
            RuntimeError,
            generated("target", "cpu", dev, f"wrapper_{key}_nll_loss_forward"),
        ),  # fmt: skip
        # TensorAdvancedIndexing.cpp check_indices_on_cpu_or_selfdevice (index.Tensor's meta)
        "x[cpu index]": Row(
            lambda: x.to(dev)[torch.tensor([3, 1])], None, result=lambda: x[torch.tensor([3, 1])]
        ),
        "x[cpu mask]": Row(lambda: x.to(dev)[x > 2], None, result=lambda: x[x > 2]),
        "cpu x[device index]": Row(
            lambda: x[torch.tensor([1], device=dev)],
            IndexError,
            "indices should be either on cpu or on the same device as the indexed tensor (cpu)",
        ),  # fmt: skip
        # TensorAdvancedIndexing.cpp _index_put_impl_: indices go to self's device (make_info),
        # a 0-dim value too; other values meet TensorIterator (make_index_put_iterator)
        "index_put_, cpu indices": Row(
            lambda: _index_put(dev, torch.ones(2, device=dev)),
            None,
            result=lambda: torch.tensor([0.0, 1, 0, 1, 0]),
        ),  # fmt: skip
        "x[cpu index] = cpu scalar": Row(
            lambda: _set_item(dev), None, result=lambda: torch.tensor([0.0, 7, 0, 7, 0])
        ),
        "index_put_, cpu values": Row(
            lambda: _index_put(dev, torch.ones(2)), RuntimeError, iterator(dev, "cpu")
        ),
        # _index_put_impl_'s CUDA branch (accumulate or deterministic: index_put_with_sort_stub)
        "index_put_ accumulate, cpu values": Row(
            lambda: _index_put(dev, torch.ones(2), accumulate=True),
            RuntimeError,
            f"expected device {dev} but got device cpu for value tensor",
        ),  # fmt: skip
        # Convolution.cpp check_input_same_type_as_parameters (the mkldnn wording when the
        # input's backend is mkldnn: a CPU input); type names are TensorBase::toString() as
        # torch/csrc/Exceptions.cpp processErrorMsg leaves them
        "conv, cpu input": Row(
            lambda: nn.Conv2d(3, 4, 3).to(dev)(torch.ones(16, 3, 8, 8)),
            RuntimeError,
            f"Input type (torch.FloatTensor) and weight type ({float_type}) should be the same "
            "or input should be a MKLDNN tensor and weight is a dense tensor",
        ),  # fmt: skip
        "conv, cpu weight": Row(
            lambda: nn.Conv2d(3, 4, 3)(torch.ones(1, 3, 8, 8, device=dev)),
            RuntimeError,
            f"Input type ({float_type}) and weight type (torch.FloatTensor) should be the same",
        ),  # fmt: skip
        "conv, cpu bias": Row(
            lambda: F.conv2d(
                torch.ones(1, 1, 5, 5, device=dev),
                torch.ones(1, 1, 3, 3, device=dev),
                torch.ones(1),
            ),
            RuntimeError,
            f"Input type ({float_type}) and bias type (torch.FloatTensor) should be the same",
        ),
        # RNN.h check_attributes (hidden states first, then parameters), from RNN.cpp's lstm/gru
        "lstm, cpu input": Row(
            lambda: nn.LSTM(3, 4).to(dev)(torch.ones(2, 1, 3)),
            RuntimeError,
            "Input and parameter tensors are not at the same device, found input tensor at cpu "
            f"and parameter tensor at {dev}",
        ),  # fmt: skip
        "lstm, cpu hidden state": Row(
            lambda: nn.LSTM(3, 4).to(dev)(
                torch.ones(2, 1, 3, device=dev), (torch.zeros(1, 1, 4), torch.zeros(1, 1, 4))
            ),
            RuntimeError,
            f"Input and hidden tensors are not at the same device, found input tensor at {dev} "
            "and hidden tensor at cpu",
        ),
        # torch/nn/parallel/data_parallel.py:178-184 (DataParallel.forward)
        "DataParallel, parameters moved off": Row(
            lambda: _data_parallel(dev),
            RuntimeError,
            f"module must have its parameters and buffers on device {dev} (device_ids[0]) but "
            "found one of them on device: cpu",
        ),  # fmt: skip
        # Copy.cpp copy_: the one operator made to cross devices
        "copy_ across devices": Row(
            lambda: torch.zeros(5, device=dev).copy_(x), None, result=lambda: x
        ),
    }


FAMILIES = list(_rows(DEV, "PrivateUse1", "simdevFloatType"))


def _check(row: Row, device: str) -> None:
    if row.error is None:
        out = row.run()
        assert str(out.device) == device
        assert row.result is not None and torch.equal(out.cpu(), row.result())
        return
    with pytest.raises(row.error) as raised:
        row.run()
    assert str(raised.value).splitlines()[0] == row.message


@pytest.mark.simulated
@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_does_what_cuda_does(simulated_device: str, family: str) -> None:
    assert simulated_device == DEV
    _check(_rows(DEV, "PrivateUse1", "simdevFloatType")[family], DEV)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("family", FAMILIES)
def test_the_table_is_what_cuda_itself_does(family: str) -> None:
    """The same rows on a GPU, with CUDA's names: the table is CUDA's behaviour, not a guess."""
    _check(_rows("cuda:0", "CUDA", "torch.cuda.FloatTensor")[family], "cuda:0")


@pytest.mark.simulated
def test_the_generated_check_is_named_as_torchgen_names_cuda_s() -> None:
    """The wrapper names come from torch's own generator: with the CUDA key they are the ones
    CUDA users see (wrapper_CUDA_mm, wrapper_CUDA__index_select, ...)."""
    from torchdevice_magic.testing import cuda_rules

    for op, overload, cuda_name in [
        ("aten::mm", "default", "wrapper_CUDA_mm"),
        ("aten::index_select", "default", "wrapper_CUDA__index_select"),
        ("aten::native_layer_norm", "default", "wrapper_CUDA__native_layer_norm"),
        ("aten::addmm", "default", "wrapper_CUDA_addmm"),
    ]:
        found = cuda_rules.generated_check(op, overload)
        assert found is not None
        assert found[0] == cuda_name.replace("CUDA", cuda_rules.DISPATCH_KEY)
    # operators TensorIterator checks are marked NoCheck in native_functions.yaml
    assert cuda_rules.generated_check("aten::add", "Tensor") is None
    assert cuda_rules.generated_check("aten::index", "Tensor") is None


@pytest.mark.simulated
def test_type_strings_are_what_torch_prints_for_each_device(simulated_device: str) -> None:
    from torchdevice_magic.testing.cuda_rules import type_string

    assert type_string(torch.ones(1)) == "torch.FloatTensor"
    assert type_string(torch.ones(1, dtype=torch.bfloat16)) == "CPUBFloat16Type"
    assert type_string(torch.ones(1, device=simulated_device)) == "simdevFloatType"
    assert re.fullmatch(
        r"simdev\w+Type", type_string(torch.ones(1, device=simulated_device).long())
    )


def test_a_composite_registered_as_non_functional_raises_instead_of_crashing() -> None:
    """``diagonal_scatter``, ``select_scatter``, ``slice_scatter`` and ``as_strided_scatter``
    have their composite kernel under CompositeExplicitAutogradNonFunctional; the rules called
    it under CompositeExplicitAutograd, where there is none, and the process died. In a child
    process: a crash must fail this test, not the whole simulated run."""
    import subprocess
    import sys

    code = """
import torch
from torchdevice_magic.testing import simulated_accelerator
D = simulated_accelerator()
for call in (
    lambda: torch.diagonal_scatter(torch.zeros(3, 3), torch.ones(3, device=D)),
    lambda: torch.select_scatter(torch.zeros(3, 3), torch.ones(3, device=D), 0, 0),
    lambda: torch.slice_scatter(torch.zeros(3, 3), torch.ones(1, 3, device=D), 0, 0, 1),
    lambda: torch.as_strided_scatter(torch.zeros(3, 3), torch.ones(3, device=D), (3,), (4,)),
):
    try:
        call()
    except RuntimeError as error:
        print(str(error).splitlines()[0])
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and all("found at least two devices" in line for line in lines), lines
