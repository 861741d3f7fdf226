"""Shared test helpers."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

_LAZY_STATE: list[str] = []


@pytest.fixture
def lazy_backend() -> str:
    """torch's TorchScript lazy backend: a second device that keeps data on a CPU-only machine
    (undo round trips). It can be initialised once per process, so every test module shares
    this one initialisation. (A fixture, not an import: two conftest.py files are collected.)"""
    if not _LAZY_STATE:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module("torch._lazy.ts_backend").init()
            torch.ones(1).to("lazy").cpu()
            _LAZY_STATE.append("")
        except Exception as error:  # depends on the torch build
            _LAZY_STATE.append(f"lazy backend unavailable: {error}")
    if _LAZY_STATE[0]:
        pytest.skip(_LAZY_STATE[0])
    return "lazy"


# --------------------------------------------------------------------------------------------
# The simulated accelerator (torchdevice_magic.testing) is registered process-wide and for good,
# and makes torch.accelerator report it. Tests marked ``simulated`` therefore run together in ONE
# child pytest process that registers it; the main run reports each one's outcome from there.
_CHILD_ENV = "TORCHDEVICE_MAGIC_SIMULATED_RESULTS"
_simulated_outcomes: dict[str, dict[str, str]] = {}


def _in_simulated_child() -> bool:
    return _CHILD_ENV in os.environ


@pytest.fixture
def simulated_device() -> str:
    """The simulated accelerator's device string ("simdev:0"); tests using it are marked
    ``@pytest.mark.simulated`` and run in the child process, where it is registered."""
    if not _in_simulated_child():
        pytest.fail("a test using simulated_device must be marked @pytest.mark.simulated")
    from torchdevice_magic.testing import simulated_accelerator

    return f"{simulated_accelerator()}:0"


@pytest.fixture
def two_devices(simulated_device: str) -> Iterator[str]:
    """The simulated accelerator with two devices (``<kind>:0`` and ``<kind>:1``) for one test;
    its device type is returned, and one device and device 0 as current are put back after."""
    from torchdevice_magic.testing import simulated_accelerator

    kind = simulated_accelerator(devices=2)
    try:
        yield kind
    finally:
        getattr(torch, kind).set_device(0)
        simulated_accelerator(devices=1)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "simulated: runs in one child process with the simulated accelerator registered"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _in_simulated_child():
        return
    for item in items:
        if item.get_closest_marker("simulated") is not None:
            # the parent only reports the child's outcome: no fixtures, no timeout of its own
            item.fixturenames[:] = [n for n in item.fixturenames if n == "request"]


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session):
    if not _in_simulated_child() and not session.config.option.collectonly:
        simulated = [i for i in session.items if i.get_closest_marker("simulated") is not None]
        if simulated:
            _run_simulated_child(session.config, simulated)
    return (yield)


def _run_simulated_child(config: pytest.Config, items: list[pytest.Item]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder) / "results.jsonl"
        env = {**os.environ, _CHILD_ENV: str(results)}
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
            f"--rootdir={config.rootpath}", *[item.nodeid for item in items],
        ]  # fmt: skip
        child = subprocess.run(
            command, cwd=config.rootpath, env=env, capture_output=True, text=True, check=False
        )
        if results.exists():
            for line in results.read_text().splitlines():
                report = json.loads(line)
                outcome = _simulated_outcomes.setdefault(report["nodeid"], report)
                if report["outcome"] != "passed" and outcome["outcome"] == "passed":
                    _simulated_outcomes[report["nodeid"]] = report
        tail = (child.stdout + child.stderr)[-4000:]
        for item in items:
            _simulated_outcomes.setdefault(
                item.nodeid,
                {
                    "outcome": "failed",
                    "text": f"the simulated child run did not report it:\n{tail}",
                },
            )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get(_CHILD_ENV)
    if path is None or (report.when != "call" and report.outcome == "passed"):
        return
    text = report.longreprtext
    if report.skipped and isinstance(report.longrepr, tuple):
        text = report.longrepr[2]
    with open(path, "a") as out:
        out.write(json.dumps({"nodeid": report.nodeid, "outcome": report.outcome, "text": text}))
        out.write("\n")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if _in_simulated_child() or pyfuncitem.get_closest_marker("simulated") is None:
        return None
    report = _simulated_outcomes.get(pyfuncitem.nodeid)
    if report is None:
        pytest.fail("the simulated child run did not run this test", pytrace=False)
    if report["outcome"] == "skipped":
        pytest.skip(report["text"])
    if report["outcome"] == "failed":
        pytest.fail(f"in the simulated-accelerator process:\n{report['text']}", pytrace=False)
    return True


@pytest.fixture
def ip():
    """IPython's one global test shell with the extension freshly loaded: the user's names and
    the output history of earlier tests cleared (the in-process tests of every file share it)."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("unload_ext", "torchdevice_magic")
    for name in list(shell.user_ns):
        if not name.startswith("_") and name not in {"In", "Out", "exit", "quit", "get_ipython"}:
            del shell.user_ns[name]
    shell.user_ns["Out"].clear()
    shell.run_line_magic("load_ext", "torchdevice_magic")
    yield shell
    shell.run_line_magic("unload_ext", "torchdevice_magic")


@pytest.fixture(autouse=True)
def _extension_config_back_to_defaults():
    """Every test starts with the extension's default configuration. The in-process tests share
    IPython's one global shell, and ``%config TorchDeviceMagic.x = ...`` lives in that shell's
    config, which a reloaded extension reads again: one test's setting leaked into later files'
    tests (their results then depended on the order the files ran in)."""
    yield
    if "IPython" not in sys.modules:
        return
    from IPython.core.interactiveshell import InteractiveShell

    if not InteractiveShell.initialized():
        return
    shell = InteractiveShell.instance()
    shell.config.pop("TorchDeviceMagic", None)
    from torchdevice_magic.shell import get_session

    session = get_session(shell)
    if session is not None:
        for name, trait in session.config.traits(config=True).items():
            setattr(session.config, name, trait.default())
