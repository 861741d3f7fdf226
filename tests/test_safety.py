"""The core's safety rules, across packages: inspecting never prints a tensor, and nothing the
extension does on its own (discovery, a scan, a hook, a diagnosis, the holders) initialises CUDA.

Each check records calls instead of raising, so a ``try/except Exception`` in the code under test
cannot swallow the evidence. The CUDA checks run in a fresh process (nothing earlier in the run
can have initialised CUDA or imported something that hides a call), record every call of CUDA's
lazy-initialisation entry points (``torch.cuda._lazy_init``, which ``torch.cuda.init()``, every
allocator figure and ``current_device()`` go through, and ``torch._C._cuda_init`` under it), and on
a CPU machine pretend one CUDA device is present, so the code takes the path a GPU machine takes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import torchdevice_magic as tdm

# ------------------------------------------------------------------------------------------
# Never print a tensor while inspecting

_PRINTING = ("__repr__", "__str__", "__format__")


def _tensor_classes() -> list[type]:
    found, pending = [], [torch.Tensor]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


@pytest.fixture
def printed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call that turns a tensor into text, recorded (the original still runs, so code
    under test behaves as it would without the recording)."""
    calls: list[str] = []

    def recording(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def record(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return original(*args, **kwargs)

        return record

    for cls in _tensor_classes():
        for method in _PRINTING:
            if method in vars(cls):
                original = vars(cls)[method]
                monkeypatch.setattr(cls, method, recording(f"{cls.__name__}.{method}", original))
    import torch._tensor_str as tensor_str

    monkeypatch.setattr(tensor_str, "_str", recording("torch._tensor_str._str", tensor_str._str))
    return calls


class _OwnReprTensor(torch.Tensor):
    """A tensor subclass with its own printing (as many libraries' subclasses have)."""

    def __repr__(self, *args: Any, **kwargs: Any) -> str:
        return "own " + super().__repr__(*args, **kwargs)


def test_the_recorder_sees_every_way_a_tensor_becomes_text(printed: list[str]) -> None:
    x, p = torch.ones(2), nn.Parameter(torch.ones(1))
    sub = torch.ones(1).as_subclass(_OwnReprTensor)
    str(x), repr(p), f"{x}", repr(sub)
    assert printed.count("torch._tensor_str._str") == 4


def test_scanning_never_prints_a_tensor(printed: list[str]) -> None:
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    namespace = {
        "x": torch.ones(2),
        "batch": {"y": torch.ones(1), "list": [torch.zeros(3), (torch.zeros(1),)]},
        "model": model,
        "optimizer": optimizer,
        "sub": torch.ones(3).as_subclass(_OwnReprTensor),
        "Out": {1: torch.ones(4)},
    }
    inventory = tdm.scan(namespace, include_hidden=True)
    repr(inventory)
    inventory._repr_html_()
    inventory.to_json()
    inventory.device_totals()
    tdm.holders(namespace)
    assert printed == []


def test_diagnosing_never_prints_a_tensor_or_consumes_a_generator(printed: list[str]) -> None:
    consumed: list[int] = []

    def batches() -> Iterator[torch.Tensor]:
        for i in range(3):
            consumed.append(i)
            yield torch.randn(2)

    namespace: dict[str, Any] = {"torch": torch, "nn": nn}
    namespace["x"] = torch.randn(2, 3).as_subclass(_OwnReprTensor)
    namespace["batches"] = batches()
    namespace["model"] = nn.Linear(3, 2).to("meta")
    cell = "for b in batches:\n    model(x)"
    error = RuntimeError("Tensor on device cpu is not on the expected device meta!")
    diagnosis = tdm.diagnose(error, namespace, cell)
    assert diagnosis is not None
    assert {c.name: c.devices for c in diagnosis.culprits} == {"model": ("meta",), "x": ("cpu",)}
    diagnosis.text()
    diagnosis._repr_html_()
    json.dumps(diagnosis.to_dict())
    assert printed == []
    assert consumed == []


# ------------------------------------------------------------------------------------------
# Never initialise CUDA (each area in a fresh process)


def _record_cuda_initialisation() -> list[str]:
    """In this (fresh) process: record every call of CUDA's lazy-init entry points, and on a
    build without CUDA pretend one device is present so the GPU code paths run."""
    import torch.cuda

    calls: list[str] = []
    original_lazy_init = torch.cuda._lazy_init

    def lazy_init(*args: Any, **kwargs: Any) -> Any:
        calls.append("torch.cuda._lazy_init")
        return original_lazy_init(*args, **kwargs)

    # modules that imported the function by name (torch.cuda.memory, .random, ...) hold it too
    for module in list(sys.modules.values()):
        if getattr(module, "_lazy_init", None) is original_lazy_init:
            module._lazy_init = lazy_init  # type: ignore[union-attr]
    original_c_init = getattr(torch._C, "_cuda_init", None)
    if original_c_init is not None:

        def c_init(*args: Any, **kwargs: Any) -> Any:
            calls.append("torch._C._cuda_init")
            return original_c_init(*args, **kwargs)

        torch._C._cuda_init = c_init
    if not torch.cuda.is_available():
        # what a machine with one CUDA device answers without initialising it
        torch.cuda.is_available = lambda: True
        torch.cuda.device_count = lambda: 1
        torch.accelerator.current_accelerator = lambda *a, **k: torch.device("cuda")
        torch.accelerator.device_count = lambda: 1
        torch.accelerator.is_available = lambda: True
    return calls


def _discovery(start_recording: Callable[[], list[str]]) -> list[str]:
    from torchdevice_magic import devices, moves

    recorded = start_recording()
    devices.available_targets(True)
    devices.best_device()
    devices.memory_figures("cuda:0")
    devices.resolve_device("cuda", False)
    devices.reset_peak("cuda:0")
    moves.available_devices(allow_meta=True)
    moves.best_device()
    return recorded


def _scan(start_recording: Callable[[], list[str]]) -> list[str]:
    model = nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    namespace = {
        "x": torch.ones(3),
        "model": model,
        "optimizer": optimizer,
        "batch": {"y": torch.ones(2), "pair": [torch.zeros(1), (torch.zeros(2),)]},
    }
    recorded = start_recording()  # the user's training above is not the extension's doing
    inventory = tdm.scan(namespace, include_hidden=True)
    inventory.device_totals()
    repr(inventory)
    inventory._repr_html_()
    inventory.to_json()
    tdm.holders({"Out": {1: torch.zeros(10)}}, "cuda")
    tdm.holders({"Out": {1: torch.zeros(10)}}, "cuda:0")
    return recorded


def _diagnosis(start_recording: Callable[[], list[str]]) -> list[str]:
    recorded = start_recording()
    namespace: dict[str, Any] = {"torch": torch, "nn": nn}
    cell = "model = nn.Linear(3, 2).to('meta')\nx = torch.randn(1, 3)\nmodel(x)"
    try:
        exec(compile(cell, "<ipython-input-1-0123456789ab>", "exec"), namespace)
    except RuntimeError as error:
        for target in (None, "cuda"):
            diagnosis = tdm.diagnose(error, namespace, cell, target=target)
            assert diagnosis is not None
            diagnosis.text()
            diagnosis._repr_html_()
        return recorded
    raise AssertionError("the cell was expected to fail")


def _shell_hooks(start_recording: Callable[[], list[str]]) -> list[str]:
    from IPython.core.interactiveshell import InteractiveShell

    recorded = start_recording()
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "torchdevice_magic")
    shell.run_cell("import torch\nx = torch.ones(3)\nm = torch.nn.Linear(3, 1)")
    shell.run_cell("m.to('meta')(x)")  # fails: the diagnosis hook runs
    shell.run_line_magic("devices", "")
    shell.run_line_magic("devices", "--holders")
    return recorded


_AREAS: dict[str, Callable[[Callable[[], list[str]]], list[str]]] = {
    "discovery": _discovery,
    "scan": _scan,
    "diagnosis": _diagnosis,
    "shell_hooks": _shell_hooks,
}


@pytest.mark.parametrize("area", sorted(_AREAS))
def test_cuda_is_never_initialised(area: str) -> None:
    root = Path(__file__).resolve().parents[1]  # this checkout's package, not an installed one
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    probe = subprocess.run(
        [sys.executable, __file__, area],
        capture_output=True, text=True, check=False, timeout=300, cwd=root, env=env,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stdout + probe.stderr
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    assert report == {"calls": [], "initialized": False}


if __name__ == "__main__":  # the fresh process of test_cuda_is_never_initialised
    recorded = _AREAS[sys.argv[1]](_record_cuda_initialisation)
    print(json.dumps({"calls": recorded, "initialized": torch.cuda.is_initialized()}))
