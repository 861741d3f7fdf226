"""Tests for torchdevice_magic.diagnose: message templates, culprits, fixes, robustness.

No GPU here: the ``meta`` device stands in for ``cuda``; cpu+meta operations raise real
device-mismatch errors on torch 2.13, which are recorded below and must be recognised.
"""

from __future__ import annotations

import gc
import html
import json
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from torchdevice_magic.diagnose import (  # the subpackage's names
    Diagnosis,
    MessageMatch,
    is_user_filename,
    normalize_device,
    parse_message,
)
from torchdevice_magic.diagnose import diagnose as _diagnose


def diagnose(*args: Any, **kwargs: Any) -> Diagnosis | None:
    """This file's tests use meta as the stand-in accelerator (like the notebooks, which set
    ``allow_meta_target``): meta is an allowed target. The default -- nothing real is moved to
    meta -- is tested in test_diagnose_fixes.py."""
    kwargs.setdefault("allow_meta", True)
    return _diagnose(*args, **kwargs)


# --------------------------------------------------------------------------------------------
# Helpers: run "cells" the way IPython does
# --------------------------------------------------------------------------------------------

# IPython executes a cell from inside its own (site-packages) frame; mimic that so the
# traceback starts in a library frame, then the cell's ``<module>`` frame, as in a notebook.
_FAKE_SHELL = compile(
    textwrap.dedent(
        """
        def run_cell(code, ns):
            try:
                exec(code, ns)
            except Exception as e:
                return e
            return None
        """
    ),
    "/fake/lib/python3.11/site-packages/IPython/core/interactiveshell.py",
    "exec",
)
_shell_ns: dict[str, Any] = {}
exec(_FAKE_SHELL, _shell_ns)
_run_cell = _shell_ns["run_cell"]

_cell_counter = 0


def run_cell(cell: str, ns: dict[str, Any]) -> BaseException:
    """Execute ``cell`` in ``ns`` with an IPython-like filename; return the exception."""
    global _cell_counter
    _cell_counter += 1
    code = compile(cell, f"<ipython-input-{_cell_counter}-0123456789ab>", "exec")
    exc = _run_cell(code, ns)
    assert exc is not None, "the cell was expected to fail"
    return exc


def define(source: str, ns: dict[str, Any], filename: str = "/tmp/ipykernel_4242/987.py") -> None:
    """Define functions/classes as a notebook cell would (ipykernel-style filename)."""
    exec(compile(textwrap.dedent(source), filename, "exec"), ns)


def fresh_ns() -> dict[str, Any]:
    return {
        "torch": torch,
        "nn": nn,
        "F": F,
        "DataLoader": DataLoader,
        "TensorDataset": TensorDataset,
    }


def names(d: Diagnosis) -> dict[str, tuple[str, ...]]:
    return {c.name: c.devices for c in d.culprits}


# --------------------------------------------------------------------------------------------
# Message templates (texts as PyTorch's C++/Python sources build them)
# --------------------------------------------------------------------------------------------

# (message, kind, devices, argument, operator)
FIXTURES: list[tuple[str, str, tuple[str, ...], str | None, str | None]] = [
    # TensorIterator::compute_types and FakeTensorDeviceMismatchError
    (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!",
        "found_two_devices",
        ("cuda:0", "cpu"),
        None,
        None,
    ),
    # adaption.cpp common_device_check_failure, 1.11-2.x wording
    (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu! (when checking argument for argument mat1 in method wrapper_addmm)",
        "found_two_devices",
        ("cuda:0", "cpu"),
        "mat1",
        "addmm",
    ),
    # the same, as some 1.x releases shipped it ("arugment")
    (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cpu and cuda:0! (when checking arugment for argument index in method "
        "wrapper__index_select)",
        "found_two_devices",
        ("cpu", "cuda:0"),
        "index",
        "index_select",
    ),
    # adaption.cpp, current wording
    (
        "Expected all tensors to be on the same device, but got mat1 is on cpu, different "
        "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)",
        "different_from_other",
        ("cpu", "cuda:0"),
        "mat1",
        "addmm",
    ),
    (
        "Expected all tensors to be on the same device, but got index is on cpu, different "
        "from other tensors on cuda:0 (when checking argument in method "
        "wrapper_CUDA__index_select)",
        "different_from_other",
        ("cpu", "cuda:0"),
        "index",
        "index_select",
    ),
    # sparse addmm on CPU
    (
        "Expected all tensors to be on the same device. addmm: expected 'mat1' to be a CPU "
        "tensor, but got tensor on cuda:0",
        "expected_cpu_tensor",
        ("cpu", "cuda:0"),
        "mat1",
        "addmm",
    ),
    # torch._prims_common.check_same_device (what cpu+meta raises on torch 2.13)
    (
        "Tensor on device cpu is not on the expected device meta!",
        "not_on_expected_device",
        ("cpu", "meta"),
        None,
        None,
    ),
    (
        "Tensor on device mps:0 is not on the expected device cpu!",
        "not_on_expected_device",
        ("mps:0", "cpu"),
        None,
        None,
    ),
    # Convolution.cpp check_input_same_type_as_parameters, old type names
    (
        "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be "
        "the same or input should be a MKLDNN tensor and weight is a dense tensor",
        "conv_type",
        ("cpu", "cuda"),
        "input",
        "weight",
    ),
    (
        "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be "
        "the same",
        "conv_type",
        ("cuda", "cpu"),
        "input",
        "weight",
    ),
    (
        "Input type (MPSFloatType) and weight type (torch.FloatTensor) should be the same",
        "conv_type",
        ("mps", "cpu"),
        "input",
        "weight",
    ),
    (
        "Input type (torch.FloatTensor) and bias type (torch.cuda.FloatTensor) should be the "
        "same or input should be a MKLDNN tensor and bias is a dense tensor",
        "conv_type",
        ("cpu", "cuda"),
        "input",
        "bias",
    ),
    # TensorAdvancedIndexing.cpp
    (
        "indices should be either on cpu or on the same device as the indexed tensor (cuda:0)",
        "indices_device",
        ("cuda:0",),
        "indices",
        "index",
    ),
    (
        "expected device cuda:0 but got device cpu for value tensor",
        "value_device",
        ("cuda:0", "cpu"),
        "value",
        "index_put_",
    ),
    (
        "expected device cuda:0 but got device cpu",
        "value_device",
        ("cuda:0", "cpu"),
        None,
        None,
    ),
    # TensorUtils.cpp checkSameGPU / checkAllSameGPU
    (
        "Tensor for argument #2 'mat1' is on CPU, but expected it to be on GPU (while "
        "checking arguments for addmm)",
        "tensor_on_cpu",
        ("cpu", "cuda"),
        "mat1",
        "addmm",
    ),
    (
        "Tensor for argument #1 'self' is on CPU, Tensor for argument #2 'mat1' is on CPU, "
        "but expected them to be on GPU (while checking arguments for addmm)",
        "tensor_on_cpu",
        ("cpu", "cuda"),
        "self",
        "addmm",
    ),
    (
        "Expected tensor for argument #1 'input' to have the same device as tensor for "
        "argument #2 'weight'; but device 1 does not equal 0 (while checking arguments for "
        "cudnn_convolution)",
        "same_gpu",
        ("cuda:1", "cuda:0"),
        "input",
        "cudnn_convolution",
    ),
    # TensorUtils.cpp checkDeviceType
    (
        "Expected tensor to have cuda DeviceType, but got tensor with cpu DeviceType (while "
        "checking arguments for cudnn_batch_norm)",
        "device_type_check",
        ("cuda", "cpu"),
        None,
        "cudnn_batch_norm",
    ),
    # THC-era (PyTorch 1.x) argument checks
    (
        "Expected object of device type cuda but got device type cpu for argument #1 'self' "
        "in call to _th_addmm",
        "device_type_arg",
        ("cuda", "cpu"),
        "self",
        "_th_addmm",
    ),
    (
        "Expected object of backend CUDA but got backend CPU for argument #2 'mat1'",
        "backend_arg",
        ("cuda", "cpu"),
        "mat1",
        None,
    ),
    # RNN.h check_attributes
    (
        "Input and parameter tensors are not at the same device, found input tensor at "
        "cuda:0 and parameter tensor at cpu",
        "rnn_params",
        ("cuda:0", "cpu"),
        "parameter",
        None,
    ),
    (
        "Input and hidden tensors are not at the same device, found input tensor at cuda:0 "
        "and hidden tensor at cpu",
        "rnn_hidden",
        ("cuda:0", "cpu"),
        "hidden",
        None,
    ),
    # torch/nn/parallel/data_parallel.py
    (
        "module must have its parameters and buffers on device cuda:0 (device_ids[0]) but "
        "found one of them on device: cpu",
        "data_parallel",
        ("cuda:0", "cpu"),
        None,
        "DataParallel",
    ),
    # meta tensors (Tensor.to / Module.to)
    ("Cannot copy out of meta tensor; no data!", "meta_copy", ("meta",), None, None),
    (
        "Cannot copy out of meta tensor; no data! Please use torch.nn.Module.to_empty() "
        "instead of torch.nn.Module.to() when moving module from meta to a different device.",
        "meta_copy",
        ("meta",),
        None,
        None,
    ),
    # autograd: assigning .grad
    (
        "attempting to assign a gradient with device type 'cuda' to a tensor with device "
        "type 'cpu'. Please ensure that the gradient and the tensor are on the same device",
        "grad_device",
        ("cuda", "cpu"),
        "grad",
        None,
    ),
    # FakeTensor (torch 2.0 wording) wrapped by Dynamo
    (
        "Dynamo failed to run FX node with fake tensors: call_function <built-in function "
        "add>(*(FakeTensor(..., size=(3,)), FakeTensor(..., device='cuda:0', size=(3,))), "
        "**{}): got RuntimeError('Unhandled FakeTensor Device Propagation for "
        "aten.add.Tensor, found two different devices cpu, cuda:0')",
        "fake_tensor_propagation",
        ("cpu", "cuda:0"),
        None,
        "aten.add.Tensor",
    ),
    (
        "torch.gradient expected each tensor to be on the same device, but got devices cpu "
        "and cuda:0!",
        "gradient_devices",
        ("cpu", "cuda:0"),
        None,
        "gradient",
    ),
    (
        "Expected a 'cuda' device type for generator but found 'cpu'",
        "generator_device",
        ("cuda", "cpu"),
        "generator",
        None,
    ),
    # any other "same device" check falls back to the generic template
    (
        "Expected b and A to be on the same device, but found b on cpu and A on cuda:0 instead.",
        "generic",
        ("cpu", "cuda:0"),
        None,
        None,
    ),
]


@pytest.mark.parametrize(("message", "kind", "devices", "argument", "operator"), FIXTURES)
def test_every_template_parses(
    message: str,
    kind: str,
    devices: tuple[str, ...],
    argument: str | None,
    operator: str | None,
) -> None:
    m = parse_message(message)
    assert m is not None
    assert m.kind == kind
    assert m.devices == devices
    assert m.argument == argument
    assert m.operator == operator


def test_argument_device_and_expected_follow_the_message() -> None:
    m = parse_message(FIXTURES[3][0])
    assert m is not None and (m.argument_device, m.expected) == ("cpu", "cuda:0")
    # common_device_check_failure prints the common device first, the argument's second
    m = parse_message(FIXTURES[1][0])
    assert m is not None and (m.argument_device, m.expected) == ("cpu", "cuda:0")
    m = parse_message("Tensor on device meta is not on the expected device cpu!")
    assert m is not None and (m.argument_device, m.expected) == ("meta", "cpu")


def test_conv_type_names_map_to_devices_and_dtypes() -> None:
    m = parse_message(
        "Input type (torch.cuda.HalfTensor) and weight type (torch.FloatTensor) should be the same"
    )
    assert m is not None
    assert m.types == ("torch.cuda.HalfTensor", "torch.FloatTensor")
    assert m.devices == ("cuda", "cpu")
    assert m.dtypes == ("float16", "float32")
    assert m.dtype_mismatch is True
    same = parse_message(
        "Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same"
    )
    assert same is not None and same.dtype_mismatch is False and same.dtypes == ("float32",) * 2


def test_normalize_device() -> None:
    assert normalize_device("CUDA") == "cuda"
    assert normalize_device("GPU") == "cuda"
    assert normalize_device("cuda:1") == "cuda:1"
    assert normalize_device("'cpu'") == "cpu"
    assert normalize_device("0") == "cuda:0"
    assert normalize_device("MPS") == "mps"


UNRELATED = [
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (1x3 and 4x2)"),
    RuntimeError(
        "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0"
    ),
    ValueError("Expected input batch_size (4) to match target batch_size (3)."),
    KeyError("model"),
    RuntimeError("CUDA error: device-side assert triggered"),
    RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total)"),
    AssertionError("Torch not compiled with CUDA enabled"),
    TypeError("linear(): argument 'input' (position 1) must be Tensor, not list"),
    RuntimeError(""),
    # conv's type check on one device is a dtype error (every dtype spelling torch prints)
    RuntimeError("Input type (long int) and bias type (double) should be the same"),
    RuntimeError("Input type (double) and bias type (float) should be the same"),
    RuntimeError("Input type (c10::Half) and weight type (float) should be the same"),
    RuntimeError("Input type (c10::BFloat16) and bias type (c10::Half) should be the same"),
    RuntimeError(
        "Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor) should "
        "be the same"
    ),
    RuntimeError("Input type (CUDAHalfType) and weight type (torch.cuda.FloatTensor) should be"),
    RuntimeError("expected scalar type Float but found Double"),
    RuntimeError("CUDA error: invalid device ordinal"),
]


@pytest.mark.parametrize("exc", UNRELATED, ids=lambda e: type(e).__name__ + ":" + str(e)[:30])
def test_unrelated_errors_give_none(exc: BaseException) -> None:
    assert parse_message(str(exc)) is None
    assert diagnose(exc, {"x": torch.ones(2)}, "x + 1") is None


def test_real_shape_error_is_not_a_device_error() -> None:
    ns = fresh_ns()
    exc = run_cell("model = nn.Linear(3, 2)\nx = torch.randn(1, 4)\nmodel(x)", ns)
    assert diagnose(exc, ns, "model(x)") is None


# --------------------------------------------------------------------------------------------
# Real errors raised on this machine (cpu + meta; FakeTensor can fake cuda:0)
# --------------------------------------------------------------------------------------------

META = torch.device("meta")


def _adam_state_on_meta() -> None:
    p = nn.Parameter(torch.randn(3))
    opt = torch.optim.Adam([p], lr=0.1)
    p.grad = torch.randn(3)
    opt.step()
    for state in opt.state.values():
        state["exp_avg"] = state["exp_avg"].to(META)
    opt.step()


def _assign_meta_grad() -> None:
    p = nn.Parameter(torch.randn(3))
    p.grad = torch.randn(3, device=META)


# (id, callable, exact message observed with torch 2.13.0+cpu, kind)
REAL_ERRORS = [
    (
        "add",
        lambda: torch.add(torch.randn(3), torch.randn(3, device=META)),
        "Tensor on device meta is not on the expected device cpu!",
        "not_on_expected_device",
    ),
    (
        "add_reversed",
        lambda: torch.add(torch.randn(3, device=META), torch.randn(3)),
        "Tensor on device cpu is not on the expected device meta!",
        "not_on_expected_device",
    ),
    (
        "cat",
        lambda: torch.cat([torch.randn(3), torch.randn(3, device=META)]),
        "Tensor on device meta is not on the expected device cpu!",
        "not_on_expected_device",
    ),
    (
        "stack",
        lambda: torch.stack([torch.randn(3), torch.randn(3, device=META)]),
        "Tensor on device meta is not on the expected device cpu!",
        "not_on_expected_device",
    ),
    (
        "linear_meta_input",
        lambda: nn.Linear(3, 2)(torch.randn(1, 3, device=META)),
        "Tensor on device cpu is not on the expected device meta!",
        "not_on_expected_device",
    ),
    (
        "linear_meta_model",
        lambda: nn.Linear(3, 2).to(META)(torch.randn(1, 3)),
        "Tensor on device meta is not on the expected device cpu!",
        "not_on_expected_device",
    ),
    (
        "layer_norm_meta_model",
        lambda: nn.LayerNorm(3).to(META)(torch.randn(2, 3)),
        "Tensor on device meta is not on the expected device cpu!",
        "not_on_expected_device",
    ),
    (
        "cross_entropy_meta_logits",
        lambda: F.cross_entropy(torch.randn(2, 3, device=META), torch.tensor([0, 1])),
        "Tensor on device meta is not on the expected device cpu!",
        "not_on_expected_device",
    ),
    (
        "cross_entropy_meta_target",
        lambda: F.cross_entropy(torch.randn(2, 3), torch.tensor([0, 1], device=META)),
        "Tensor on device cpu is not on the expected device meta!",
        "not_on_expected_device",
    ),
    (
        "lstm_meta_model",
        lambda: nn.LSTM(3, 4).to(META)(torch.randn(2, 1, 3)),
        "Input and parameter tensors are not at the same device, found input tensor at cpu "
        "and parameter tensor at meta",
        "rnn_params",
    ),
    (
        "lstm_meta_input",
        lambda: nn.LSTM(3, 4)(torch.randn(2, 1, 3, device=META)),
        "Input and parameter tensors are not at the same device, found input tensor at meta "
        "and parameter tensor at cpu",
        "rnn_params",
    ),
    (
        "lstm_meta_hidden",
        lambda: nn.LSTM(3, 4)(
            torch.randn(2, 1, 3),
            (torch.zeros(1, 1, 4, device=META), torch.zeros(1, 1, 4, device=META)),
        ),
        "Input and hidden tensors are not at the same device, found input tensor at cpu and "
        "hidden tensor at meta",
        "rnn_hidden",
    ),
    (
        "gru_meta_hidden",
        lambda: nn.GRU(3, 4)(torch.randn(2, 1, 3), torch.zeros(1, 1, 4, device=META)),
        "Input and hidden tensors are not at the same device, found input tensor at cpu and "
        "hidden tensor at meta",
        "rnn_hidden",
    ),
    (
        "tensor_meta_to_cpu",
        lambda: torch.randn(3, device=META).to("cpu"),
        "Cannot copy out of meta tensor; no data!",
        "meta_copy",
    ),
    (
        "module_meta_to_cpu",
        lambda: nn.Linear(2, 2, device=META).to("cpu"),
        "Cannot copy out of meta tensor; no data! Please use torch.nn.Module.to_empty() "
        "instead of torch.nn.Module.to() when moving module from meta to a different device.",
        "meta_copy",
    ),
    (
        "adam_state_on_meta",
        _adam_state_on_meta,
        "Tensor on device cpu is not on the expected device meta!",
        "not_on_expected_device",
    ),
    (
        "assign_meta_grad",
        _assign_meta_grad,
        "attempting to assign a gradient with device type 'meta' to a tensor with device type "
        "'cpu'. Please ensure that the gradient and the tensor are on the same device",
        "grad_device",
    ),
]


@pytest.mark.parametrize(
    ("fn", "observed", "kind"),
    [r[1:] for r in REAL_ERRORS],
    ids=[r[0] for r in REAL_ERRORS],
)
def test_real_errors_on_this_machine_are_recognised(fn: Any, observed: str, kind: str) -> None:
    with pytest.raises(Exception) as info:  # noqa: B017 - RuntimeError or NotImplementedError
        fn()
    text = str(info.value)
    m = parse_message(text)
    assert m is not None, text
    assert m.kind == kind
    if kind != "conv_type":
        assert "meta" in m.devices
    # the recorded fixture parses the same way (and documents what torch 2.13 says)
    recorded = parse_message(observed)
    assert recorded is not None and recorded.kind == kind
    d = diagnose(info.value)
    assert d is not None and d.kind == kind and d.message == text


def test_real_fake_tensor_error_with_a_fake_cuda_device() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    was_initialized = torch.cuda.is_initialized()
    with FakeTensorMode():
        a = torch.empty(3, 3)
        b = torch.empty(3, 3, device="cuda")
        with pytest.raises(RuntimeError) as info:
            a @ b
    assert torch.cuda.is_initialized() == was_initialized
    assert str(info.value) == (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cpu and cuda:0!"
    )
    m = parse_message(str(info.value))
    assert m == MessageMatch("found_two_devices", ("cpu", "cuda:0"))


# --------------------------------------------------------------------------------------------
# The seeds' situations, meta standing in for cuda
# --------------------------------------------------------------------------------------------


def test_seed_model_on_device_input_on_cpu() -> None:
    ns = fresh_ns()
    cell = "model = nn.Linear(3, 2).to('meta')\nx = torch.randn(1, 3)\nout = model(x)"
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    assert d.kind == "not_on_expected_device"
    assert names(d) == {"model": ("meta",), "x": ("cpu",)}
    model = next(c for c in d.culprits if c.name == "model")
    assert (model.kind, model.bytes, model.needed_bytes) == ("Linear", 0, 32)
    x = next(c for c in d.culprits if c.name == "x")
    assert (x.kind, x.bytes, x.where, x.dtype) == ("Tensor", 12, "cell", "float32")
    assert d.target == "meta"
    assert d.fix == 'x = x.to("meta")'
    lines = d.text().splitlines()
    assert lines[0] == (
        "Device mismatch: model (Linear, 32 B) is on meta; x (Tensor, 12 B) is on cpu."
    )
    assert lines[1] == 'Fix: x = x.to("meta")   # move the small thing to where the big thing is'
    assert lines[2].startswith("Note: meta tensors hold no data")
    # the fix is real Python and really fixes the cell
    exec(d.fix, ns)
    exec("out = model(x)", ns)
    assert ns["out"].device.type == "meta"


def test_seed_model_on_cpu_input_on_device() -> None:
    ns = fresh_ns()
    cell = "model = nn.Linear(10, 2)\ninput_tensor = torch.randn(1, 10, device='meta')\nmodel(input_tensor)"
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    assert names(d) == {"model": ("cpu",), "input_tensor": ("meta",)}
    # the model is the big thing: the input follows it
    assert d.target == "cpu"
    assert d.fix == 'input_tensor = input_tensor.to("cpu")'


def test_target_given_moves_everything_there() -> None:
    ns = fresh_ns()
    cell = "model = nn.Linear(10, 2)\ninput_tensor = torch.randn(1, 10, device='meta')\nmodel(input_tensor)"
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell, target="meta")
    assert d is not None
    assert d.target == "meta"
    assert d.fix == 'model.to("meta")'  # modules move in place, no rebinding
    assert "as asked" in d.text()
    # target "cuda" (as %%devicecheck -d cuda would pass): the meta model needs to_empty
    ns2 = fresh_ns()
    cell2 = "model = nn.Linear(3, 2).to('meta')\nx = torch.randn(1, 3)\nmodel(x)"
    d2 = diagnose(run_cell(cell2, ns2), ns2, cell2, target="cuda")
    assert d2 is not None and d2.target == "cuda"
    assert d2.fix == 'model.to_empty(device="cuda"); x = x.to("cuda")'
    assert "load_state_dict" in d2.note and "to_empty" in d2.note


def test_seed_dataloader_batches_stay_on_cpu() -> None:
    ns = fresh_ns()
    setup = textwrap.dedent(
        """
        X_train = torch.randn(64, 20)
        y_train = torch.randint(0, 5, (64,))
        train_loader = DataLoader(TensorDataset(X_train, y_train), batch_size=32)
        model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5)).to('meta')
        loss_function = nn.CrossEntropyLoss()
        """
    )
    exec(setup, ns)
    cell = textwrap.dedent(
        """
        for batch_X, batch_y in train_loader:
            output = model(batch_X)
            loss = loss_function(output, batch_y)
        """
    )
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    found = names(d)
    assert found["model"] == ("meta",)
    assert found["batch_X"] == ("cpu",)
    assert found["batch_y"] == ("cpu",)
    assert "train_loader" not in found and "loss_function" not in found  # no tensors of their own
    assert d.target == "meta"
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("loop", 'batch_X = batch_X.to("meta")'),
        ("loop", 'batch_y = batch_y.to("meta")'),
    ]
    assert 'Fix (first line inside the for loop): batch_X = batch_X.to("meta")' in d.text()


_TRAIN_SOURCE = """
def train(model, loader):
    for batch_X, batch_y in loader:
        output = model(batch_X)
        loss = torch.nn.functional.cross_entropy(output, batch_y)
    return loss
"""


def test_seed_failure_inside_a_user_function_names_its_locals() -> None:
    ns = fresh_ns()
    define(_TRAIN_SOURCE, ns)
    ns["model"] = nn.Linear(20, 5).to("meta")
    ns["loader"] = DataLoader(
        TensorDataset(torch.randn(8, 20), torch.randint(0, 5, (8,))), batch_size=4
    )
    cell = "train(model, loader)"
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    by_name = {c.name: c for c in d.culprits}
    # the cell only says "train(model, loader)": batch_X comes from train()'s frame
    assert by_name["batch_X"].devices == ("cpu",)
    assert by_name["batch_X"].where == "frame train"
    assert by_name["batch_X"].bytes == 4 * 20 * 4
    assert by_name["model"].devices == ("meta",)
    assert by_name["model"].where == "cell"  # same object as the frame's model: named once
    assert sum(c.name == "model" for c in d.culprits) == 1
    assert "loader" not in by_name
    assert d.fix_lines[0].where == "frame train"
    assert d.fix_lines[0].source == 'batch_X = batch_X.to("meta")'
    assert "batch_X (Tensor, 320 B, in train()) is on cpu" in d.text()
    assert 'Fix (inside train()): batch_X = batch_X.to("meta")' in d.text()


def test_frame_locals_found_without_a_namespace_or_cell() -> None:
    ns = fresh_ns()
    define(_TRAIN_SOURCE, ns)
    ns["model"] = nn.Linear(20, 5).to("meta")
    ns["loader"] = DataLoader(
        TensorDataset(torch.randn(8, 20), torch.randint(0, 5, (8,))), batch_size=4
    )
    exc = run_cell("train(model, loader)", ns)
    d = diagnose(exc)
    assert d is not None
    assert names(d) == {"model": ("meta",), "batch_X": ("cpu",), "batch_y": ("cpu",)}
    assert {c.where for c in d.culprits} == {"frame train"}
    # the model (parameters) is the big side even when the batch has more bytes
    assert d.target == "meta"


def test_real_ipython_shell_cell_and_function_frames() -> None:
    pytest.importorskip("IPython")
    from IPython.testing.globalipapp import get_ipython

    # the suite's shared test shell: clearing the singleton would break later IPython tests
    shell = get_ipython()
    try:
        shell.run_cell("import torch, torch.nn as nn", store_history=False)
        shell.run_cell(
            "def train(model, xs):\n    for batch_X in xs:\n        model(batch_X)",
            store_history=False,
        )
        shell.run_cell(
            "model = nn.Linear(3, 2).to('meta')\nxs = [torch.randn(1, 3)]", store_history=False
        )
        result = shell.run_cell("train(model, xs)", store_history=False)
        exc = result.error_in_exec
        assert exc is not None
        d = diagnose(exc, shell.user_ns, "train(model, xs)")
    finally:
        for name in ("train", "model", "xs", "nn"):
            shell.user_ns.pop(name, None)
    assert d is not None
    assert names(d) == {"model": ("meta",), "xs": ("cpu",), "batch_X": ("cpu",)}
    assert next(c for c in d.culprits if c.name == "batch_X").where == "frame train"
    # the batch is moved where it is used; the list itself (which holds it) is not
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("frame train", 'batch_X = batch_X.to("meta")')
    ]


def test_module_method_frame_uses_the_namespace_name() -> None:
    ns = fresh_ns()
    define(
        """
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.enc = nn.Linear(4, 8)
                self.head = nn.Linear(8, 2)

            def forward(self, inputs):
                hidden = self.enc(inputs)
                return self.head(hidden)

        def predict(batch):
            return net(batch)
        """,
        ns,
    )
    exec("net = Net().to('meta')", ns)
    ns["data"] = torch.randn(2, 4)
    exc = run_cell("predict(data)", ns)
    d = diagnose(exc, ns, "predict(data)")
    assert d is not None
    by_name = {c.name: c for c in d.culprits}
    # forward()'s self is the namespace's ``net``; hidden (an intermediate) is not listed
    assert by_name["self"].alias == "net"
    assert by_name["self"].devices == ("meta",)
    assert "hidden" not in by_name
    assert by_name["data"].where == "cell"
    assert d.fix == 'data = data.to("meta")'
    assert "net (Net, 232 B, self in forward()) is on meta" in d.text()


def test_seed_model_split_across_devices() -> None:
    ns = fresh_ns()
    cell = textwrap.dedent(
        """
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        model[2].to('meta')
        x = torch.randn(1, 4)
        model(x)
        """
    )
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    model = next(c for c in d.culprits if c.name == "model")
    assert model.devices == ("cpu", "meta")
    assert model.bytes_by_device == {"cpu": (4 * 8 + 8) * 4, "meta": (8 * 2 + 2) * 4}
    assert model.bytes == 160 and model.needed_bytes == 232
    assert "model (Sequential, 232 B) is on cpu and meta" in d.text()
    # the bigger part is on the cpu, but meta parameters cannot be copied: to_empty + reload
    assert d.target == "cpu"
    assert d.fix == 'model.to_empty(device="cpu")'
    assert "load_state_dict" in d.note
    # asked for meta: a plain move works
    d2 = diagnose(exc, ns, cell, target="meta")
    assert d2 is not None and d2.fix == 'model.to("meta"); x = x.to("meta")'


def test_submodule_on_same_devices_as_parent_is_not_repeated() -> None:
    ns = fresh_ns()
    ns["model"] = nn.Sequential(nn.Linear(3, 3)).to("meta")
    ns["x"] = torch.randn(1, 3)
    cell = "model[0](x)\nmodel(x)\nmodel.to('meta')"
    d = diagnose(RuntimeError("Tensor on device cpu is not on the expected device meta!"), ns, cell)
    assert d is not None
    assert names(d) == {"model": ("meta",), "x": ("cpu",)}


def test_attribute_chains_resolve_modules_but_not_tensor_parts() -> None:
    ns = fresh_ns()
    define(
        """
        class Holder:
            def __init__(self):
                self.encoder = nn.Linear(3, 300).to("meta")
        """,
        ns,
    )
    exec("self_like = Holder()\nmodel = nn.Sequential(nn.Linear(3, 3))\nx = torch.randn(1, 3)", ns)
    cell = "h = self_like.encoder(x.T.T)\nw = model[0].weight\nprint(x.shape, x.grad, model[0].weight.data)"
    d = diagnose(RuntimeError("Tensor on device cpu is not on the expected device meta!"), ns, cell)
    assert d is not None
    # the user's attribute chain is followed; x.T / x.grad / x.data and model[0].weight are
    # parts of things already listed
    assert names(d) == {"self_like.encoder": ("meta",), "x": ("cpu",), "model": ("cpu",)}
    assert d.target == "meta"
    assert d.fix == 'x = x.to("meta"); model.to("meta")'


def test_optimizer_state_on_another_device() -> None:
    # as after loading an optimizer checkpoint onto the CPU for a model on the device
    ns = fresh_ns()
    cell = textwrap.dedent(
        """
        model = nn.Linear(4, 4, device='meta')
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
            opt.state[p] = {'step': torch.tensor(1.0), 'exp_avg': torch.zeros(p.shape),
                            'exp_avg_sq': torch.zeros(p.shape)}
        opt.step()
        """
    )
    exc = run_cell(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    opt = next(c for c in d.culprits if c.name == "opt")
    assert opt.kind == "Adam"
    assert opt.devices == ("cpu", "meta")  # params on meta, state on cpu; step counters ignored
    # the state's tensors as the scan counts them: exp_avg/exp_avg_sq plus the step counters
    assert opt.bytes_by_device == {"cpu": 2 * (16 + 4) * 4 + 2 * 4, "meta": 0}
    # optimizer state follows its parameters, although it has more bytes than the model
    assert d.target == "meta"
    assert d.fix == (
        'for s in opt.state.values(): s.update({k: v.to("meta") for k, v in s.items() '
        'if torch.is_tensor(v) and k != "step"})'
    )
    exec(d.fix, ns)
    exec("opt.step()", ns)  # fixed


def test_wrapped_device_error_is_found_through_cause_and_context() -> None:
    ns = fresh_ns()
    ns["model"] = nn.Linear(3, 2).to("meta")
    ns["x"] = torch.randn(1, 3)
    cell_cause = (
        "try:\n    model(x)\nexcept RuntimeError as e:\n    raise ValueError('step failed') from e"
    )
    d = diagnose(run_cell(cell_cause, ns), ns, cell_cause)
    assert d is not None and d.kind == "not_on_expected_device"
    assert d.message == "Tensor on device meta is not on the expected device cpu!"
    assert names(d) == {"model": ("meta",), "x": ("cpu",)}
    cell_context = "try:\n    model(x)\nexcept RuntimeError:\n    raise KeyError('oops')"
    d = diagnose(run_cell(cell_context, ns), ns, cell_context)
    assert d is not None and d.fix == 'x = x.to("meta")'


def test_rnn_hidden_state_note_and_fix() -> None:
    ns = fresh_ns()
    cell = textwrap.dedent(
        """
        lstm = nn.LSTM(3, 4)
        seq = torch.randn(2, 1, 3)
        h0 = (torch.zeros(1, 1, 4, device='meta'), torch.zeros(1, 1, 4, device='meta'))
        out, _ = lstm(seq, h0)
        """
    )
    d = diagnose(run_cell(cell, ns), ns, cell)
    assert d is not None and d.kind == "rnn_hidden"
    assert names(d)["h0"] == ("meta",)
    assert d.fix == 'h0 = tuple(t.to("cpu") for t in h0)'
    assert "hidden state" in d.note


def test_conv_dtype_mismatch_on_one_device_is_not_a_device_error() -> None:
    # conv's "Input type (double) and bias type (float)" is raised for dtype mismatches too;
    # on one device it is not ours to explain (it used to be reported as a device problem)
    ns = fresh_ns()
    cell = (
        "conv = nn.Conv2d(1, 2, 3)\nimg = torch.randn(1, 1, 5, 5, dtype=torch.float64)\nconv(img)"
    )
    exc = run_cell(cell, ns)
    assert str(exc) == "Input type (double) and bias type (float) should be the same"
    assert diagnose(exc, ns, cell) is None
    exc = run_cell("conv(torch.ones(1, 1, 5, 5, dtype=torch.long))", ns)
    assert "long int" in str(exc) or "Long" in str(exc), str(exc)
    assert diagnose(exc, ns, cell) is None


def test_conv_device_and_dtype_mismatch_fix_uses_device_and_dtype() -> None:
    ns = fresh_ns()
    ns["conv"] = nn.Conv2d(1, 2, 3).to("meta")
    ns["img"] = torch.randn(1, 1, 5, 5, dtype=torch.float16)
    msg = (
        "Input type (torch.HalfTensor) and weight type (torch.cuda.FloatTensor) should be the same"
    )
    d = diagnose(RuntimeError(msg), ns, "conv(img)", target="meta")
    assert d is not None
    assert d.fix == 'img = img.to("meta", torch.float32)'
    assert "also covers dtype mismatches" in d.note


def test_data_parallel_message_moves_the_module_to_device_ids_0() -> None:
    ns = fresh_ns()
    ns["model"] = nn.DataParallel(nn.Linear(3, 2))
    ns["x"] = torch.randn(4, 3)
    msg = (
        "module must have its parameters and buffers on device cuda:0 (device_ids[0]) but "
        "found one of them on device: cpu"
    )
    d = diagnose(RuntimeError(msg), ns, "out = model(x)")
    assert d is not None and d.kind == "data_parallel"
    assert d.target == "cuda:0"
    assert d.fix == 'model.to("cuda:0")'
    assert "device_ids[0]" in d.note and 'model.to(f"cuda:{model.device_ids[0]}")' in d.note


def test_indices_message_moves_the_index_tensor() -> None:
    ns = fresh_ns()
    ns["data"] = torch.randn(10, 3)
    ns["idx"] = torch.tensor([1, 2], device="meta")
    msg = "indices should be either on cpu or on the same device as the indexed tensor (cpu)"
    d = diagnose(IndexError(msg), ns, "rows = data[idx]")
    assert d is not None and d.kind == "indices_device"
    assert d.fix == 'idx = idx.to("cpu")'
    assert "index tensor" in d.note


def test_meta_copy_suggests_to_empty_and_reload() -> None:
    ns = fresh_ns()
    cell = "model = nn.Linear(2, 2, device='meta')\nmodel.to('cpu')"
    d = diagnose(run_cell(cell, ns), ns, cell)
    assert d is not None and d.kind == "meta_copy"
    assert d.target == "cpu"
    assert d.fix == 'model.to_empty(device="cpu")'
    assert "model.load_state_dict(" in d.note
    exec(d.fix, ns)
    assert ns["model"].weight.device.type == "cpu"


def test_trainable_leaf_keeps_being_a_leaf() -> None:
    ns = fresh_ns()
    ns["w"] = torch.randn(3, 3, device="meta", requires_grad=True)
    ns["b"] = nn.Parameter(torch.randn(3, device="meta"))
    ns["x"] = torch.randn(8, 3)
    d = diagnose(
        RuntimeError("Tensor on device cpu is not on the expected device meta!"),
        ns,
        "y = x @ w + b",
        target="cpu",
    )
    assert d is not None
    assert d.fix_lines[0].source == 'w = w.detach().to("cpu").requires_grad_()'
    assert d.fix_lines[1].source == 'b = torch.nn.Parameter(b.detach().to("cpu"))'
    assert "optimizer" in d.note


def test_no_culprits_still_explains_the_message() -> None:
    exc = RuntimeError(FIXTURES[3][0])
    d = diagnose(exc)
    assert d is not None
    assert d.culprits == []
    assert d.argument == "mat1" and d.operator == "addmm"
    assert d.target == "cuda:0"
    assert d.fix.startswith("# move the tensor passed as 'mat1' of addmm to \"cuda:0\"")
    compile(d.fix, "<fix>", "exec")  # still Python
    assert d.text().splitlines()[0] == (
        "Device mismatch: the operation mixed cpu and cuda:0 tensors (argument 'mat1' in addmm)."
    )


def test_moving_to_cpu_mentions_the_accelerator_alternative() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    # a FakeTensor is the one way to hold a "cuda:0" tensor on this machine
    with FakeTensorMode():
        x = torch.empty(1, 3, device="cuda")
    ns = fresh_ns()
    ns["model"] = nn.Linear(3, 2)
    ns["x"] = x
    msg = (
        "Expected all tensors to be on the same device, but got mat1 is on cuda:0, different "
        "from other tensors on cpu (when checking argument in method wrapper_CUDA_addmm)"
    )
    d = diagnose(RuntimeError(msg), ns, "model(x)")
    assert d is not None
    assert names(d) == {"model": ("cpu",), "x": ("cuda:0",)}
    assert next(c for c in d.culprits if c.name == "x").kind == "FakeTensor"
    assert d.target == "cpu"
    assert d.fix == 'x = x.to("cpu")'
    assert d.note == 'to run on cuda:0 instead: model.to("cuda:0")'
    # with only one side known, the fix goes to the other device the message names
    ns["x"] = torch.randn(1, 3)
    d2 = diagnose(RuntimeError(msg), ns, "model(x)")
    assert d2 is not None and names(d2) == {"model": ("cpu",), "x": ("cpu",)}
    assert d2.target == "cpu"  # the message's expected device
    # the user's target wins and no alternative is offered
    d3 = diagnose(RuntimeError(msg), ns, "model(x)", target="cuda")
    assert d3 is not None and d3.fix == 'model.to("cuda"); x = x.to("cuda")' and d3.note == ""


def test_fixes_are_valid_python() -> None:
    for message, *_ in FIXTURES:
        d = diagnose(RuntimeError(message))
        assert d is not None
        compile(d.fix, "<fix>", "exec")


# --------------------------------------------------------------------------------------------
# Robustness, rendering, rules
# --------------------------------------------------------------------------------------------


class _Explodes:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("boom")

    @property
    def __class__(self) -> Any:  # type: ignore[override]
        raise RuntimeError("no class for you")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no eq")

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        raise RuntimeError("no len")


class _HostileList(list):
    def __iter__(self) -> Any:
        raise RuntimeError("no iter")

    def __getitem__(self, i: Any) -> Any:
        raise RuntimeError("no getitem")


class _HostileDict(dict):
    def values(self) -> Any:
        raise RuntimeError("no values")

    def items(self) -> Any:
        raise RuntimeError("no items")


class _HostileModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def parameters(self, recurse: bool = True) -> Any:
        raise RuntimeError("no parameters")

    def __getattr__(self, name: str) -> Any:
        if name == "lin":
            return super().__getattr__(name)
        raise RuntimeError("no attr")


class _HostileMapping(dict):
    def __getitem__(self, key: Any) -> Any:
        if key == "bad":
            raise RuntimeError("no item")
        return super().__getitem__(key)


class _BadStr(RuntimeError):
    def __str__(self) -> str:
        raise RuntimeError("no str")


def test_hostile_namespace_does_not_crash_and_real_culprits_survive() -> None:
    ns = _HostileMapping(fresh_ns())
    ns.update(
        {
            "model": nn.Linear(3, 2).to("meta"),
            "x": torch.randn(1, 3),
            "weird": _Explodes(),
            "hl": _HostileList([torch.randn(2), torch.randn(2, device="meta")]),
            "hd": _HostileDict(a=torch.randn(2)),
            "hm": _HostileModule(),
            "bad": 1,
        }
    )
    cell = "weird.a.b(x)\nhl[0]\nhd['a']\nhm.lin.weight\nbad\nmodel(x)"
    d = diagnose(RuntimeError("Tensor on device cpu is not on the expected device meta!"), ns, cell)
    assert d is not None
    found = names(d)
    assert found["model"] == ("meta",) and found["x"] == ("cpu",)
    assert found["hl"] == ("cpu", "meta")  # read with list's own methods, not the override
    assert found["hd"] == ("cpu",)
    assert found["hm"] == ("cpu",)  # torch's Module.parameters, not the raising override
    assert "weird" not in found


def test_diagnose_never_raises_on_garbage_inputs() -> None:
    msg = "Tensor on device cpu is not on the expected device meta!"
    # str() raises: the message is read from args instead
    bad = diagnose(_BadStr(msg))
    assert bad is not None and bad.message == msg
    unreadable = _BadStr()
    unreadable.args = (_Explodes(),)  # type: ignore[assignment]
    assert diagnose(unreadable) is None
    for namespace in (None, {}, _Explodes(), [1, 2], {"x": _Explodes()}):
        for cell in (None, "", "def (:", "x +* 2", "%%time\nmodel(x)", "\x00", 12345):
            d = diagnose(RuntimeError(msg), namespace, cell, target="not a device!")  # type: ignore[arg-type]
            assert d is not None and d.kind == "not_on_expected_device"
    assert diagnose(_Explodes()) is None  # type: ignore[arg-type]
    assert diagnose(None) is None  # type: ignore[arg-type]


def test_ipython_magics_in_cell_still_find_names() -> None:
    ns = fresh_ns()
    ns["model"] = nn.Linear(3, 2).to("meta")
    ns["x"] = torch.randn(1, 3)
    cell = "%%time\n%time out = model(x)\n!ls\nout = model(x)"
    d = diagnose(RuntimeError("Tensor on device cpu is not on the expected device meta!"), ns, cell)
    assert d is not None and names(d) == {"model": ("meta",), "x": ("cpu",)}


def test_diagnosis_keeps_no_reference_to_user_objects() -> None:
    ns = fresh_ns()
    exc = run_cell("model = nn.Linear(3, 2).to('meta')\nx = torch.randn(1, 3)\nmodel(x)", ns)
    d = diagnose(exc, ns, "model(x)")
    assert d is not None and names(d)["x"] == ("cpu",)
    ref = weakref.ref(ns["x"])
    del exc
    ns.clear()
    gc.collect()
    assert ref() is None
    assert d.fix == 'x = x.to("meta")'


def test_html_escapes_everything_user_derived() -> None:
    evil_cls = type("<b>Evil&Net</b>", (nn.Module,), {})
    module = evil_cls()
    module.lin = nn.Linear(2, 2).to("meta")
    ns = fresh_ns()
    ns["net"] = module
    ns["x"] = torch.randn(1, 2)
    msg = (
        "Dynamo failed to run FX node with fake tensors: call_function <built-in function "
        "add>(...): got RuntimeError('Unhandled FakeTensor Device Propagation for "
        "aten.add.Tensor, found two different devices cpu, meta') <script>alert(1)</script>"
    )
    d = diagnose(RuntimeError(msg), ns, "net(x)")
    assert d is not None
    assert any(c.kind == "<b>Evil&Net</b>" for c in d.culprits)
    out = d._repr_html_()
    assert "<script>" not in out and "<b>Evil" not in out and "<built-in" not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert html.escape("<b>Evil&Net</b>") in out
    assert "&lt;built-in function add&gt;" in out
    # the text rendering is plain text: unescaped, readable
    assert "net (<b>Evil&Net</b>, 24 B) is on meta" in d.text()


def test_to_dict_is_json_and_complete() -> None:
    ns = fresh_ns()
    define(_TRAIN_SOURCE, ns)
    ns["model"] = nn.Linear(20, 5).to("meta")
    ns["loader"] = DataLoader(
        TensorDataset(torch.randn(8, 20), torch.randint(0, 5, (8,))), batch_size=4
    )
    d = diagnose(run_cell("train(model, loader)", ns), ns, "train(model, loader)")
    assert d is not None
    data = json.loads(json.dumps(d.to_dict()))
    assert data["kind"] == "not_on_expected_device"
    assert data["devices"] == ["meta", "cpu"]
    assert data["target"] == "meta"
    assert {"name": "batch_X", "where": "frame train"}.items() <= data["culprits"][1].items()
    assert data["fix_lines"][0] == {
        "where": "frame train",
        "source": 'batch_X = batch_X.to("meta")',
    }
    assert data["match"]["kind"] == "not_on_expected_device"


def test_user_frame_classification() -> None:
    torch_file = torch.nn.modules.linear.__file__
    assert not is_user_filename(torch_file)
    assert not is_user_filename(json.__file__)  # stdlib
    assert not is_user_filename("/usr/lib/python3/dist-packages/foo/bar.py")
    assert not is_user_filename("/x/lib/python3.11/site-packages/IPython/core/interactiveshell.py")
    assert not is_user_filename("<frozen runpy>")
    assert is_user_filename("<ipython-input-3-5d7ad2b1e4c7>")
    assert is_user_filename("/tmp/ipykernel_12345/3186354231.py")
    assert is_user_filename(str(Path.home() / "project" / "train.py"))


def test_module_is_pure_and_lazy_about_torch() -> None:
    """diagnose imports neither IPython/ipywidgets nor torch (in a fresh interpreter)."""
    path = Path(__file__).resolve().parents[1] / "torchdevice_magic" / "diagnose.py"
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(path.parents[1])!r})
        import importlib
        mod = importlib.import_module("torchdevice_magic.diagnose")
        bad = [m for m in ("torch", "IPython", "ipywidgets") if m in sys.modules]
        assert not bad, bad
        d = mod.diagnose(RuntimeError(
            "Tensor on device cpu is not on the expected device meta!"), {{}}, "model(x)")
        assert d is not None and d.devices == ("cpu", "meta"), d
        assert "torch" not in sys.modules
        print("OK", d.fix)
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("OK ")


def test_the_fix_line_never_wraps_inside_a_word() -> None:
    """JupyterLab's output CSS breaks <pre> text anywhere; the fix lines say not to (issue 12)."""
    import torchdevice_magic as tdm

    namespace = {"x": torch.ones(3), "w": torch.empty(3, device="meta")}
    error = RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        "meta and cpu!"
    )
    diagnosis = tdm.diagnose(error, namespace, "y = x + w")
    assert diagnosis is not None
    shown = diagnosis._repr_html_()
    body = shown.split("<details>")[0]  # the original message below is torch's, kept as is
    fixes = body.split("<pre")[1:]
    assert fixes, shown
    for part in fixes:
        assert part.startswith(' style="white-space:pre-wrap;word-break:normal')
    # the rule's internal code is said in words
    assert f"({diagnosis.kind})" not in shown or "_" not in diagnosis.kind
    assert diagnosis.kind.replace("_", " ") in shown
