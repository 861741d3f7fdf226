"""Meta tensors computing beside real ones, which torch lets through without an error: the
trace report (``TraceReport.meta_mix``) and the lean guard of ``%%devicecheck``
(``MetaMixGuard``) flag every such op, never a shape-only one, and ``%%devicecheck`` explains
it like a device-mismatch error (the op, the line, the variables, ``to_empty`` + reload)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from trace_checks import cell, no_modes_left

from torchdevice_magic.diagnose import diagnose
from torchdevice_magic.trace import MetaMixError, MetaMixGuard, trace


def namespace() -> dict[str, object]:
    return {
        "torch": torch,
        "F": F,
        "x": torch.randn(2, 3),
        "w": torch.empty(3, 4, device="meta"),
        "img": torch.randn(1, 2, 5, 5),
        "kernel": torch.empty(3, 2, 3, 3, device="meta"),
        "idx": torch.tensor([0, 2, 1]),
        "table": torch.empty(5, 4, device="meta"),
        "idx_meta": torch.zeros(2, dtype=torch.long, device="meta"),
    }


# torch 2.13 on CPU raises for none of these: a real result computed from no data, or meta
SILENT_MIXES = {
    "cpu @ meta": ("x @ w", "cpu"),
    "meta @ cpu": ("w.t() @ x.t()", "meta"),
    "Linear(bias=False) on meta": ("torch.nn.Linear(3, 4, bias=False, device='meta')(x)", "cpu"),
    "conv2d": ("F.conv2d(img, kernel)", "cpu"),
    "embedding": ("F.embedding(idx, table)", "meta"),
    "addmm": ("torch.addmm(torch.zeros(2, 4), x, w)", "cpu"),
    "bmm": ("torch.bmm(x.unsqueeze(0), w.unsqueeze(0))", "meta"),
    "einsum": ("torch.einsum('ij,jk->ik', x, w)", "meta"),
    "index_select": ("x.index_select(0, idx_meta)", "cpu"),
    "take": ("torch.take(x, idx_meta)", "cpu"),
    "cdist": ("torch.cdist(x, w.t())", "cpu"),
    "tensordot": ("torch.tensordot(x, w, dims=1)", "cpu"),
}

# they read shapes, dtypes or devices only (or take a cpu scalar beside meta)
SHAPE_ONLY = {
    "view_as": "x.view_as(w.t()[:2])",
    "expand_as": "x[:1].expand_as(w.t()[:2])",
    "reshape_as": "x.reshape_as(w.t()[:2])",
    "new_empty": "w.new_empty(3)",
    "new_zeros": "w.new_zeros(2)",
    "empty_like": "torch.empty_like(w)",
    "zeros_like on cpu": "torch.zeros_like(w, device='cpu')",
    "is_same_size": "x.is_same_size(w)",
    "resize_as_": "torch.empty(0).resize_as_(w)",
    "broadcast_tensors": "torch.broadcast_tensors(x, w.t()[:1])",
    "meta times a cpu scalar": "w * torch.tensor(2.0)",
}


@pytest.mark.parametrize("label", list(SILENT_MIXES))
def test_every_silent_meta_mix_is_flagged_by_the_trace_and_the_guard(label: str) -> None:
    code, result_device = SILENT_MIXES[label]
    ns = namespace()
    report = trace(f"out = {code}", ns)
    assert report.error is None  # the premise: torch raised nothing
    assert ns["out"].device.type == result_device
    assert report.meta_mix is not None and report.meta_mix.line == 1
    assert "meta" in report.meta_mix.devices and "Meta mixed with real data" in report.text()

    ns = namespace()
    source = f"out = {code}"
    with MetaMixGuard(ns, source=source) as guard:
        exec(compile(source, "<cell>", "exec"), ns)
    mix = guard.meta_mix()
    assert mix is not None and mix.source == source and not mix.raised
    assert no_modes_left()


@pytest.mark.parametrize("label", list(SHAPE_ONLY))
def test_shape_only_ops_are_not_flagged(label: str) -> None:
    ns = namespace()
    report = trace(f"out = {SHAPE_ONLY[label]}", ns)
    assert report.error is None
    assert report.meta_mix is None and report.first_divergence is None
    source = f"out = {SHAPE_ONLY[label]}"
    with MetaMixGuard(ns, source=source) as guard:
        exec(compile(source, "<cell>", "exec"), ns)
    assert guard.meta_mix() is None


def test_a_mix_torch_refuses_is_left_to_its_error_and_a_later_silent_one_still_counts() -> None:
    source = cell(
        """
        try:
            x + w.t()[:2]
        except RuntimeError:
            pass
        y = x @ w
        """
    )
    ns = namespace()
    report = trace(source, ns)
    assert report.first_divergence is not None and report.first_divergence.raised
    assert report.meta_mix is not None and report.meta_mix.line == 5
    with MetaMixGuard(namespace(), source=source) as guard:
        exec(compile(source, "<cell>", "exec"), guard.namespace)
    mix = guard.meta_mix()
    assert mix is not None and mix.line == 5 and mix.names == ("x", "w")


def test_to_empty_and_building_on_meta_are_not_mixes() -> None:
    source = cell(
        """
        with torch.device("meta"):
            model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
        shapes = [p.shape for p in model.parameters()]
        model.to_empty(device="cpu")
        y = model(x)
        """
    )
    ns = namespace()
    with MetaMixGuard(ns, source=source) as guard:
        exec(compile(source, "<cell>", "exec"), ns)
    assert guard.meta_mix() is None and ns["y"].device.type == "cpu"


def test_the_silent_mix_is_diagnosed_with_the_device_mismatch_words_and_fix() -> None:
    ns = namespace()
    ns["model"] = torch.nn.Linear(3, 4, bias=False, device="meta")
    source = "y = model(x)"
    with MetaMixGuard(ns, source=source) as guard:
        exec(compile(source, "<cell>", "exec"), ns)
    mix = guard.meta_mix()
    assert mix is not None
    assert mix.names == ("x", "model.weight (a view)")
    error = MetaMixError(mix)
    assert "line 1: mm mixed x (2×3) on cpu" in error.summary
    diagnosis = diagnose(error, ns, source)
    assert diagnosis is not None
    text = diagnosis.text()
    assert "model (Linear, 48 B) is on meta; x (Tensor, 24 B) is on cpu" in text
    assert 'model.to_empty(device="cpu")' in text and "load_state_dict" in text


def test_the_guard_does_nothing_before_torch_is_imported(monkeypatch) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "torch")
    with MetaMixGuard({}) as guard:
        pass
    assert guard.meta_mix() is None


def run_in(shell, source: str):
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        result = shell.run_cell(source)
    shown = "\n".join(o.data.get("text/plain", "") for o in captured.outputs)
    return result, captured.stdout + captured.stderr, shown


def test_devicecheck_explains_a_bias_free_linear_on_meta_giving_numbers(ip) -> None:
    run_in(
        ip,
        "import torch\nx = torch.randn(2, 3)\n"
        "model = torch.nn.Linear(3, 4, bias=False, device='meta')",
    )
    result, printed, shown = run_in(ip, "%%devicecheck --quiet\ny = model(x)")
    assert result.success and ip.user_ns["y"].device.type == "cpu"  # numbers from nothing
    assert "Meta mixed with real data" in printed and "line 1: mm mixed x (2×3) on cpu" in printed
    assert "    y = model(x)" in printed
    assert "Device mismatch: model (Linear, 48 B) is on meta" in shown
    assert 'model.to_empty(device="cpu")' in shown
    assert no_modes_left()

    result, printed, shown = run_in(ip, "%%devicecheck --strict --quiet\ny = model(x)")
    assert not result.success and "MixedDevicesError" in printed

    # --trace says it in its report, then the same diagnosis
    result, printed, shown = run_in(ip, "%%devicecheck --trace --quiet\ny = model(x)")
    assert result.success
    assert shown.index("Meta mixed with real data") < shown.index("Device mismatch")

    # the fix applied, the cell is clean
    run_in(ip, "model.to_empty(device='cpu')")
    result, printed, shown = run_in(ip, "%%devicecheck --quiet\ny = model(x)")
    assert result.success and "Meta mixed" not in printed + shown
    assert "Device mismatch" not in shown


def test_the_guard_changes_no_result_and_comes_off_when_the_cell_raises() -> None:
    source = cell(
        """
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())
        out = model(x).sum(dim=0)
        out.sum().backward()
        grad = model[0].weight.grad.clone()
        """
    )
    plain = namespace()
    exec(compile(source, "<cell>", "exec"), plain)
    guarded = dict(namespace(), x=plain["x"])
    with MetaMixGuard(guarded, source=source) as guard:
        exec(compile(source, "<cell>", "exec"), guarded)
    assert guard.meta_mix() is None
    assert torch.equal(plain["out"], guarded["out"]) and torch.equal(plain["grad"], guarded["grad"])

    failing = "y = x + w.t()[:2]"  # torch refuses this one: its error is the news
    guard = MetaMixGuard(namespace(), source=failing)
    with pytest.raises(RuntimeError, match="is not on the expected device"), guard:
        exec(compile(failing, "<cell>", "exec"), guard.namespace)
    assert guard.meta_mix() is None and no_modes_left()
