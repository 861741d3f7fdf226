"""The Devices sidebar in a real JupyterLab, driven by headless Debian Chromium.

One server, one kernel, one page for the whole module (``conftest.py``); the tests run in
file order and build on each other's kernel state the way a user's session would: load the
extension from the sidebar, create tensors, move them, make a mixed model. Each test that needs
objects creates them itself, so a failure does not cascade further than the shared kernel.

Screenshots (``docs/images/``) are written only when missing or when ``UPDATE_SCREENSHOTS=1``
is set, so a CI run never dirties the tree; the elements they show are asserted every run. The
latency test is in ``test_sidebar_latency.py``; the helpers several files use in ``labpage.py``.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest
from labpage import (
    CELLS,
    LOAD,
    PANEL,
    TAB,
    ensure_loaded,
    has_cuda,
    open_sidebar,
    row,
    set_sidebar_width,
    should_write,
)
from labpage import run_cell as run_in_lab

expect = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is not installed"
).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "docs" / "images"

# Selectors: labextension/README.md, "DOM for browser tests" (the panel's, the tab's, the
# cells' and the load button's in labpage.py). (Not imported from conftest.py: another
# conftest module on sys.path would shadow it.)
STATUS = ".jp-TorchDevices-status"
BANNER = ".jp-TorchDevices-banner"
TARGET = "select.jp-TorchDevices-target"
MOVE_ALL = "button.jp-TorchDevices-moveAll"
UNDO = "button.jp-TorchDevices-undo"
CELL_TIMEOUT = 60_000  # ms: a cell (import torch is the slow one: ~2-5 s cold)
#: a cell as a user runs it, given this file's time to finish
run_cell = functools.partial(run_in_lab, timeout=CELL_TIMEOUT)


# The sizes the panel shows are the kernel's text, written by this function.
from torchdevice_magic.units import format_bytes  # noqa: E402

# ---- driving the notebook -----------------------------------------------------------------


def output_text(cell) -> str:
    return cell.locator(".jp-OutputArea").inner_text()


SETUP = "import torch\nx = torch.ones(1000)\nmodel = torch.nn.Linear(100, 10)"


def ensure_x_and_model_on_cpu(page) -> None:
    """torch imported, `x` and `model` on the cpu; runs a setup cell only when they are not."""
    ensure_loaded(page)
    panel = page.locator(PANEL)
    on_cpu = panel.get_attribute("data-torch") == "true" and all(
        page.locator(row(name)).count() == 1
        and page.locator(row(name)).get_attribute("data-device") == "cpu"
        for name in ("x", "model")
    )
    if not on_cpu:
        run_cell(page, SETUP)
    for name in ("x", "model"):
        expect(page.locator(row(name)).locator("td.jp-TorchDevices-cell-device")).to_have_text(
            "cpu"
        )


def widen_sidebar(page, width: int = 560) -> None:
    """Collapse the file browser and drag the right sidebar's edge so every column shows."""
    if page.locator('.jp-SideBar.jp-mod-left li.lm-mod-current[data-id="filebrowser"]').count():
        page.click('.jp-SideBar.jp-mod-left li[data-id="filebrowser"]')
        expect(page.locator("#filebrowser")).to_be_hidden()
    panel = page.locator(PANEL)
    box = panel.bounding_box()
    if box is None or box["width"] >= width - 2:
        return
    # the split handle sits just left of the right sidebar's stack
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle:not(.lm-mod-hidden)").last
    hbox = handle.bounding_box()
    assert hbox is not None, "no split handle next to the right sidebar"
    x, y = hbox["x"] + hbox["width"] / 2, hbox["y"] + hbox["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - (width - box["width"]), y, steps=8)
    page.mouse.up()
    page.wait_for_function(
        f"document.querySelector({PANEL!r}).getBoundingClientRect().width >= {width - 20}",
        timeout=5_000,
    )


# ---- the tests ----------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def fresh_kernel(lab):
    """These tests tell one session's story from a kernel without the extension: restart the
    kernel other test modules (sharing this JupyterLab) may have used, and wait for it."""
    page = lab.page
    page.evaluate("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart()")
    page.wait_for_function(
        "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'",
        timeout=60_000,
    )
    yield


def test_load_from_sidebar(lab):
    """A fresh kernel: the sidebar says the extension is not loaded; Load makes it ready."""
    page = lab.page
    open_sidebar(page)
    panel = page.locator(PANEL)
    expect(panel).to_have_attribute("data-state", "not-loaded")
    expect(page.locator(".jp-TorchDevices-noticeText")).to_have_text(
        "torchdevice_magic is not loaded in this kernel."
    )
    expect(page.locator(".jp-TorchDevices-context")).to_have_text("demo.ipynb")
    load = page.locator(LOAD)
    expect(load).to_be_visible()
    expect(load).to_have_text("Load in this kernel")
    cells_before = page.locator(CELLS).count()
    load.click()
    expect(panel).to_have_attribute("data-state", "ready")
    expect(panel).to_have_attribute("data-torch", "false")
    expect(page.locator(".jp-TorchDevices-noticeText")).to_have_text(
        "torch is not imported in this kernel yet."
    )
    expect(load).to_be_hidden()
    # Loading is silent: no cell ran, nothing in the notebook changed.
    assert page.locator(CELLS).count() == cells_before


def test_cells_show_rows_and_totals(lab):
    page = lab.page
    ensure_loaded(page)
    panel = page.locator(PANEL)
    run_cell(page, "import torch")
    expect(panel).to_have_attribute("data-torch", "true")
    run_cell(page, "x = torch.ones(1000)")
    run_cell(page, "model = torch.nn.Linear(100, 10)")

    sizes = {"x": 1000 * 4, "model": (100 * 10 + 10) * 4}
    for name, nbytes in sizes.items():
        tr = page.locator(row(name))
        expect(tr).to_be_visible()
        expect(tr.locator("td.jp-TorchDevices-cell-device")).to_have_text("cpu")
        expect(tr.locator("td.jp-TorchDevices-cell-size")).to_have_text(format_bytes(nbytes))
    assert format_bytes(sizes["x"]) == "3.9 KiB" and format_bytes(sizes["model"]) == "3.9 KiB"
    expect(page.locator(row("x"))).to_have_attribute("data-kind", "tensor")
    expect(page.locator(row("model"))).to_have_attribute("data-kind", "module")
    cpu = page.locator('.jp-TorchDevices-total[data-device="cpu"]')
    expect(cpu).to_be_visible()
    expect(cpu.locator(".jp-TorchDevices-totalSize")).to_have_text(
        format_bytes(sum(sizes.values()))
    )
    expect(page.locator(".jp-TorchDevices-summary")).to_have_text("Rows 1–2 of 2")
    expect(page.locator(BANNER)).to_be_hidden()


def test_mixed_model_shows_banner_and_screenshot(lab):
    page = lab.page
    ensure_x_and_model_on_cpu(page)
    cell = run_cell(
        page,
        "net = torch.nn.Sequential(torch.nn.Linear(2, 2),\n                          torch.nn.Linear(2, 2))\nnet[1].to('meta');",
    )
    banner = page.locator(BANNER)
    expect(banner).to_be_visible()
    expect(banner).to_have_attribute("role", "alert")
    expect(banner.locator("li.jp-TorchDevices-warning")).to_contain_text(["net"])
    net = page.locator(row("net"))
    expect(net.locator("td.jp-TorchDevices-cell-device")).to_have_text("cpu, meta")
    # the kernel says it in the cell too (stderr)
    expect(cell.locator(".jp-OutputArea")).to_contain_text("net (Sequential) spans cpu, meta")
    for name in ("x", "model"):
        expect(page.locator(row(name)).locator("td.jp-TorchDevices-cell-device")).to_have_text(
            "cpu"
        )
    expect(page.locator('.jp-TorchDevices-total[data-device="cpu"]')).to_be_visible()
    expect(page.locator('.jp-TorchDevices-total[data-device="meta"]')).to_be_visible()

    widen_sidebar(page)
    for sel in (
        BANNER,
        row("net"),
        row("x"),
        row("model"),
        '.jp-TorchDevices-total[data-device="cpu"]',
    ):
        expect(page.locator(sel)).to_be_in_viewport()
    expect(page.locator(".jp-Notebook")).to_be_visible()
    path = IMAGES / "sidebar.png"
    if should_write(path, "UPDATE_SCREENSHOTS"):
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.mouse.move(0, 0)  # no hover highlight in the picture
        page.screenshot(path=str(path))


def _move_all(page, device: str) -> list[str]:
    """Pick `device`, click Move all; returns the names of the rows that were elsewhere."""
    if page.locator(TARGET).input_value() != device:
        page.locator(TARGET).select_option(device)
    move = page.locator(MOVE_ALL)
    expect(move).to_have_text(f"Move all to {device}")
    expect(move).to_be_enabled()
    rows = page.locator("tr.jp-TorchDevices-row")
    names = [
        r.get_attribute("data-name") for r in rows.all() if r.get_attribute("data-device") != device
    ]
    move.click()
    status = page.locator(STATUS)
    n = len(names)
    expect(status).to_have_text(
        re.compile(rf"^Moved {n} objects? \(.*\) to {re.escape(device)} in ")
    )
    expect(status).to_have_attribute("data-kind", "ok")
    return names


def test_move_all_to_meta_and_undo_is_not_offered(lab):
    page = lab.page
    ensure_x_and_model_on_cpu(page)

    target = page.locator(TARGET)
    # Without the config meta is listed but disabled (with the reason as its tooltip).
    meta_option = target.locator('option[value="meta"]')
    expect(meta_option).to_be_disabled()
    run_cell(page, "%config TorchDeviceMagic.allow_meta_target = True")
    expect(meta_option).to_be_enabled()
    # The kernel's default target is now meta (it stands in for the missing accelerator):
    # the kernel's header says so and the select follows it.
    expect(target).to_have_value("meta")
    views_before = int(page.locator(PANEL).get_attribute("data-views"))
    moved = _move_all(page, "meta")
    # the memory chart shows the move at once, before any cell runs, as the totals do
    chart = page.locator('.jp-TorchDeviceMagic-timeline-device[data-device="cpu"]')
    chart_label = chart.locator(".jp-TorchDeviceMagic-timeline-label")
    expect(chart_label).to_contain_text("cpu: 0 B held")
    expect(chart_label).to_contain_text("by the move to meta)")
    if os.environ.get("TDM_SHOT_DIR"):
        page.locator(PANEL).screenshot(path=f"{os.environ['TDM_SHOT_DIR']}/after_move_all.png")
    # the move came back as deltas of the window, not as a whole new view
    assert int(page.locator(PANEL).get_attribute("data-views")) == views_before
    assert int(page.locator(PANEL).get_attribute("data-deltas")) > 0
    assert {"x", "model"} <= set(moved)
    needs = {"x": 1000 * 4, "model": (100 * 10 + 10) * 4, "net": 2 * (2 * 2 + 2) * 4}
    for name in moved:
        expect(page.locator(row(name)).locator("td.jp-TorchDevices-cell-device")).to_have_text(
            "meta"
        )
        # meta keeps no data: 0 B, and what it would need on a real device
        size = page.locator(row(name)).locator("td.jp-TorchDevices-cell-size")
        expect(size).to_have_text(f"0 B (meta; needs {format_bytes(needs[name])})")
    # a mixed `net` (from the banner test) went wholly to meta: no more warning
    expect(page.locator(BANNER)).to_be_hidden()
    expect(page.locator('.jp-TorchDevices-total[data-device="cpu"]')).to_have_count(0)
    expect(
        page.locator('.jp-TorchDevices-total[data-device="meta"] .jp-TorchDevices-totalSize')
    ).to_have_text(f"0 B (meta; needs {format_bytes(sum(needs[name] for name in moved))})")
    cell = run_cell(page, "print(x.device, model.weight.device)")
    assert output_text(cell).strip() == "meta meta"

    # meta keeps no data: the outcome says it cannot be undone, and Undo is not offered
    expect(page.locator(STATUS)).to_contain_text("(cannot be undone: meta keeps no data)")
    expect(page.locator(UNDO)).to_be_disabled()
    cell = run_cell(page, "print(x.device, model.weight.device)")
    assert output_text(cell).strip() == "meta meta"


@pytest.mark.cuda
def test_move_all_to_cuda_and_undo(lab):
    if not has_cuda():
        pytest.skip(
            "no CUDA in the test process (torch.cuda.is_available() is False): the cuda move + undo is not run"
        )
    page = lab.page
    ensure_x_and_model_on_cpu(page)
    expect(page.locator(TARGET).locator('option[value^="cuda"]').first).to_be_enabled()
    device = page.locator(TARGET).locator('option[value^="cuda"]').first.get_attribute("value")
    _move_all(page, device)
    for name in ("x", "model"):
        expect(page.locator(row(name)).locator("td.jp-TorchDevices-cell-device")).to_have_text(
            re.compile(r"^cuda(:\d+)?$")
        )
    cell = run_cell(page, "print(x.device, model.weight.device)")
    assert re.fullmatch(r"cuda:\d+ cuda:\d+", output_text(cell).strip())
    page.click(UNDO)
    status = page.locator(STATUS)
    expect(status).to_have_attribute("data-kind", "ok")
    for name in ("x", "model"):
        expect(page.locator(row(name)).locator("td.jp-TorchDevices-cell-device")).to_have_text(
            "cpu"
        )
    cell = run_cell(page, "print(x.device, model.weight.device)")
    assert output_text(cell).strip() == "cpu cpu"


def test_devices_widget_screenshot(lab):
    page = lab.page
    ensure_x_and_model_on_cpu(page)
    cell = run_cell(page, "%devices")
    # the notebook's full width for the widget: close the right sidebar (its tab toggles it)
    page.click(TAB)
    expect(page.locator(PANEL)).to_be_hidden()
    output = cell.locator(".jp-OutputArea")
    widget = output.locator(".jupyter-widgets").first
    expect(widget).to_be_visible(timeout=30_000)
    expect(output).to_contain_text("model")
    expect(output).to_contain_text("cpu")
    output.evaluate("e => e.scrollIntoView({block: 'center'})")
    expect(output).to_be_in_viewport(ratio=1)
    path = IMAGES / "widget.png"
    if should_write(path, "UPDATE_SCREENSHOTS"):
        IMAGES.mkdir(parents=True, exist_ok=True)
        page.mouse.move(0, 0)
        output.screenshot(path=str(path))
    open_sidebar(page)


# For every visible cell of the given columns: is its text cut (scrollWidth > clientWidth), or
# is the cell outside what its container shows (scrolled out of sight)?
CLIPPED_JS = """
([rootSelector, cellSelector, containerSelector]) => {
  const root = document.querySelector(rootSelector);
  const container = root.closest(containerSelector) || root;
  const box = container.getBoundingClientRect();
  const problems = [];
  for (const cell of root.querySelectorAll(cellSelector)) {
    if (cell.offsetParent === null) continue;  // a hidden column, not a clipped one
    const r = cell.getBoundingClientRect();
    const text = cell.textContent;
    if (cell.scrollWidth > cell.clientWidth + 1) problems.push(`cut: ${text} (${cell.scrollWidth} > ${cell.clientWidth})`);
    if (r.left < box.left - 1 || r.right > box.right + 1) problems.push(`out of sight: ${text} [${Math.round(r.left)}..${Math.round(r.right)} not in ${Math.round(box.left)}..${Math.round(box.right)}]`);
  }
  return problems;
}
"""

LONG_NAME = "a_rather_long_tensor_name_for_the_layout"


def test_search_box_narrows_rows_in_the_kernel(lab):
    page = lab.page
    ensure_loaded(page)
    run_cell(
        page, "import torch\nalpha1 = torch.ones(7)\nalpha2 = torch.ones(8)\nbeta = torch.ones(9)"
    )
    search = page.locator("input.jp-TorchDevices-filter")
    views_before = int(page.locator(PANEL).get_attribute("data-views"))
    search.fill("alpha")
    expect(page.locator("tr.jp-TorchDevices-row")).to_have_count(2)
    expect(page.locator(row("alpha1"))).to_be_visible()
    expect(page.locator(row("beta"))).to_have_count(0)
    expect(page.locator(".jp-TorchDevices-summary")).to_contain_text("Rows 1–2 of 2 (filtered from")
    # the kernel filtered: it sent a new window
    assert int(page.locator(PANEL).get_attribute("data-views")) > views_before
    search.fill("")
    expect(page.locator(row("beta"))).to_be_visible()


def test_sidebar_columns_are_not_clipped_at_three_widths(lab):
    page = lab.page
    ensure_x_and_model_on_cpu(page)
    run_cell(page, f"{LONG_NAME} = torch.ones(3, requires_grad=True)\n{LONG_NAME}.sum().backward()")
    expect(page.locator(row(LONG_NAME))).to_be_visible()
    if page.locator('.jp-SideBar.jp-mod-left li.lm-mod-current[data-id="filebrowser"]').count():
        page.click('.jp-SideBar.jp-mod-left li[data-id="filebrowser"]')
    default = page.locator(PANEL).bounding_box()["width"]
    for label, width in (("default", None), ("narrow", 250), ("wide", 640)):
        shown = default if width is None else set_sidebar_width(page, width)
        problems = page.evaluate(
            CLIPPED_JS,
            [
                "#torchdevice-magic-panel table",
                "td.jp-TorchDevices-cell-name, td.jp-TorchDevices-cell-size, "
                "th.jp-TorchDevices-cell-name, th.jp-TorchDevices-cell-size",
                "#torchdevice-magic-panel",
            ],
        )
        assert problems == [], f"{label} sidebar ({shown:.0f} px): {problems}"
        path = IMAGES / f"sidebar-{label}.png"
        if should_write(path, "UPDATE_SCREENSHOTS"):
            IMAGES.mkdir(parents=True, exist_ok=True)
            page.mouse.move(0, 0)
            page.locator(PANEL).screenshot(path=str(path))
    set_sidebar_width(page, default)


# For every row of the sidebar's table: the device texts it shows (the Device column's cell
# or the chip by the name, whichever is displayed), each inside the panel and not cut.
ROW_DEVICES_JS = """
(panelSelector) => {
  const panel = document.querySelector(panelSelector);
  const box = panel.getBoundingClientRect();
  return Array.from(panel.querySelectorAll('tr.jp-TorchDevices-row')).map(tr => {
    const shown = [];
    for (const el of tr.querySelectorAll('td.jp-TorchDevices-cell-device, .jp-TorchDevices-deviceChip')) {
      if (getComputedStyle(el).display === 'none' || el.getClientRects().length === 0) continue;
      const r = el.getBoundingClientRect();
      const inside = r.left >= box.left - 1 && r.right <= box.right + 1 && r.width > 0;
      const cut = el.scrollWidth > el.clientWidth + 1;
      shown.push({text: el.textContent, inside, cut, chip: el.matches('.jp-TorchDevices-deviceChip')});
    }
    return {name: tr.dataset.name, device: tr.dataset.device, shown};
  });
}
"""


def test_each_row_shows_its_device_at_250_px(lab):
    page = lab.page
    ensure_x_and_model_on_cpu(page)
    run_cell(
        page, "on_meta = torch.ones(6, device='meta')\nhalf = torch.nn.Linear(4, 4).to('meta')"
    )
    expect(page.locator(row("on_meta"))).to_have_attribute("data-device", "meta")
    if page.locator('.jp-SideBar.jp-mod-left li.lm-mod-current[data-id="filebrowser"]').count():
        page.click('.jp-SideBar.jp-mod-left li[data-id="filebrowser"]')
    before = page.locator(PANEL).bounding_box()["width"]
    try:
        for width in (250, 340, 640):
            shown = set_sidebar_width(page, width)
            assert abs(shown - width) <= 12, f"asked for a {width} px sidebar, got {shown:.0f} px"
            rows = page.evaluate(ROW_DEVICES_JS, PANEL)
            assert {r["device"] for r in rows} >= {"cpu", "meta"}
            for r in rows:
                assert [s["text"] for s in r["shown"]] == [r["device"]], f"{width} px: {r}"
                assert all(s["inside"] and not s["cut"] for s in r["shown"]), f"{width} px: {r}"
            # 250 px (226 px inside the padding, under 300): the chip; wider: the Device column
            chips = {s["chip"] for r in rows for s in r["shown"]}
            assert chips == ({True} if width == 250 else {False}), f"{width} px: {chips}"
    finally:
        set_sidebar_width(page, before)


def test_widget_columns_are_not_clipped_at_three_widths(lab):
    page = lab.page
    ensure_x_and_model_on_cpu(page)
    run_cell(page, f"{LONG_NAME} = torch.ones(3, requires_grad=True)\n{LONG_NAME}.sum().backward()")
    cell = run_cell(page, "%devices")
    page.click(TAB)  # the notebook's full width: close the right sidebar
    expect(page.locator(PANEL)).to_be_hidden()
    output = cell.locator(".jp-OutputArea")
    expect(output.locator(".jupyter-widgets").first).to_be_visible(timeout=30_000)
    expect(output).to_contain_text(LONG_NAME)
    expect(output).to_contain_text("as of [")
    output.evaluate("e => { e.id = 'tdm-widget-output'; }")
    try:
        for label, width in (("wide", 1280), ("medium", 900), ("narrow", 640)):
            page.set_viewport_size({"width": width, "height": 800})
            page.wait_for_timeout(300)
            problems = page.evaluate(
                CLIPPED_JS,
                [
                    "#tdm-widget-output",
                    ".tdm-cell-name, .tdm-cell-size, .tdm-cell-grad",
                    "#tdm-widget-output",
                ],
            )
            if problems:
                chain = page.evaluate(
                    """() => { const out = []; let e = document.querySelector('#tdm-widget-output .tdm-cell-name');
                    while (e && e.id !== 'tdm-widget-output') { const cs = getComputedStyle(e);
                    out.push(`${e.tagName}.${e.className} w=${e.getBoundingClientRect().width} disp=${cs.display} minw=${cs.minWidth} ov=${cs.overflow} flex=${cs.flex}`);
                    e = e.parentElement; } return out; }"""
                )
                print("\n".join(chain))
            assert problems == [], f"widget at {width} px: {problems}"
            path = IMAGES / f"widget-{label}.png"
            if should_write(path, "UPDATE_SCREENSHOTS"):
                IMAGES.mkdir(parents=True, exist_ok=True)
                output.evaluate("e => e.scrollIntoView({block: 'center'})")
                page.mouse.move(0, 0)
                output.screenshot(path=str(path))
    finally:
        page.set_viewport_size({"width": 1280, "height": 800})
        open_sidebar(page)


def test_live_widget_table_reorders_rows_as_a_fresh_table_draws_them(lab):
    """A live table keeps each row's widgets while the row stays on the page and reorders the
    grid: after a cell that puts a new row at the top and moves another, the browser shows the
    names in the order a table drawn afresh shows them, with the new sizes."""
    page = lab.page
    ensure_x_and_model_on_cpu(page)
    run_cell(page, "live_small = torch.zeros(4)")
    live = run_cell(page, "%devices --live").locator(".jp-OutputArea")
    expect(live.locator(".jupyter-widgets").first).to_be_visible(timeout=30_000)
    expect(live).to_contain_text("live_small")
    run_cell(page, "live_big = torch.zeros(1 << 18)\nlive_small = torch.zeros(1 << 17)")
    fresh = run_cell(page, "%devices").locator(".jp-OutputArea")
    expect(fresh).to_contain_text("live_big")
    order = fresh.locator(".tdm-cell-name").all_text_contents()
    assert order.index("live_big") < order.index("live_small"), order
    expect(live.locator(".tdm-cell-name")).to_have_text(order)
    sizes = fresh.locator(".tdm-cell-size").all_text_contents()
    expect(live.locator(".tdm-cell-size")).to_have_text(sizes)
    assert format_bytes(1 << 19) in sizes  # live_small's new 512 KiB, drawn in both


def test_unload_leaves_one_clear_state(lab):
    page = lab.page
    ensure_loaded(page)
    run_cell(page, "%unload_ext torchdevice_magic")
    panel = page.locator(PANEL)
    expect(panel).to_have_attribute("data-state", "not-loaded")
    expect(page.locator(".jp-TorchDevices-noticeText")).to_have_text(
        "torchdevice_magic is not loaded in this kernel."
    )
    expect(page.locator(STATUS)).to_have_text("")
    expect(page.locator("tr.jp-TorchDevices-row")).to_have_count(0)
    page.click(LOAD)
    expect(panel).to_have_attribute("data-state", "ready")
