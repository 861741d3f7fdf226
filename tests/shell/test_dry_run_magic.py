"""``%%devicecheck --dry-run`` in the in-process shell: the cell is predicted, not run (nothing
it would bind or change exists afterwards), the report is shown; --free sets the free memory
to compare with; options that need a real run are refused as one line."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from shellcells import SETUP, run


def test_dry_run_predicts_the_device_error_and_runs_nothing(ip):
    run(ip, SETUP)
    x = ip.user_ns["x"]
    result, _, shown = run(ip, "%%devicecheck --dry-run\ny = model(x)\nran = True")
    assert result.success
    assert "The cell would raise a device error on line 1" in shown
    assert "Device mismatch" in shown and "model" in shown
    assert "y" not in ip.user_ns and "ran" not in ip.user_ns
    assert ip.user_ns["x"] is x


def test_dry_run_compares_the_peak_with_the_free_memory_given(ip):
    run(ip, "import torch")
    cell = "big = torch.empty(1024, 1024, 256)"
    _, _, shown = run(ip, f"%%devicecheck --dry-run --free cpu=512MiB\n{cell}")
    assert "✓ No device error." in shown
    assert "Would run out of memory: would need 1.0 GiB on cpu, 512.0 MiB free" in shown
    assert "big" not in ip.user_ns


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("--free cpu=1GiB", "--free goes with --dry-run"),
        ("--dry-run --free cpu", "is not DEVICE=SIZE"),
        ("--dry-run --to cpu", "no --to, --trace or --strict"),
    ],
)
def test_options_that_need_a_real_run_or_a_size_are_refused_in_one_line(ip, line, words):
    run(ip, "import torch")
    result, _, _ = run(ip, f"%%devicecheck {line}\na = torch.ones(2)")
    assert isinstance(result.error_in_exec, UsageError)
    assert words in str(result.error_in_exec)
    assert "a" not in ip.user_ns
