"""Diagnosis coverage and safe fixes: every template torch raised in the issue's op_db run, real
calls that raise them, and every suggested fix applied and the cell re-run.

By default (``allow_meta=False``) nothing real is moved to meta: meta holds no values. Where a
second device that keeps data is needed, the simulated accelerator stands in for cuda (those
tests are marked ``simulated`` and run in their own process, see conftest.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensorMode

from torchdevice_magic.diagnose import Diagnosis, diagnose, parse_cell, parse_message

META = "meta"

# IPython runs a cell from its own (site-packages) frame: mimic that so the traceback holds a
# library frame and then the cell's ``<module>`` frame, as in a notebook.
_FAKE_SHELL = compile(
    "def run_cell(code, ns):\n    try:\n        exec(code, ns)\n    except Exception as e:\n"
    "        return e\n    return None\n",
    "/fake/lib/python3.11/site-packages/IPython/core/interactiveshell.py",
    "exec",
)
_shell_ns: dict[str, Any] = {}
exec(_FAKE_SHELL, _shell_ns)
_counter = [0]


def run(cell: str, ns: dict[str, Any]) -> BaseException | None:
    _counter[0] += 1
    code = compile(cell, f"<ipython-input-{_counter[0]}-0123456789ab>", "exec")
    return _shell_ns["run_cell"](code, ns)


def fails(cell: str, ns: dict[str, Any]) -> BaseException:
    exc = run(cell, ns)
    assert exc is not None, f"expected {cell!r} to fail"
    return exc


def define(source: str, ns: dict[str, Any]) -> None:
    """Define a class as a notebook cell does (IPython puts cell sources in linecache)."""
    import linecache

    source = textwrap.dedent(source)
    filename = f"/tmp/ipykernel_4242/{abs(hash(source))}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), ns)


def ns_() -> dict[str, Any]:
    return {"torch": torch, "nn": nn}


def apply_and_rerun(d: Diagnosis, cell: str, ns: dict[str, Any]) -> None:
    """Apply every fix line the diagnosis suggests (a rewritten line replaces the cell's line),
    then run the cell again: it must succeed."""
    assert d.safe, d.text()
    lines = cell.splitlines()
    for fix in d.fix_lines:
        assert '"meta"' not in fix.source and "'meta'" not in fix.source, fix
        if fix.where.startswith("line "):
            lines[int(fix.where.removeprefix("line ")) - 1] = fix.source
        elif fix.where in ("cell", "loop"):
            exec(fix.source, ns)
        else:  # "class Net.__init__" lines are shown for the source; the live fix is the cell's
            continue
    assert run("\n".join(lines), ns) is None, d.text()


# --------------------------------------------------------------------------------------------
# The templates the op_db run missed, raised by real calls on this machine
# --------------------------------------------------------------------------------------------


def test_out_tensor_on_meta_cross_device_copy_is_named_and_fixed() -> None:
    ns = ns_()
    run("a = torch.ones(3)\nb = torch.ones(3)\nres = torch.empty(3, device='meta')", ns)
    cell = "torch.add(a, b, out=res)"
    exc = fails(cell, ns)
    assert str(exc) == (
        "Attempting to copy from device cpu to device meta, but cross-device copies are not "
        "allowed!"
    )
    d = diagnose(exc, ns, cell)
    assert d is not None and d.kind == "out_copy" and d.argument == "out"
    assert d.target == "cpu"
    # the out tensor is named; its values are overwritten, so a fresh one loses nothing
    assert d.fix == 'res = torch.empty_like(res, device="cpu")'
    assert "out= tensor" in d.note
    apply_and_rerun(d, cell, ns)
    assert ns["res"].device.type == "cpu"


def test_out_copy_from_meta_result_has_no_safe_fix() -> None:
    ns = ns_()
    run("a = torch.ones(3, device='meta')\nres = torch.empty(3)", ns)
    cell = "torch.add(a, a, out=res)"
    exc = fails(cell, ns)
    assert "Attempting to copy from device meta to device cpu" in str(exc)
    d = diagnose(exc, ns, cell)
    assert d is not None and d.kind == "out_copy"
    assert d.safe is False and "meta" in d.why_no_fix and "a" in d.why_no_fix
    assert 'to("meta")' not in d.text() and d.action is None


def test_factory_out_parameter_device_type() -> None:
    ns = ns_()
    run("buf = torch.empty(3, device='meta')", ns)
    cell = "torch.arange(3, out=buf, device='cpu')"
    exc = fails(cell, ns)
    assert str(exc) == "device type cpu does not match device type of out parameter (meta)"
    d = diagnose(exc, ns, cell)
    assert d is not None and d.kind == "out_device_type" and d.target == "cpu"
    assert d.fix == 'buf = torch.empty_like(buf, device="cpu")'
    apply_and_rerun(d, cell, ns)


def test_multi_dot_out_tensor() -> None:
    ns = ns_()
    run("m = torch.ones(2, 2)\nout = torch.empty(2, 2, device='meta')", ns)
    cell = "torch.linalg.multi_dot([m, m], out=out)"
    exc = fails(cell, ns)
    assert str(exc) == "multi_dot(): expected out tensor to be on device cpu but got meta"
    d = diagnose(exc, ns, cell)
    assert d is not None and d.kind == "out_device" and d.operator == "multi_dot"
    assert [c.name for c in d.culprits if c.devices == ("meta",)] == ["out"]
    assert d.fix == 'out = torch.empty_like(out, device="cpu")'
    apply_and_rerun(d, cell, ns)


def test_take_along_dim_index_on_the_other_device_rewrites_its_creation() -> None:
    ns = ns_()
    run("t = torch.arange(4.0)", ns)
    cell = "idx = torch.tensor([0, 3], device='meta')\npicked = torch.take_along_dim(t, idx)"
    exc = fails(cell, ns)
    assert str(exc).startswith(
        "Expected tensor to have cpu Device, but got tensor with meta Device"
    )
    d = diagnose(exc, ns, cell)
    assert d is not None and d.kind == "device_type_check"
    assert d.target == "cpu"
    # idx is a meta tensor (no values to move): the line that makes it makes it on the cpu
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("line 1", "idx = torch.tensor([0, 3], device='cpu')")
    ]
    apply_and_rerun(d, cell, ns)
    assert ns["picked"].tolist() == [0.0, 3.0]


def test_tensor_split_indices_must_be_on_cpu() -> None:
    ns = ns_()
    run("data = torch.arange(6.0)", ns)
    cell = "cuts = torch.tensor([2, 4], device='meta')\nparts = torch.tensor_split(data, cuts)"
    exc = fails(cell, ns)
    assert str(exc) == (
        "tensor_split expected tensor_indices_or_sections to be on cpu, but it's on meta"
    )
    d = diagnose(exc, ns, cell)
    assert d is not None and d.kind == "must_be_cpu" and d.target == "cpu"
    assert d.argument == "tensor_indices_or_sections"
    apply_and_rerun(d, cell, ns)
    assert len(ns["parts"]) == 3


def test_index_add_and_index_put_device_checks() -> None:
    ns = ns_()
    run("base = torch.zeros(3)\nsrc = torch.ones(1, device='meta')", ns)
    cell = "base.index_add_(0, torch.tensor([0]), src)"
    d = diagnose(fails(cell, ns), ns, cell)
    assert d is not None and d.kind == "index_op_devices"
    assert {c.name: c.devices for c in d.culprits} == {"base": ("cpu",), "src": ("meta",)}
    # FakeTensor's index_put with values elsewhere (a fake cuda device; CUDA stays untouched)
    before = torch.cuda.is_initialized()
    with FakeTensorMode():
        x = torch.zeros(3, device="cuda")
        with pytest.raises(RuntimeError) as info:
            x.index_put_((torch.tensor([0], device="cuda"),), torch.ones(2))
    assert torch.cuda.is_initialized() == before
    assert str(info.value) == (
        "Mismatching aten.index_put_.default device between self (cuda:0) and values (cpu)"
    )
    m = parse_message(str(info.value))
    assert m is not None and m.kind == "index_op_devices"
    assert (m.expected, m.argument_device) == ("cuda:0", "cpu")


# messages this torch (2.13) no longer raises from these calls, as older releases printed them
RECORDED = [
    ("Cannot inplace into non-meta tensor with meta tensor argument", "meta_inplace", ("meta",)),
    (
        "FakeTensor is wrapped to wrong device, found cpu, expected cuda:0",
        "fake_tensor_wrapped",
        ("cpu", "cuda:0"),
    ),
    (
        "Mismatching aten.index_put.default device between self and values",
        "index_op_devices",
        (),
    ),
    (
        "Expected out tensor to have device cuda:0, but got cpu instead",
        "out_device",
        ("cuda:0", "cpu"),
    ),
    (
        "Expected tensor to have cuda Device, but got tensor with cpu Device (while checking "
        "arguments for torch.take_along_dim():)",
        "device_type_check",
        ("cuda", "cpu"),
    ),
    (
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
        "and cuda:1!",
        "found_two_devices",
        ("cuda:0", "cuda:1"),
    ),
    ("Input tensor is not a lazy tensor: torch.FloatTensor", "not_backend_tensor", ("lazy", "cpu")),
    (
        "grid_sampler(): expected input and grid to be on same device, but input is on cuda:0 "
        "and grid is on cpu",
        "pair_devices",
        ("cuda:0", "cpu"),
    ),
    (
        "index_copy_(): self, index and source expected to be in the same device, but got "
        "(self) cuda:0, (index) cpu, and (source) cuda:0",
        "index_op_devices",
        ("cuda:0", "cpu"),
    ),
    (
        "expected self and mask to be on the same device, but got mask on cpu and self on cuda:0",
        "index_op_devices",
        ("cpu", "cuda:0"),
    ),
    (
        'Attempted to set the storage of a tensor on device "cpu" to a storage on different '
        'device "cuda:0".  This is no longer allowed; the devices must match.',
        "set_storage_device",
        ("cpu", "cuda:0"),
    ),
    (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "simdev:0 and cpu!",
        "found_two_devices",
        ("simdev:0", "cpu"),
    ),
]


@pytest.mark.parametrize(("message", "kind", "devices"), RECORDED)
def test_recorded_templates(message: str, kind: str, devices: tuple[str, ...]) -> None:
    m = parse_message(message)
    assert m is not None and m.kind == kind and m.devices == devices
    d = diagnose(RuntimeError(message))
    assert d is not None and d.kind == kind
    compile(d.fix or "pass", "<fix>", "exec")


def test_cannot_inplace_meta_argument_names_the_meta_tensor() -> None:
    ns = ns_()
    run("acc = torch.zeros(3)\ndelta = torch.ones(3, device='meta')", ns)
    d = diagnose(
        RuntimeError("Cannot inplace into non-meta tensor with meta tensor argument"),
        ns,
        "acc.add_(delta)",
    )
    assert d is not None and [c.name for c in d.culprits if "meta" in c.devices] == ["delta"]
    assert d.safe is False and "delta" in d.why_no_fix
    assert 'to("meta")' not in d.text()


# --------------------------------------------------------------------------------------------
# Safe fixes (default: nothing real moves to meta), each applied and the cell re-run
# --------------------------------------------------------------------------------------------


def test_half_meta_model_is_materialised_and_reloaded_from_the_checkpoint() -> None:
    ns = ns_()
    run(
        "torch.manual_seed(0)\n"
        "net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))\n"
        "x = torch.randn(2, 4)\n"
        "expected = net(x).detach()\n"
        "ckpt = {'epoch': 3, 'model': {k: v.clone() for k, v in net.state_dict().items()}}\n"
        "net[2].to('meta')",
        ns,
    )
    cell = "y = net(x)"
    d = diagnose(fails(cell, ns), ns, cell)
    assert d is not None
    assert 'net.to("meta")' not in d.text()  # would throw the real weights away
    assert d.fix == 'net.to_empty(device="cpu"); net.load_state_dict(ckpt["model"])'
    assert "load_state_dict" in d.note
    assert d.action is None  # not a plain move: no one-click button
    apply_and_rerun(d, cell, ns)
    assert torch.equal(ns["y"], ns["expected"])


def test_input_next_to_meta_parameters_is_never_moved_to_meta() -> None:
    ns = ns_()
    run("model = nn.Linear(3, 2, device='meta')\nx = torch.randn(1, 3)", ns)
    cell = "out = model(x)"
    d = diagnose(fails(cell, ns), ns, cell)
    assert d is not None
    assert 'x = x.to("meta")' not in d.text()
    assert d.fix == 'model.to_empty(device="cpu")'
    assert "model.load_state_dict(torch.load(PATH))" in d.note  # no checkpoint in sight
    apply_and_rerun(d, cell, ns)
    assert ns["out"].device.type == "cpu"
    # where the user made meta the stand-in accelerator, the input goes there instead
    ns2 = ns_()
    run("model = nn.Linear(3, 2, device='meta')\nx = torch.randn(1, 3)", ns2)
    d2 = diagnose(fails(cell, ns2), ns2, cell, allow_meta=True)
    assert d2 is not None and d2.fix == 'x = x.to("meta")'


def test_copy_out_of_meta_on_a_plain_tensor_says_there_is_no_safe_fix() -> None:
    ns = ns_()
    run("w = torch.randn(3, device='meta')", ns)
    cell = "w_cpu = w.to('cpu')"
    d = diagnose(fails(cell, ns), ns, cell)
    assert d is not None and d.kind == "meta_copy"
    assert d.safe is False
    assert "w is a meta tensor" in d.why_no_fix and "no values" in d.why_no_fix
    assert "w.to(" not in d.fix  # not the failing call again
    assert d.text().splitlines()[1].startswith("No safe one-line fix: w is a meta tensor")
    # made in the same cell: the line that makes it is rewritten, and that works
    cell2 = "w = torch.randn(3, device='meta')\nw_cpu = w.to('cpu')"
    d2 = diagnose(fails(cell2, ns), ns, cell2)
    assert d2 is not None and d2.safe
    assert d2.fix == "w = torch.randn(3, device='cpu')"
    apply_and_rerun(d2, cell2, ns)


def test_anonymous_operands_name_the_expression_not_the_assignment_target() -> None:
    ns = ns_()
    run("x = torch.ones(3)", ns)  # an x exists, but the cell only assigns it
    cell = "x = torch.ones(3) @ torch.ones(3, device='meta')"
    exc = fails(cell, ns)
    d = diagnose(exc, ns, cell)
    assert d is not None
    assert "x" not in {c.name for c in d.culprits}
    # both operands are unnamed: each is shown as the expression that makes it, the one the
    # fix re-creates first
    assert [(c.name, c.where, c.devices) for c in d.culprits] == [
        ("torch.ones(3, device='meta')", "line 1", ("meta",)),
        ("torch.ones(3)", "line 1", ("cpu",)),
    ]
    assert [(f.where, f.source) for f in d.fix_lines] == [
        ("line 1", "x = torch.ones(3) @ torch.ones(3, device='cpu')")
    ]
    assert "created in line 1" in d.text()
    apply_and_rerun(d, cell, ns)


def test_fix_lines_never_target_meta_by_default() -> None:
    ns = ns_()
    run("a = torch.randn(3)\nb = torch.randn(3, device='meta')", ns)
    for cell in ("a + b", "b + a", "torch.cat([a, b])"):
        d = diagnose(fails(cell, ns), ns, cell)
        assert d is not None and 'to("meta")' not in d.text(), d.text()
        assert d.target == "cpu"


# --------------------------------------------------------------------------------------------
# With a second device that keeps data: the simulated accelerator (cuda's stand-in)
# --------------------------------------------------------------------------------------------


@pytest.mark.simulated
def test_seed_input_on_cpu_fix_is_a_move_the_engine_applies(simulated_device: str) -> None:
    import torchdevice_magic

    ns = ns_()
    ns["dev"] = simulated_device
    run("model = nn.Linear(3, 2).to(dev)\nx = torch.randn(4, 3)", ns)
    cell = "out = model(x)"
    d = diagnose(fails(cell, ns), ns, cell)
    assert d is not None and d.target == simulated_device
    assert d.fix == f'x = x.to("{simulated_device}")'
    assert d.action is not None and d.action.names == ("x",)
    assert d.action.label == f"Move x to {simulated_device} and re-run"
    apply_and_rerun(d, cell, ns)
    assert str(ns["out"].device) == simulated_device
    # the button's path is the move engine; it is offered only where the planner accepts
    run("x = torch.randn(4, 3)", ns)
    try:
        result = torchdevice_magic.move(ns, d.action.device, list(d.action.names))
    except ValueError as refused:  # MoveError: this move engine does not know the device
        assert "not supported" in str(refused)
    else:
        assert result.ok and run(cell, ns) is None


@pytest.mark.simulated
def test_out_tensor_on_the_other_device_is_named(simulated_device: str) -> None:
    ns = ns_()
    ns["dev"] = simulated_device
    run("a = torch.ones(3, device=dev)\nb = torch.ones(3, device=dev)\nres = torch.empty(3)", ns)
    cell = "torch.add(a, b, out=res)"
    d = diagnose(fails(cell, ns), ns, cell)
    assert d is not None
    assert d.fix == f'res = res.to("{simulated_device}")'
    apply_and_rerun(d, cell, ns)
    assert ns["res"].cpu().tolist() == [2.0, 2.0, 2.0]


@pytest.mark.simulated
def test_plain_tensor_attribute_becomes_a_buffer(simulated_device: str) -> None:
    ns = ns_()
    define(
        """
        class Scaled(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(3, 3)
                self.scale = torch.full((3,), 2.0)

            def forward(self, x):
                return self.lin(x) * self.scale
        """,
        ns,
    )
    ns["dev"] = simulated_device
    run("net = Scaled().to(dev)\nx = torch.randn(2, 3, device=dev)", ns)
    cell = "y = net(x)"
    d = diagnose(fails(cell, ns), ns, cell)
    assert d is not None
    scale = next(c for c in d.culprits if c.name == "self.scale")
    assert scale.alias == "net.scale" and scale.devices == ("cpu",)
    assert [(f.where, f.source) for f in d.fix_lines] == [
        (
            "cell",
            f'net.register_buffer("scale", vars(net).pop("scale", net.scale).to("{simulated_device}"))',
        ),
        ("class Scaled.__init__", 'self.register_buffer("scale", torch.full((3,), 2.0))'),
    ]
    assert "module.to() does not move it" in d.note
    apply_and_rerun(d, cell, ns)
    run("net.to('cpu')", ns)
    assert ns["net"].scale.device.type == "cpu"  # a buffer now: it moves with the module


@pytest.mark.simulated
def test_anonymous_cpu_operand_is_rewritten_onto_the_accelerator(simulated_device: str) -> None:
    ns = ns_()
    ns["dev"] = simulated_device
    run("w = torch.ones(3, device=dev)", ns)
    cell = "s = torch.ones(3) @ w"
    d = diagnose(fails(cell, ns), ns, cell)
    assert d is not None
    assert [(c.name, c.where) for c in d.culprits if c.devices == ("cpu",)] == [
        ("torch.ones(3)", "line 1")
    ]
    assert d.fix == f"s = torch.ones(3, device='{simulated_device}') @ w"
    assert d.action is None
    apply_and_rerun(d, cell, ns)


# --------------------------------------------------------------------------------------------
# One parse per cell; the public API after any import order
# --------------------------------------------------------------------------------------------


def test_a_cell_is_parsed_once_for_every_consumer() -> None:
    from torchdevice_magic.shell.hooks import cell_names
    from torchdevice_magic.shell.magics import names_read

    class Shell:
        calls = 0

        def transform_cell(self, cell: str) -> str:
            Shell.calls += 1
            return "get_ipython().run_line_magic('time', '')\n" + cell.split("\n", 1)[1]

    shell = Shell()
    cell = "%time\ny = model(x) + bias"
    assert set(names_read(cell, shell)) == {"get_ipython", "model", "x", "bias"}
    assert set(cell_names(cell, shell)) >= {"y", "model", "x", "bias"}
    assert parse_cell(cell, shell).reads_in_line(2) == {"model", "x", "bias"}
    assert Shell.calls == 1


def test_public_functions_survive_importing_every_submodule() -> None:
    root = Path(__file__).resolve().parents[2]
    code = textwrap.dedent(
        f"""
        import importlib, pkgutil, sys
        sys.path.insert(0, {str(root)!r})
        import torchdevice_magic
        names = [m.name for m in pkgutil.walk_packages(
            torchdevice_magic.__path__, "torchdevice_magic.")]
        assert "torchdevice_magic.diagnose" in names, names
        for name in names:
            importlib.import_module(name)
        import torchdevice_magic.diagnose  # the statement that used to shadow the function
        from torchdevice_magic.diagnose import rules  # submodules stay importable
        import torch
        ns = {{"x": torch.ones(2)}}
        for _ in range(2):
            d = torchdevice_magic.diagnose(RuntimeError(
                "Tensor on device cpu is not on the expected device meta!"), ns, "x + 1")
            assert d is not None and d.kind == "not_on_expected_device"
            assert torchdevice_magic.move(ns, "cpu", ["x"]).ok
        assert callable(torchdevice_magic.diagnose) and callable(torchdevice_magic.move)
        assert type(torchdevice_magic.diagnose).__name__ == "function"
        assert rules.RULES
        print("OK", len(names))
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("OK ")


def test_an_operation_that_needs_values_names_the_meta_tensor() -> None:
    ns = ns_()
    run("loss = torch.ones((), device='meta')\nstep = torch.zeros(())", ns)
    cell = "value = loss.item() + step.item()"
    exc = fails(cell, ns)
    assert str(exc) == "Tensor.item() cannot be called on meta tensors"
    d = diagnose(exc, ns, cell)
    assert d is not None and d.kind == "meta_unsupported" and d.operator == "Tensor.item()"
    assert {c.name: c.devices for c in d.culprits} == {"loss": ("meta",), "step": ("cpu",)}
    assert d.safe is False and "loss is a meta tensor" in d.why_no_fix
