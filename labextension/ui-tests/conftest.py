"""One JupyterLab server and one headless Chromium for every browser test.

The server runs from this venv with isolated config/data/settings/workspace dirs under a
temporary root, so runs never touch ~/.jupyter; it is stopped by its own PID (and its process
group, which holds the kernel) in ``finally``. See ``README.md`` in this folder.
"""

from __future__ import annotations

import contextlib
import json
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

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
SERVER_START_TIMEOUT = 90  # s: jupyter lab up and answering /api/status
NOTEBOOK = "demo.ipynb"

# Panel selectors (labextension/README.md, "DOM for browser tests").
TAB = 'li[data-id="torchdevice-magic-panel"]'
PANEL = "#torchdevice-magic-panel"
STATUSBAR = "#jp-main-statusbar"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_settings(settings_dir: Path) -> None:
    """Light theme, and no news/update toasts over the notebook in screenshots."""
    files = {
        "@jupyterlab/apputils-extension/themes.jupyterlab-settings": {"theme": "JupyterLab Light"},
        "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
            "fetchNews": "false",
            "checkForUpdates": False,
        },
    }
    for rel, value in files.items():
        path = settings_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


def _write_notebook(path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nb.cells.append(nbformat.v4.new_code_cell(""))
    nbformat.write(nb, path)


class LabServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "jupyter-lab.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        venv = Path(sys.executable).resolve().parent.parent
        home = self.root / "home"
        dirs = {
            name: home / name
            for name in ("config", "data", "runtime", "settings", "workspaces", "ipython")
        }
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        _write_settings(dirs["settings"])
        work = self.root / "work"
        work.mkdir(exist_ok=True)
        _write_notebook(work / NOTEBOOK)

        env = dict(os.environ)
        env.update(
            JUPYTER_CONFIG_DIR=str(dirs["config"]),
            JUPYTER_DATA_DIR=str(dirs["data"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
            # a JUPYTER_PATH given to the run comes first, so a build of the sidebar placed
            # there (a worktree's) is the one JupyterLab loads, not the venv's
            JUPYTER_PATH=os.pathsep.join(
                p
                for p in [env.get("JUPYTER_PATH", ""), str(Path(sys.prefix) / "share" / "jupyter")]
                if p
            ),
            IPYTHONDIR=str(dirs["ipython"]),
            PATH=os.pathsep.join([str(venv / "bin"), env.get("PATH", "")]),
            PYTHONUNBUFFERED="1",
        )
        cmd = [
            sys.executable, "-m", "jupyterlab",
            "--no-browser",
            "--allow-root",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--ServerApp.port_retries=0",
            "--ServerApp.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={work}",
            f"--LabApp.user_settings_dir={dirs['settings']}",
            f"--LabApp.workspaces_dir={dirs['workspaces']}",
            # window.jupyterapp: the latency test listens to the kernel status signal
            "--LabApp.expose_app_in_browser=True",
        ]  # fmt: skip
        with open(self.log_path, "wb") as log:
            # own session: the kernel it starts is in this process group, so cleanup reaches it
            self.proc = subprocess.Popen(
                cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"jupyter lab exited with {self.proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/api/status", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError(
            f"jupyter lab did not answer within {SERVER_START_TIMEOUT} s:\n{self.log_tail()}"
        )

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        # anything left in the server's own process group (a kernel that outlived it)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


class Lab:
    """The browser page on the demo notebook, plus the server behind it."""

    def __init__(self, server: LabServer, page, artifacts: Path) -> None:
        self.server = server
        self.page = page
        self.artifacts = artifacts


@pytest.fixture(scope="session")
def lab():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium); browser tests need it")
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    from playwright.sync_api import sync_playwright

    root = Path(tempfile.mkdtemp(prefix="tdm-ui-"))
    server = LabServer(root)
    playwright = browser = None
    try:
        server.start()
        playwright = sync_playwright().start()
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000
        )
        context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
        context.set_default_timeout(30_000)
        page = context.new_page()
        page.goto(
            f"{server.url}/lab/tree/{NOTEBOOK}", wait_until="domcontentloaded", timeout=60_000
        )
        # The kernel is up and has answered: the status bar says "Python 3 (ipykernel) | Idle".
        page.wait_for_function(
            f"document.querySelector({STATUSBAR!r})?.textContent.includes('| Idle')", timeout=90_000
        )
        page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=30_000)
        yield Lab(server, page, root)
    except Exception:
        if server.proc is not None:
            sys.stderr.write(f"--- jupyter lab log ---\n{server.log_tail()}\n")
        raise
    finally:
        try:
            if browser is not None:
                browser.close()
        finally:
            try:
                if playwright is not None:
                    playwright.stop()
            finally:
                server.stop()
                shutil.rmtree(root, ignore_errors=True)
