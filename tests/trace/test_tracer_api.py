"""The recorder's faces: ``Tracer`` around code the caller runs, the package's ``trace`` and
``Tracer``, and the report as text and escaped HTML."""

from __future__ import annotations

import torch

from torchdevice_magic.trace import Tracer, TraceReport, trace


def test_the_report_renders_as_text_and_escaped_html() -> None:
    source = "x = torch.ones(2)\nw = torch.ones(2, device='meta')\ny = x @ w if 1 < 2 else '<b>'\n"
    report = trace(source, {"torch": torch})
    html = report._repr_html_()
    assert "if 1 &lt; 2 else &#x27;&lt;b&gt;&#x27;" in html and "<b>'" not in html
    assert "First divergence" in html
    assert isinstance(report, TraceReport) and str(report) == report.text()
    data = report.to_dict()
    assert data["first_divergence"]["line"] == 3 and "meta" in data["error"]


def test_a_tracer_around_code_attributes_ops_to_the_functions_it_calls() -> None:
    tracer = Tracer({"torch": torch})
    with tracer:
        helper_that_moves()
    [copy] = tracer.report().transfers
    assert copy.function == "helper_that_moves" and copy.names == ("t",)
    assert copy.line == helper_that_moves.__code__.co_firstlineno + 2


def helper_that_moves() -> None:
    t = torch.ones(1)
    t.to("meta")


def test_the_package_functions_are_the_recorder() -> None:
    import torchdevice_magic as tdm

    report = tdm.trace("y = torch.ones(2).to('meta')\n", {"torch": torch})
    assert isinstance(report, tdm.TraceReport) and report.transfers[0].target == "meta"
    assert tdm.Tracer is Tracer


def test_a_tensor_moved_again_each_time_round_is_told_to_move_once() -> None:
    """A loop that copies the same variable every time (``mask.to(dev)``) is told to move it
    once before the loop; one copying what the loop binds (a batch) keeps the dataset advice."""
    source = "for batch in data:\n    m = mask.to('meta')\n    b = batch.to('meta')\n"
    namespace = {"torch": torch, "data": [torch.ones(4) for _ in range(3)], "mask": torch.ones(8)}
    report = trace(source, namespace)
    hints = {t.line: t.hint() for t in report.transfers}
    assert hints[2] == (
        "line 2 copies mask from cpu to meta 3 times, 96 B: mask is the same tensor each time "
        'round: move it once, before the loop (mask = mask.to("meta"))'
    )
    assert hints[3] is not None and hints[3].endswith(
        "move the dataset once, or use pin_memory + non_blocking"
    )
