"""The sidebar's engines section in a real JupyterLab (headless Debian Chromium).

Before any client exists the sidebar has no engines section. Then the notebook's kernel starts a
2-engine ipyparallel cluster (``ipp.Cluster(n=2)``), each engine with the simulated accelerator
and a model on it: the section appears, Gather shows one row per engine and device from the
engines' summaries, and expanding engine 1 lists its objects. Closing the client takes the
section away again. The cluster is stopped at the end, whatever happened.
"""

from __future__ import annotations

import pytest
from labpage import PANEL, TAB, run_cell

expect = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is not installed"
).expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

SECTION = f"{PANEL} .jp-TorchDevices-engines"
GATHER = f"{SECTION} button.jp-TorchDevices-engines-gather"
CELL_TIMEOUT = 120_000

START = (
    "import ipyparallel as ipp\n"
    "cluster = ipp.Cluster(n=2, log_level=40)\n"
    "rc = cluster.start_and_connect_sync()\n"
    "rc.wait_for_engines(2, timeout=120)\n"
    "rc[:].execute('from torchdevice_magic.testing import simulated_accelerator\\n"
    "simulated_accelerator()\\nimport torch\\n"
    'model = torch.nn.Linear(8, 4).to("simdev:0")\\nx = torch.randn(2, 8)\', block=True)\n'
    "print('engines up:', rc.ids)"
)


def engine_row(engine: int, device: str) -> str:
    return f'{SECTION} tr.jp-TorchDevices-engines-row[data-engine="{engine}"]:has-text("{device}")'


def test_gather_shows_engines_and_expands_one(lab) -> None:
    page = lab.page
    run_cell(page, "%load_ext torchdevice_magic", CELL_TIMEOUT)
    if not page.locator(PANEL).is_visible():
        page.click(TAB)
    expect(page.locator(PANEL)).to_have_attribute("data-state", "ready")
    expect(page.locator(SECTION)).to_be_hidden()  # no client yet: nothing to gather
    started = run_cell(page, START, CELL_TIMEOUT)
    try:
        expect(started.locator(".jp-OutputArea")).to_contain_text("engines up: [0, 1]")
        if not page.locator(PANEL).is_visible():
            page.click(TAB)
        expect(page.locator(SECTION)).to_be_visible(timeout=30_000)
        note = page.locator(f"{SECTION} .jp-TorchDevices-engines-note")
        assert note.evaluate("n => n.scrollWidth <= n.clientWidth"), (
            "the note runs out of the sidebar"
        )
        expect(page.locator(GATHER)).to_be_enabled(timeout=30_000)
        page.click(GATHER)
        for engine in (0, 1):
            expect(page.locator(engine_row(engine, "simdev:0"))).to_contain_text(
                "144 B", timeout=30_000
            )
            expect(page.locator(engine_row(engine, "cpu"))).to_contain_text("64 B")
        # the columns read first (engine, device, size) fit the sidebar's usual width
        section = page.locator(SECTION).bounding_box()
        size = page.locator(engine_row(0, "simdev:0")).locator("td", has_text="144 B")
        box = size.bounding_box()
        assert section is not None and box is not None
        assert box["x"] + box["width"] <= section["x"] + section["width"], (box, section)
        expect(page.locator(f"{SECTION} .jp-TorchDevices-engines-note")).to_contain_text(
            "2 engines answered"
        )
        expect(page.locator(GATHER)).to_have_text("Refresh")

        page.locator(f'{SECTION} tr[data-engine="1"] button.jp-TorchDevices-engines-expand').click()
        objects = page.locator(f'{SECTION} tr.jp-TorchDevices-engines-object[data-engine="1"]')
        expect(objects).to_have_count(2, timeout=30_000)
        expect(objects.first).to_contain_text("model")
        expect(
            page.locator(f'{SECTION} tr.jp-TorchDevices-engines-object[data-engine="0"]')
        ).to_have_count(0)
        run_cell(page, "rc.close()", CELL_TIMEOUT)
        expect(page.locator(SECTION)).to_be_hidden(timeout=30_000)
    finally:
        run_cell(page, "rc.close()\ncluster.stop_cluster_sync()", CELL_TIMEOUT)
