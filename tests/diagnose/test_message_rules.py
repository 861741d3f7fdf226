"""Message templates: every wording PyTorch's sources build (and real errors raised on this
machine, cpu + meta, FakeTensor faking cuda:0) is recognised as the right family with the right
devices, arguments and operators; errors that are not about devices give None.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from diagnosis_checks import diagnose, fresh_ns, run_cell

from torchdevice_magic.diagnose import (
    MessageMatch,
    normalize_device,
    parse_message,
)

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
    # a PrivateUse1 backend renamed "simdev": TensorBase::toString() is backend + scalar + Type
    (
        "Input type (torch.FloatTensor) and weight type (simdevFloatType) should be the same or "
        "input should be a MKLDNN tensor and weight is a dense tensor",
        "conv_type",
        ("cpu", "simdev"),
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


def test_fixes_are_valid_python() -> None:
    for message, *_ in FIXTURES:
        d = diagnose(RuntimeError(message))
        assert d is not None
        compile(d.fix, "<fix>", "exec")
