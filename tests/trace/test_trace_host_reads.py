"""trace(): values read back to the host per line (``.item()`` in a loop, boolean masks, and
what dispatch cannot see: ``.tolist()``, ``.numpy()``, printing).

Tests marked ``simulated`` run in the one child process that registers the simulated
accelerator (see conftest.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from trace_checks import cell

from torchdevice_magic.trace import trace

ITEM_LOOP = cell(
    """
    x = torch.arange(10.0, device=DEV)
    total = 0.0
    for i in range(10):
        total += x[i].item()
    """
)


@pytest.mark.simulated
def test_a_loop_calling_item_10_times_is_10_host_reads_on_its_line(simulated_device: str) -> None:
    namespace = {"torch": torch, "DEV": simulated_device}
    report = trace(ITEM_LOOP, namespace)
    assert report.error is None and namespace["total"] == 45.0
    [reads] = report.host_reads
    assert (reads.line, reads.count, reads.device, reads.ops) == (
        4,
        10,
        simulated_device,
        (".item()",),
    )
    assert reads.syncs
    assert report.first_divergence is None and not report.transfers
    assert any("line 4 reads values from" in h and "10 times" in h for h in report.hints())


def test_a_loop_calling_item_10_times_on_cpu() -> None:
    report = trace(ITEM_LOOP, {"torch": torch, "DEV": "cpu"})
    [reads] = report.host_reads
    assert (reads.line, reads.count, reads.device) == (4, 10, "cpu")
    assert not reads.syncs and not report.hints()  # the cpu never waits


def test_host_reads_dispatch_cannot_see_are_named() -> None:
    source = cell(
        """
        x = torch.tensor([1.0, -2.0, 3.0])
        a = x.tolist()
        b = x.numpy()
        text = repr(x)
        f = float(x[0])
        ok = bool(x[1] > 0)
        nz = x.nonzero()
        label = f"{x[2]:.1f}"
        """
    )
    report = trace(source, {"torch": torch})
    ops = {r.line: r.ops for r in report.host_reads}
    assert ops == {
        2: (".tolist()",),
        3: (".numpy()",),
        4: ("print/repr",),
        5: ("float()",),
        6: ("bool()",),
        7: ("nonzero",),
        8: ("format",),
    }
    assert all(r.count == 1 for r in report.host_reads)  # printing's own ops are not counted


READ_FIRST = "def read_first(x):\n    return x[0].item()\n"


def reads_of_modules(monkeypatch: pytest.MonkeyPatch, folders: dict[str, Path]) -> list[Any]:
    """The host reads a cell makes calling ``read_first`` of each module (``READ_FIRST``,
    written to the folder given), as sorted (file, line, function, count)."""
    calls = []
    for module, folder in folders.items():
        folder.mkdir(parents=True)
        (folder / f"{module}.py").write_text(READ_FIRST)
        monkeypatch.syspath_prepend(str(folder))
        monkeypatch.delitem(sys.modules, module, raising=False)
        calls.append(f"import {module}\n{module}.read_first(x)\n")
    report = trace("x = torch.arange(3.0)\n" + "".join(calls), {"torch": torch})
    assert report.error is None
    return sorted((r.file, r.line, r.function, r.count) for r in report.host_reads)


def test_a_read_inside_an_installed_package_is_the_callers_line(tmp_path, monkeypatch) -> None:
    """An installed package's code (a ``site-packages`` folder: transformers, accelerate) is
    not the user's: its host read is put on the cell line that called it. The same code in
    the user's own module beside the notebook keeps its own line (the two code objects differ
    in their file only, and compare equal)."""
    installed = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    folders = {"readlib_installed": installed, "readlib_own": tmp_path / "project"}
    assert reads_of_modules(monkeypatch, folders) == [
        ("", 3, "<cell>", 1),
        ("readlib_own.py", 2, "read_first", 1),
    ]


def test_the_same_function_in_two_files_is_two_rows(tmp_path, monkeypatch) -> None:
    """Two of the user's modules with the same function at the same line: their code objects
    compare equal, their reads are still counted each in its own file."""
    folders = {"reads_here": tmp_path / "here", "reads_there": tmp_path / "there"}
    assert reads_of_modules(monkeypatch, folders) == [
        ("reads_here.py", 2, "read_first", 1),
        ("reads_there.py", 2, "read_first", 1),
    ]
