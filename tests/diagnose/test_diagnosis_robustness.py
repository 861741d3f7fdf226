"""Robustness and rendering: hostile namespaces, garbage inputs, no tensor stringified, no
reference kept, CUDA never initialised, HTML escaped, JSON complete, the module pure.
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

import torch
import torch.nn as nn
from diagnosis_checks import TRAIN_SOURCE, define, diagnose, fresh_ns, names, run_cell
from torch.utils.data import DataLoader, TensorDataset

from torchdevice_magic.diagnose import (
    is_user_filename,
)

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


def test_the_heading_says_where_it_failed_in_the_user_s_words() -> None:
    """The HTML heading names the operation and argument the message names, never the rule's
    internal code ("different from other" told a user nothing)."""
    ns = fresh_ns()
    ns["model"], ns["x"] = nn.Linear(3, 2), torch.randn(1, 3)
    message = (
        "Expected all tensors to be on the same device, but got mat1 is on cpu, different from "
        "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"
    )
    d = diagnose(RuntimeError(message), ns, "y = model(x)")
    assert d is not None
    page = d._repr_html_()
    assert "<b>Device mismatch</b> in addmm (argument mat1)</p>" in page
    assert "different from other" not in page.split("<details>")[0]
    two = diagnose(
        RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            "cuda:0 and cpu!"
        ),
        ns,
        "y = model(x)",
    )
    assert two is not None and "<b>Device mismatch</b></p>" in two._repr_html_()


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
    define(TRAIN_SOURCE, ns)
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
    # the culprit the fix moves is listed first
    assert {"name": "batch_X", "where": "frame train"}.items() <= data["culprits"][0].items()
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
    assert not is_user_filename("<decorator-gen-12>")  # IPython's magics are made with these
    assert is_user_filename("<ipython-input-3-5d7ad2b1e4c7>")
    assert is_user_filename("/tmp/ipykernel_12345/3186354231.py")
    assert is_user_filename(str(Path.home() / "project" / "train.py"))


def test_module_is_pure_and_lazy_about_torch() -> None:
    """diagnose imports neither IPython/ipywidgets nor torch (in a fresh interpreter)."""
    path = Path(__file__).resolve().parents[2] / "torchdevice_magic" / "diagnose.py"
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
    # the rule's internal code is not shown: it means nothing to a user
    assert diagnosis.kind not in body and diagnosis.kind.replace("_", " ") not in body
