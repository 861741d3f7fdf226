"""Meta/real mixes from PyTorch's own operator database (``op_db`` samples, as
``benchmarks/meta_opdb.py`` sweeps all of them): every op in the first table returns garbage or
meta without raising when one tensor argument is on meta, and the trace flags it; the
shape-only ops of the second table are never flagged."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from torchdevice_magic.trace import trace

pytest.importorskip("expecttest")


@pytest.fixture(scope="module")
def ops() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return {op.name: op for op in op_db if not op.variant_test_name}


def tensor_sample(op: Any) -> tuple[list[Any], dict[str, Any]]:
    """The first sample whose arguments include two or more tensors, all at least 1-d."""
    for sample in op.sample_inputs("cpu", torch.float32, requires_grad=False):
        args = [sample.input, *sample.args]
        found = [a for a in (*args, *sample.kwargs.values()) if isinstance(a, torch.Tensor)]
        if len(found) >= 2 and all(t.dim() for t in found):
            return args, dict(sample.kwargs)
    pytest.fail(f"{op.name}: no sample with two tensors")


def traced(op: Any, moved: int) -> tuple[Any, Any]:
    """Trace the op with its ``moved``-th tensor argument on meta; (report, result)."""
    args, kwargs = tensor_sample(op)
    positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    args[positions[moved]] = args[positions[moved]].to("meta")
    ns = {"op": op.op, "args": args, "kwargs": kwargs}
    report = trace("out = op(*args, **kwargs)", ns)
    return report, ns.get("out")


# op name -> which tensor argument goes to meta; each returns garbage (a real tensor) or meta
SILENT = {
    "mm": 1,
    "nn.functional.linear": 1,
    "nn.functional.conv2d": 1,
    "nn.functional.conv_transpose1d": 1,
    "nn.functional.embedding": 1,
    "nn.functional.embedding_bag": 1,
    "bmm": 0,
    "addmm": 2,
    "tensordot": 1,
    "cdist": 1,
    "take": 0,
    "gather": 0,
    "index_select": 0,
    "scatter_add": 0,
    "linalg.solve": 0,
}

SHAPE_ONLY = ["view_as", "expand_as", "reshape_as", "resize_as_", "broadcast_tensors"]


@pytest.mark.parametrize("name", list(SILENT))
def test_ops_of_the_database_that_mix_silently_are_flagged(ops, name: str) -> None:
    report, out = traced(ops[name], SILENT[name])
    assert report.error is None  # torch raised nothing
    assert isinstance(out, torch.Tensor)  # a real tensor computed from nothing, or meta
    assert report.meta_mix is not None, report.text()
    assert report.meta_mix.line == 1 and "meta" in report.meta_mix.devices


@pytest.mark.parametrize("name", SHAPE_ONLY)
@pytest.mark.parametrize("moved", [0, 1])
def test_shape_only_ops_of_the_database_are_not_flagged(ops, name: str, moved: int) -> None:
    report, _ = traced(ops[name], moved)
    assert report.error is None
    assert report.meta_mix is None, report.text()
