"""What the browser tests do to JupyterLab's page more than once: run a cell as a user types
it, drag the right sidebar to a width, open the sidebar and load the extension from it."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

expect = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is not installed"
).expect

CELLS = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell"
PANEL = "#torchdevice-magic-panel"
TAB = 'li[data-id="torchdevice-magic-panel"]'
LOAD = "button.jp-TorchDevices-load"


def type_into_last_cell(page: Any, code: str, cells_selector: str = CELLS) -> Any:
    """Type ``code`` into the notebook's last cell, as a user would; returns that cell.
    ``cells_selector``: the notebook's cells where the page is not JupyterLab's (Notebook 7)."""
    cells = page.locator(cells_selector)
    cell = cells.nth(cells.count() - 1)
    editor = cell.locator(".cm-content")
    editor.click()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(code)
    expect(editor).to_have_text(code.replace("\n", ""), timeout=10_000)
    return cell


def wait_finished(cell: Any, timeout: int = 60_000) -> None:
    """The cell's prompt shows its execution count: "[*]:" became "[N]:"."""
    expect(cell.locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]"), timeout=timeout)


def run_cell(page: Any, code: str, timeout: int = 60_000, cells_selector: str = CELLS) -> Any:
    """Type ``code`` into the last cell, Shift+Enter, wait until its prompt shows a count."""
    cell = type_into_last_cell(page, code, cells_selector)
    page.keyboard.press("Shift+Enter")
    wait_finished(cell, timeout)
    return cell


def set_sidebar_width(page: Any, width: int) -> float:
    """Drag the right sidebar's edge until the Devices panel is about ``width`` px wide."""
    panel = page.locator(PANEL)
    box = panel.bounding_box()
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle:not(.lm-mod-hidden)").last
    hbox = handle.bounding_box()
    assert box is not None and hbox is not None, "no split handle next to the right sidebar"
    x, y = hbox["x"] + hbox["width"] / 2, hbox["y"] + hbox["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - (width - box["width"]), y, steps=8)
    page.mouse.up()
    page.wait_for_timeout(300)
    return float(panel.bounding_box()["width"])


def row(name: str) -> str:
    """The sidebar's row of the variable ``name``."""
    return f'tr.jp-TorchDevices-row[data-name="{name}"]'


def should_write(path: Path, env: str) -> bool:
    """Write a screenshot or a note only when it is missing or ``env`` is set to 1."""
    return os.environ.get(env) == "1" or not path.exists()


def open_sidebar(page: Any) -> None:
    panel = page.locator(PANEL)
    if not panel.is_visible():
        page.click(TAB)
    expect(panel).to_be_visible()


def ensure_loaded(page: Any) -> None:
    """The extension is loaded in the kernel (the first sidebar test does it through the
    button)."""
    open_sidebar(page)
    panel = page.locator(PANEL)
    expect(panel).to_have_attribute("data-state", re.compile("^(not-loaded|ready)$"))
    if panel.get_attribute("data-state") == "not-loaded":
        page.click(LOAD)
    expect(panel).to_have_attribute("data-state", "ready")


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
