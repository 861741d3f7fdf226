"""The Devices sidebar at JupyterLab's default width (250 px), in headless Debian Chromium.

At that width every row still shows its device (the chip by the name) and, at that width and
wider ones, its move button, whole and inside the panel; a row whose data spans several devices has its device marked; the engines
section stays away while the kernel has no ipyparallel client (importing ipyparallel is not
having one). ``TDM_SHOTS=<folder>`` also writes the panel's screenshot there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from labpage import PANEL, TAB, run_cell, set_sidebar_width

expect = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is not installed"
).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

TARGET = "select.jp-TorchDevices-target"
ENGINES = f"{PANEL} .jp-TorchDevices-engines"
DEFAULT_WIDTH = 250  # JupyterLab's right sidebar when first opened
WIDTHS = (DEFAULT_WIDTH, 340, 420, 640)  # each side of the container queries in base.css

SETUP = (
    "%load_ext torchdevice_magic\n"
    "%config TorchDeviceMagic.allow_meta_target = True\n"
    "import torch\n"
    "x = torch.ones(1000)\n"
    "a_rather_long_tensor_name_for_the_sidebar = torch.ones(3)\n"
    "net = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))\n"
    "net[1].to('meta');"
)


# Every row: its device chip and move button as drawn (display, box inside the panel, text cut),
# the chip's colour, and whether the row is marked mixed.
ROWS_JS = """
(panelSelector) => {
  const panel = document.querySelector(panelSelector);
  const box = panel.getBoundingClientRect();
  const seen = el => {
    if (!el || getComputedStyle(el).display === 'none' || el.getClientRects().length === 0) {
      return null;
    }
    const r = el.getBoundingClientRect();
    return {
      text: el.textContent,
      inside: r.left >= box.left - 1 && r.right <= box.right + 1 && r.width > 0,
      cut: el.scrollWidth > el.clientWidth + 1,
      color: getComputedStyle(el).color,
    };
  };
  return Array.from(panel.querySelectorAll('tr.jp-TorchDevices-row')).map(tr => ({
    name: tr.dataset.name,
    device: tr.dataset.device,
    mixed: tr.classList.contains('jp-mod-mixed'),
    chip: seen(tr.querySelector('.jp-TorchDevices-deviceChip')),
    move: seen(tr.querySelector('button.jp-TorchDevices-rowMove')),
  }));
}
"""


@pytest.fixture(scope="module", autouse=True)
def fresh_kernel(lab):
    """A kernel without the extension or ipyparallel (other modules share this JupyterLab)."""
    page = lab.page
    page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
    page.wait_for_function(
        "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
        timeout=60_000,
    )


def test_each_row_keeps_its_device_and_move_button_in_sight(lab) -> None:
    page = lab.page
    run_cell(page, SETUP)
    if not page.locator(PANEL).is_visible():
        page.click(TAB)
    expect(page.locator(PANEL)).to_have_attribute("data-state", "ready")
    page.locator(TARGET).select_option("meta")
    expect(page.locator('tr.jp-TorchDevices-row[data-name="x"] button')).to_be_visible()
    if page.locator('.jp-SideBar.jp-mod-left li.lm-mod-current[data-id="filebrowser"]').count():
        page.click('.jp-SideBar.jp-mod-left li[data-id="filebrowser"]')
    before = page.locator(PANEL).bounding_box()["width"]
    try:
        for width in WIDTHS:
            shown = set_sidebar_width(page, width)
            assert abs(shown - width) <= 12, f"asked for {width} px, got {shown:.0f} px"
            page.mouse.move(0, 0)  # no hover highlight
            rows = {r["name"]: r for r in page.evaluate(ROWS_JS, PANEL)}
            shots = os.environ.get("TDM_SHOTS")
            if shots:
                page.locator(PANEL).screenshot(path=str(Path(shots) / f"sidebar-{width}px.png"))
            assert {"x", "net", "a_rather_long_tensor_name_for_the_sidebar"} <= set(rows)
            # on the cpu while the target is meta: x has a button that moves it
            assert rows["x"]["move"] is not None, rows["x"]
            for r in rows.values():
                if r["move"] is not None:
                    assert r["move"]["inside"] and not r["move"]["cut"], f"{width} px: {r}"
            if width == DEFAULT_WIDTH:  # the device in the chip by the name (the column is off)
                for r in rows.values():
                    assert r["chip"] is not None and r["chip"]["text"] == r["device"], r
                    assert r["chip"]["inside"] and not r["chip"]["cut"], r
                # net spans cpu and meta: the row says so, and its chip looks unlike a plain one
                assert rows["net"]["mixed"] and rows["net"]["chip"]["text"] == "cpu, meta"
                assert not rows["x"]["mixed"]
                assert rows["net"]["chip"]["color"] != rows["x"]["chip"]["color"]
    finally:
        set_sidebar_width(page, before)


def test_the_engines_section_waits_for_a_client(lab) -> None:
    page = lab.page
    if not page.locator(PANEL).is_visible():
        page.click(TAB)
    expect(page.locator(PANEL)).to_have_attribute("data-state", "ready")
    expect(page.locator(ENGINES)).to_be_hidden()
    run_cell(page, "import ipyparallel as ipp")  # a module, no client: nothing to gather
    page.wait_for_timeout(500)
    expect(page.locator(ENGINES)).to_be_hidden()
