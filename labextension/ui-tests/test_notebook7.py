"""The same labextension in Jupyter Notebook 7: the Devices sidebar and the %devices widget.

Its own server (``python -m notebook``) with isolated config/data dirs, stopped by its own PID
(and process group, which holds the kernel); a page of the Debian chromium that ``conftest.py``
starts. Skipped
where the ``notebook`` package (the test extra) is not installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
from labpage import PANEL
from labpage import run_cell as run_in_lab

pytest.importorskip("notebook", reason="Jupyter Notebook 7 is not installed")
expect = pytest.importorskip("playwright.sync_api").expect

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

CELLS = ".jp-Notebook .jp-Cell"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def nb7(lab):
    """A Notebook 7 server and a page in the browser the JupyterLab tests already run (one
    Playwright per process: a second sync Playwright cannot start inside the first one's loop)."""
    import nbformat

    root = Path(tempfile.mkdtemp(prefix="tdm-nb7-"))
    home = {name: root / name for name in ("config", "data", "runtime", "ipython", "work")}
    for path in home.values():
        path.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells.append(nbformat.v4.new_code_cell(""))
    nbformat.write(nb, home["work"] / "demo.ipynb")
    port = _free_port()
    env = dict(os.environ)
    env.update(
        JUPYTER_CONFIG_DIR=str(home["config"]),
        JUPYTER_DATA_DIR=str(home["data"]),
        JUPYTER_RUNTIME_DIR=str(home["runtime"]),
        JUPYTER_PATH=str(Path(sys.prefix) / "share" / "jupyter"),
        IPYTHONDIR=str(home["ipython"]),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    cmd = [
        sys.executable, "-m", "notebook", "--no-browser", "--allow-root", "--ip=127.0.0.1",
        f"--port={port}", "--ServerApp.port_retries=0", "--ServerApp.token=",
        "--ServerApp.password=", f"--ServerApp.root_dir={home['work']}",
        "--JupyterNotebookApp.expose_app_in_browser=True",
    ]  # fmt: skip
    log = open(root / "notebook.log", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    page = None
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError((root / "notebook.log").read_text()[-3000:]) from None
                time.sleep(0.25)
        page = lab.page.context.browser.new_page(viewport={"width": 1280, "height": 800})
        page.set_default_timeout(30_000)
        page.goto(f"http://127.0.0.1:{port}/notebooks/demo.ipynb", timeout=60_000)
        page.wait_for_function(
            "window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel?.status"
            " === 'idle'",
            timeout=90_000,
        )
        yield page
    finally:
        try:
            if page is not None:
                page.close()
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            log.close()
            shutil.rmtree(root, ignore_errors=True)


def run_cell(page, code: str):
    return run_in_lab(page, code, cells_selector=CELLS)


def test_sidebar_and_widget_work_in_notebook_7(nb7):
    page = nb7
    run_cell(page, "import torch\n%load_ext torchdevice_magic\nx = torch.ones(1000)")
    # Notebook 7 keeps the right sidebar closed: open the panel with the extension's command
    page.evaluate("window.jupyterapp.commands.execute('torchdevice-magic:show')")
    panel = page.locator(PANEL)
    expect(panel).to_be_visible()
    expect(panel).to_have_attribute("data-state", "ready")
    x = page.locator('tr.jp-TorchDevices-row[data-name="x"]')
    expect(x.locator("td.jp-TorchDevices-cell-size")).to_have_text("3.9 KiB")
    run_cell(page, "y = torch.ones(10)")
    expect(page.locator('tr.jp-TorchDevices-row[data-name="y"]')).to_be_visible()

    cell = run_cell(page, "%devices")
    output = cell.locator(".jp-OutputArea")
    expect(output.locator(".jupyter-widgets").first).to_be_visible(timeout=30_000)
    expect(output).to_contain_text("as of [")
    expect(output).to_contain_text("3.9 KiB")
