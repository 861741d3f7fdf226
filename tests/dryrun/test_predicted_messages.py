"""The dry run's device error is the real run's, in its words: the operator and the argument the
real message names (torchgen's generated check, TensorIterator, a composite kernel's inner
operator) are in the predicted message, the diagnosis and the report's text; on ``cuda`` the
generated check is named after CUDA's dispatch key. Mixes the fake mode lets by (a CPU tensor
indexed on the device, a 0-dim CPU tensor where the generated check takes none) are predicted
too, and those the device accepts are not."""

from __future__ import annotations

import pytest
import torch

from torchdevice_magic.dryrun import dry_run
from torchdevice_magic.dryrun.gaps import real_device_error

pytestmark = pytest.mark.simulated


def namespace(device: str) -> dict:
    return {
        "torch": torch,
        "model": torch.nn.Linear(3, 2).to(device),
        "emb": torch.nn.Embedding(10, 4).to(device),
        "ids": torch.tensor([1, 2]),
        "x": torch.randn(4, 3),
        "a": torch.ones(3, device=device),
        "b": torch.ones(3),
        "on_device": torch.tensor([0, 1], device=device),
        "scalar": torch.tensor(2.0),
        "m": torch.ones(3, 3, device=device),
    }


def real_error(cell: str, ns: dict) -> BaseException:
    try:
        exec(cell, ns)
    except Exception as error:
        return error
    raise AssertionError(f"{cell!r} ran without an error")


@pytest.mark.parametrize(
    ("cell", "operator", "argument"),
    [
        ("out = model(x)", "addmm", "mat1"),  # the generated check names both
        ("out = emb(ids)", "index_select", "index"),  # embedding's kernel is composite
        ("out = torch.cat([a, b])", "cat", "tensors"),
        ("out = a + b", "add", None),  # TensorIterator's message names neither
        # the fake mode lets these two by
        ("out = b[on_device]", "index", "indices"),
        ("out = torch.addmm(scalar, m, m)", "addmm", "mat1"),
    ],
)
def test_the_prediction_says_what_the_real_error_says(
    simulated_device, cell, operator, argument
) -> None:
    report = dry_run(cell, namespace(simulated_device))
    real = real_error(cell, namespace(simulated_device))
    assert report.device_error, report.text()
    assert str(report.error) == report.diagnosis.message == str(real)
    assert type(report.error) is type(real)  # an IndexError for the index
    assert (report.diagnosis.operator, report.diagnosis.argument) == (operator, argument)
    where = f", in {operator}" + (f" (argument {argument})" if argument else "") + ":"
    assert f"✗ The cell would raise a device error on line 1{where}" in report.text()
    assert f"The real run's message: {real}" in report.text()
    html = report._repr_html_()
    assert f"Device mismatch</b> in {operator}" in html and "The real run's message" not in html


@pytest.mark.parametrize(
    "cell", ["out = a * scalar", "out = torch.where(a > 0, a, scalar)", "out = a.to('cpu') + b"]
)
def test_the_mixes_the_device_accepts_predict_no_error(simulated_device, cell) -> None:
    ns = namespace(simulated_device)
    report = dry_run(cell, ns)
    assert report.completed and not report.device_error, report.text()
    exec(cell, ns)


@pytest.mark.parametrize("cell", ["a.copy_(b)", "torch._foreach_copy_([a], [b])"])
def test_copies_between_devices_predict_no_error(simulated_device, cell) -> None:
    # CUDA copies each pair of _foreach_copy_'s lists across devices (its slow path)
    report = dry_run(cell, namespace(simulated_device))
    assert report.completed and not report.device_error, report.text()


def test_on_cuda_the_generated_check_is_named_after_cuda() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        weight, bias = torch.empty(2, 3, device="cuda:0"), torch.empty(2, device="cuda:0")
        error = real_device_error(
            torch.ops.aten.addmm.default, (bias, torch.empty(4, 3), weight.t()), {}
        )
        assert error is not None
        assert str(error) == (
            "Expected all tensors to be on the same device, but got mat1 is on cpu, different "
            "from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"
        )
        # a CPU and meta mix reaches no device whose rules these are
        meta = torch.empty(3, device="meta")
        assert real_device_error(torch.ops.aten.add.Tensor, (meta, torch.empty(3)), {}) is None
