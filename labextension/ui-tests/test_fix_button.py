"""One click from a device error to the fix, in a real JupyterLab (headless Debian Chromium).

A cell fails with a device-mismatch error (``model`` on the CPU, ``x`` on the accelerator); the
fix follows the accelerator, so the diagnosis under it offers "Move model to simdev:0 and
re-run"; pressing it moves ``model`` through the kernel's move engine and the labextension runs
the same cell again (a new execution count, no error output); the open sidebar's status line
names that move; the sidebar's Undo puts ``model`` back.
The kernel's second device is the simulated accelerator (torchdevice_magic.testing).
"""

from __future__ import annotations

import functools
import re

import pytest
from labpage import PANEL, TAB
from labpage import run_cell as run_in_lab

expect = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is not installed"
).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

UNDO = "button.jp-TorchDevices-undo"
STATUS = f"{PANEL} .jp-TorchDevices-status"
FIX = "button.torchdevice-magic-fix"
ERROR_OUTPUT = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
CELL_TIMEOUT = 90_000
#: a cell as a user runs it, given this file's time to finish
run_cell = functools.partial(run_in_lab, timeout=CELL_TIMEOUT)


def count(cell) -> int:
    text = cell.locator(".jp-InputPrompt").inner_text()
    match = re.search(r"\[(\d+)\]", text)
    assert match, text
    return int(match.group(1))


def device_of(page, name: str) -> str:
    cell = run_cell(page, f"print('device:', {name}.device)")
    text = cell.locator(".jp-OutputArea").inner_text()
    match = re.search(r"device: (\S+)", text)
    assert match, text
    return match.group(1)


def test_fix_button_moves_reruns_the_cell_and_undo_restores(lab) -> None:
    page = lab.page
    run_cell(page, "%load_ext torchdevice_magic")
    run_cell(
        page,
        "import torch\n"
        "from torchdevice_magic.testing import simulated_accelerator\n"
        'dev = simulated_accelerator() + ":0"\n'
        "model = torch.nn.Linear(3, 2)\n"
        "x = torch.randn(4, 3, device=dev)",
    )
    # the sidebar is open before the fix, so it hears of the move as it happens
    if not page.locator(PANEL).is_visible():
        page.click(TAB)
    expect(page.locator(PANEL)).to_be_visible(timeout=30_000)
    failing = run_cell(page, "y = model(x)")
    first = count(failing)
    outputs = failing.locator(".jp-OutputArea")
    expect(outputs.locator(".torchdevice-magic-diagnosis")).to_contain_text("Device mismatch")
    expect(outputs.locator(ERROR_OUTPUT)).to_contain_text("Expected all tensors")
    button = outputs.locator(FIX)
    expect(button).to_have_text(re.compile(r"Move model to simdev:0 and re-run"))

    button.click()

    # the notebook ran the same cell again: a new count, and it succeeded this time
    prompt = failing.locator(".jp-InputPrompt")
    expect(prompt).not_to_have_text(f"[{first}]:", timeout=CELL_TIMEOUT)
    expect(prompt).to_have_text(re.compile(r"\[\d+\]"), timeout=CELL_TIMEOUT)
    assert count(failing) > first
    expect(failing.locator(ERROR_OUTPUT)).to_have_count(0)
    expect(failing.locator(".torchdevice-magic-diagnosis")).to_have_count(0)
    # the sidebar's status line names the move made outside it (the kernel's delta carried it)
    expect(page.locator(STATUS)).to_contain_text(
        re.compile(r"Moved 1 object .* to simdev:0"), timeout=30_000
    )
    assert device_of(page, "model.weight") == "simdev:0"
    assert device_of(page, "y") == "simdev:0"

    # undo (the sidebar's Undo, the same history as every other move) restores the device
    if not page.locator(PANEL).is_visible():
        page.click(TAB)
    expect(page.locator(UNDO)).to_be_enabled(timeout=30_000)
    page.click(UNDO)
    expect(page.locator(UNDO)).to_be_disabled(timeout=30_000)
    assert device_of(page, "model.weight") == "cpu"
    assert device_of(page, "x") == "simdev:0"
