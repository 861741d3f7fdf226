"""The simulated accelerator follows CUDA's device rules: one row per operator family, with what
CUDA does (the PyTorch source it comes from, torch 2.13, in the row's comment) and what the
simulated device must do -- "cuda:0" reads "simdev:0", and the generated check's method name
carries the dispatch key the simulated device uses (wrapper_CUDA_mm reads wrapper_PrivateUse1_mm).

Every row runs in the one child process that registers the device (``@pytest.mark.simulated``).
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


def _index_put(values: torch.Tensor, accumulate: bool = False) -> torch.Tensor:
    y = torch.zeros(5, device=DEV)
    y.index_put_((torch.tensor([1, 3]),), values, accumulate=accumulate)
    return y


def _set_item() -> torch.Tensor:
    y = torch.zeros(5, device=DEV)
    y[torch.tensor([1, 3])] = torch.tensor(7.0)
    return y


def _data_parallel() -> Any:
    model = nn.DataParallel(nn.Linear(3, 2))  # on one device it moves the module there
    model.module.cpu()
    return model(torch.ones(2, 3, device=DEV))


def _rows() -> dict[str, Row]:
    x = torch.arange(5.0)
    return {
        # TensorIterator.cpp compute_types: the common device is the first non-CPU operand's
        "elementwise, cpu tensor": Row(
            lambda: x.to(DEV) + torch.ones(5), RuntimeError, iterator(DEV, "cpu")
        ),
        "elementwise, device scalar with a cpu tensor": Row(
            lambda: torch.ones(5) + torch.tensor(1.0, device=DEV),
            RuntimeError,
            iterator(DEV, "cpu"),
        ),
        # TensorIterator.cpp compute_types: "Handles CPU scalars on CUDA kernels that support them"
        "elementwise, cpu 0-dim scalar joins": Row(
            lambda: x.to(DEV) * torch.tensor(2.0), None, result=lambda: x * 2
        ),
        # native_functions.yaml mm.out "CUDA: mm_out_cuda", no NoCheck: torchgen's
        # gen_device_check (register_dispatch_key.py) checks self, mat2
        "matmul": Row(
            lambda: torch.ones(2, 3) @ torch.ones(3, 2, device=DEV),
            RuntimeError,
            generated("mat2", DEV, "cpu", "wrapper_PrivateUse1_mm"),
        ),  # fmt: skip
        # linear is CompositeImplicitAutograd: addmm(bias, input, weight.t()) is checked
        "linear, cpu input": Row(
            lambda: nn.Linear(3, 2).to(DEV)(torch.ones(4, 3)),
            RuntimeError,
            generated("mat1", "cpu", DEV, "wrapper_PrivateUse1_addmm"),
        ),  # fmt: skip
        # adaption.h check_and_update_common_device has no CPU-scalar exception
        "addmm, cpu 0-dim bias": Row(
            lambda: torch.addmm(
                torch.tensor(1.0), torch.ones(2, 3, device=DEV), torch.ones(3, 2, device=DEV)
            ),
            RuntimeError,
            generated("mat1", DEV, "cpu", "wrapper_PrivateUse1_addmm"),
        ),  # fmt: skip
        "bmm": Row(
            lambda: torch.bmm(torch.ones(1, 2, 3, device=DEV), torch.ones(1, 3, 2)),
            RuntimeError,
            generated("mat2", "cpu", DEV, "wrapper_PrivateUse1_bmm"),
        ),  # fmt: skip
        # native_functions.yaml cat.out: checked (the list argument is named once)
        "cat": Row(
            lambda: torch.cat([torch.ones(2, device=DEV), torch.ones(2)]),
            RuntimeError,
            generated("tensors", "cpu", DEV, "wrapper_PrivateUse1_cat"),
        ),  # fmt: skip
        # index_select: "CUDA: index_select_cuda", unstructured: wrapper_CUDA__index_select
        "index_select, cpu index": Row(
            lambda: torch.index_select(x.to(DEV), 0, torch.tensor([1, 2])),
            RuntimeError,
            generated("index", "cpu", DEV, "wrapper_PrivateUse1__index_select"),
        ),  # fmt: skip
        # embedding is CompositeExplicitAutograd (Embedding.cpp embedding_symint): index_select
        "embedding, cpu indices": Row(
            lambda: nn.Embedding(10, 3).to(DEV)(torch.tensor([1, 2])),
            RuntimeError,
            generated("index", "cpu", DEV, "wrapper_PrivateUse1__index_select"),
        ),  # fmt: skip
        "layer norm, cpu input": Row(
            lambda: nn.LayerNorm(3).to(DEV)(torch.ones(2, 3)),
            RuntimeError,
            generated("weight", DEV, "cpu", "wrapper_PrivateUse1__native_layer_norm"),
        ),
        "cross entropy, cpu target": Row(
            lambda: F.cross_entropy(torch.ones(2, 3, device=DEV), torch.tensor([0, 1])),
            RuntimeError,
            generated("target", "cpu", DEV, "wrapper_PrivateUse1_nll_loss_forward"),
        ),  # fmt: skip
        # TensorAdvancedIndexing.cpp check_indices_on_cpu_or_selfdevice (index.Tensor's meta)
        "x[cpu index]": Row(
            lambda: x.to(DEV)[torch.tensor([3, 1])], None, result=lambda: x[torch.tensor([3, 1])]
        ),
        "x[cpu mask]": Row(lambda: x.to(DEV)[x > 2], None, result=lambda: x[x > 2]),
        "cpu x[device index]": Row(
            lambda: x[torch.tensor([1], device=DEV)],
            IndexError,
            "indices should be either on cpu or on the same device as the indexed tensor (cpu)",
        ),  # fmt: skip
        # TensorAdvancedIndexing.cpp _index_put_impl_: indices go to self's device (make_info),
        # a 0-dim value too; other values meet TensorIterator (make_index_put_iterator)
        "index_put_, cpu indices": Row(
            lambda: _index_put(torch.ones(2, device=DEV)),
            None,
            result=lambda: torch.tensor([0.0, 1, 0, 1, 0]),
        ),  # fmt: skip
        "x[cpu index] = cpu scalar": Row(
            _set_item, None, result=lambda: torch.tensor([0.0, 7, 0, 7, 0])
        ),
        "index_put_, cpu values": Row(
            lambda: _index_put(torch.ones(2)), RuntimeError, iterator(DEV, "cpu")
        ),
        # _index_put_impl_'s CUDA branch (accumulate or deterministic: index_put_with_sort_stub)
        "index_put_ accumulate, cpu values": Row(
            lambda: _index_put(torch.ones(2), accumulate=True),
            RuntimeError,
            f"expected device {DEV} but got device cpu for value tensor",
        ),  # fmt: skip
        # Convolution.cpp check_input_same_type_as_parameters (the mkldnn wording when the
        # input's backend is mkldnn: a CPU input); type names are TensorBase::toString() as
        # torch/csrc/Exceptions.cpp processErrorMsg leaves them
        "conv, cpu input": Row(
            lambda: nn.Conv2d(3, 4, 3).to(DEV)(torch.ones(16, 3, 8, 8)),
            RuntimeError,
            "Input type (torch.FloatTensor) and weight type (simdevFloatType) should be the same "
            "or input should be a MKLDNN tensor and weight is a dense tensor",
        ),  # fmt: skip
        "conv, cpu weight": Row(
            lambda: nn.Conv2d(3, 4, 3)(torch.ones(1, 3, 8, 8, device=DEV)),
            RuntimeError,
            "Input type (simdevFloatType) and weight type (torch.FloatTensor) should be the same",
        ),  # fmt: skip
        "conv, cpu bias": Row(
            lambda: F.conv2d(
                torch.ones(1, 1, 5, 5, device=DEV),
                torch.ones(1, 1, 3, 3, device=DEV),
                torch.ones(1),
            ),
            RuntimeError,
            "Input type (simdevFloatType) and bias type (torch.FloatTensor) should be the same",
        ),
        # RNN.h check_attributes (hidden states first, then parameters), from RNN.cpp's lstm/gru
        "lstm, cpu input": Row(
            lambda: nn.LSTM(3, 4).to(DEV)(torch.ones(2, 1, 3)),
            RuntimeError,
            "Input and parameter tensors are not at the same device, found input tensor at cpu "
            f"and parameter tensor at {DEV}",
        ),  # fmt: skip
        "lstm, cpu hidden state": Row(
            lambda: nn.LSTM(3, 4).to(DEV)(
                torch.ones(2, 1, 3, device=DEV), (torch.zeros(1, 1, 4), torch.zeros(1, 1, 4))
            ),
            RuntimeError,
            f"Input and hidden tensors are not at the same device, found input tensor at {DEV} "
            "and hidden tensor at cpu",
        ),
        # torch/nn/parallel/data_parallel.py:178-184 (DataParallel.forward)
        "DataParallel, parameters moved off": Row(
            _data_parallel,
            RuntimeError,
            f"module must have its parameters and buffers on device {DEV} (device_ids[0]) but "
            "found one of them on device: cpu",
        ),  # fmt: skip
        # Copy.cpp copy_: the one operator made to cross devices
        "copy_ across devices": Row(
            lambda: torch.zeros(5, device=DEV).copy_(x), None, result=lambda: x
        ),
    }


ROWS = _rows()


@pytest.mark.simulated
@pytest.mark.parametrize("family", list(ROWS))
def test_each_family_does_what_cuda_does(simulated_device: str, family: str) -> None:
    assert simulated_device == DEV
    row = ROWS[family]
    if row.error is None:
        out = row.run()
        assert str(out.device) == DEV
        assert row.result is not None and torch.equal(out.cpu(), row.result())
        return
    with pytest.raises(row.error) as raised:
        row.run()
    assert str(raised.value).splitlines()[0] == row.message


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
