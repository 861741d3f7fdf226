"""The always-on check of modules holding meta tensors called with real inputs
(``MetaCallCheck``): caught, named, told after the cell; armed only while the namespace holds
such a module; never for accelerate's offload hooks (the real package), ``init_empty_weights``
building, ``to_empty`` or meta inputs; removed on unload."""

from __future__ import annotations

import contextlib
import io
import warnings

import pytest
import torch
from trace_checks import meta_call_check_armed

from torchdevice_magic.trace import MetaCallCheck

accelerate = pytest.importorskip("accelerate")


@pytest.fixture
def check():
    armed = MetaCallCheck()
    armed.arm()
    yield armed
    armed.disarm()


def test_a_bias_free_linear_on_meta_called_with_real_input_is_caught(check) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4, bias=False, device="meta"))
    y = model(torch.randn(2, 3))
    assert y.device.type == "cpu"  # the premise: numbers computed from no data
    (call,) = check.take({"model": model})
    assert (call.name, call.type, call.meta, call.devices) == (
        "model.0",
        "Linear",
        ("weight",),
        ("cpu",),
    )
    text = call.warning()
    assert "model.0 (Linear) was called with a tensor on cpu while its weight is on meta" in text
    assert 'model.0.to_empty(device="cpu") and load the weights' in text
    assert check.take({}) == []  # told once


class Projection(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("basis", torch.empty(3, 3, device="meta"), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.basis


def test_buffers_count_and_each_module_is_told_once(check) -> None:
    projection = Projection()
    for _ in range(5):
        y = projection(torch.randn(4, 3))
    assert y.device.type == "cpu"
    (call,) = check.take({"projection": projection})
    assert call.name == "projection" and call.meta == ("basis",)
    assert "while its basis is on meta" in call.warning()


def test_no_false_positive_for_meta_inputs_building_to_empty_and_scalars(check) -> None:
    from accelerate import init_empty_weights

    with init_empty_weights():
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
    model(torch.empty(2, 3, device="meta"))  # shape inference: everything on meta
    model.to_empty(device="cpu")
    model(torch.randn(2, 3))
    scale = torch.nn.Linear(1, 1, bias=False, device="meta")
    with contextlib.suppress(RuntimeError):
        scale(torch.tensor(2.0))  # a 0-dim cpu tensor is a scalar beside any device
    assert check.take({"model": model}) == []


@pytest.mark.parametrize("offload", ["cpu_offload", "disk_offload"])
def test_accelerate_offload_hooks_are_not_mixes(check, offload, tmp_path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    expected = model(torch.ones(1, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if offload == "cpu_offload":
            accelerate.cpu_offload(model, execution_device="cpu")
        else:
            accelerate.disk_offload(model, str(tmp_path), execution_device="cpu")
    assert all(p.is_meta for p in model.parameters())  # the weights live in the hooks
    assert torch.equal(model(torch.ones(1, 3)), expected)
    assert check.take({"model": model}) == []


def test_armed_only_while_the_inventory_holds_a_module_with_meta_tensors() -> None:
    from torchdevice_magic import scan

    check = MetaCallCheck()
    hooks = torch.nn.modules.module._global_forward_pre_hooks
    namespace = {"model": torch.nn.Linear(3, 4), "t": torch.empty(2, device="meta")}
    check.arm_for(scan(namespace).meta_module_records())
    assert not check.armed and not hooks  # a meta tensor alone is no module call
    namespace["lazy"] = torch.nn.Sequential(torch.nn.Linear(3, 4, device="meta"))
    check.arm_for(scan(namespace).meta_module_records())
    assert check.armed and len(hooks) == 1
    namespace["lazy"].to_empty(device="cpu")
    check.arm_for(scan(namespace).meta_module_records())
    assert not check.armed and not hooks


def run_in(shell, source: str) -> str:
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        shell.run_cell(source)
    shown = "\n".join(o.data.get("text/plain", "") for o in captured.outputs)
    return captured.stdout + captured.stderr + shown


def test_the_shell_warns_after_the_cell_and_unload_removes_the_hook(ip) -> None:
    run_in(ip, "import torch\nx = torch.randn(2, 3)")
    assert not meta_call_check_armed()  # nothing on meta: nothing armed, no cost
    run_in(ip, "model = torch.nn.Linear(3, 4, bias=False, device='meta')")
    printed = run_in(ip, "y = model(x)\nz = model(x)")
    assert printed.count("model (Linear) was called with a tensor on cpu") == 1
    assert 'model.to_empty(device="cpu")' in printed
    assert "was called" not in run_in(ip, "w = model(torch.empty(1, 3, device='meta'))")

    # the error is explained, not warned about twice
    run_in(ip, "biased = torch.nn.Linear(3, 4, device='meta')")
    printed = run_in(ip, "biased(x)")
    assert "Device mismatch: biased (Linear" in printed
    assert "biased (Linear) was called" not in printed

    ip.run_line_magic("config", "TorchDeviceMagic.check_meta_calls = False")
    run_in(ip, "pass")
    assert "was called" not in run_in(ip, "y = model(x)") and not meta_call_check_armed()
    ip.run_line_magic("config", "TorchDeviceMagic.check_meta_calls = True")
    run_in(ip, "pass")
    assert meta_call_check_armed()  # armed again: a module with meta tensors is in the namespace
    ip.run_line_magic("unload_ext", "torchdevice_magic")
    assert not meta_call_check_armed()
    module_hooks = torch.nn.modules.module
    assert not module_hooks._global_parameter_registration_hooks
    assert not module_hooks._global_buffer_registration_hooks


def test_a_model_built_on_meta_and_called_in_the_same_cell_is_caught(ip) -> None:
    run_in(ip, "import torch\nx = torch.randn(2, 3)")
    assert not meta_call_check_armed()  # watching registrations costs no module call
    printed = run_in(
        ip,
        "with torch.device('meta'):\n    fresh = torch.nn.Linear(3, 4, bias=False)\ny = fresh(x)",
    )
    assert "fresh (Linear) was called with a tensor on cpu while its weight is on meta" in printed
    run_in(ip, "del fresh")
    assert not meta_call_check_armed()  # no module with meta tensors left: disarmed


def test_after_to_empty_the_hook_goes_away(ip) -> None:
    run_in(ip, "import torch\nmodel = torch.nn.Linear(3, 4, device='meta')")
    assert meta_call_check_armed()
    stream = io.StringIO()
    with contextlib.redirect_stderr(stream):
        run_in(ip, "model.to_empty(device='cpu')\ny = model(torch.randn(2, 3))")
    assert "was called" not in stream.getvalue() and not meta_call_check_armed()
