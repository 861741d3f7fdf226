"""Helpers the diagnose tests share: run a "cell" the way IPython does (from a library frame,
under an ``<ipython-input-...>`` filename) and inspect what the diagnosis says; and, for the
in-process IPython shell, run cells, apply fixes and press the one-click button.

Not a test module: the test files of this folder import it.
"""

from __future__ import annotations

import textwrap
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from IPython.utils.capture import capture_output
from torch.utils.data import DataLoader, TensorDataset

from torchdevice_magic.diagnose import Diagnosis
from torchdevice_magic.diagnose import diagnose as _diagnose
from torchdevice_magic.shell import get_session


def diagnose(*args: Any, **kwargs: Any) -> Diagnosis | None:
    """This file's tests use meta as the stand-in accelerator (like the notebooks, which set
    ``allow_meta_target``): meta is an allowed target. The default -- nothing real is moved to
    meta -- is tested in test_fix_statements.py."""
    kwargs.setdefault("allow_meta", True)
    return _diagnose(*args, **kwargs)


# --------------------------------------------------------------------------------------------
# Helpers: run "cells" the way IPython does
# --------------------------------------------------------------------------------------------

# IPython executes a cell from inside its own (site-packages) frame; mimic that so the
# traceback starts in a library frame, then the cell's ``<module>`` frame, as in a notebook.
_FAKE_SHELL = compile(
    textwrap.dedent(
        """
        def run_cell(code, ns):
            try:
                exec(code, ns)
            except Exception as e:
                return e
            return None
        """
    ),
    "/fake/lib/python3.11/site-packages/IPython/core/interactiveshell.py",
    "exec",
)
_shell_ns: dict[str, Any] = {}
exec(_FAKE_SHELL, _shell_ns)
_run_cell = _shell_ns["run_cell"]

_cell_counter = 0


def run_cell(cell: str, ns: dict[str, Any]) -> BaseException:
    """Execute ``cell`` in ``ns`` with an IPython-like filename; return the exception."""
    global _cell_counter
    _cell_counter += 1
    code = compile(cell, f"<ipython-input-{_cell_counter}-0123456789ab>", "exec")
    exc = _run_cell(code, ns)
    assert exc is not None, "the cell was expected to fail"
    return exc


def define(source: str, ns: dict[str, Any], filename: str = "/tmp/ipykernel_4242/987.py") -> None:
    """Define functions/classes as a notebook cell would (ipykernel-style filename)."""
    exec(compile(textwrap.dedent(source), filename, "exec"), ns)


def fresh_ns() -> dict[str, Any]:
    return {
        "torch": torch,
        "nn": nn,
        "F": F,
        "DataLoader": DataLoader,
        "TensorDataset": TensorDataset,
    }


def names(d: Diagnosis) -> dict[str, tuple[str, ...]]:
    return {c.name: c.devices for c in d.culprits}


TRAIN_SOURCE = """
def train(model, loader):
    for batch_X, batch_y in loader:
        output = model(batch_X)
        loss = torch.nn.functional.cross_entropy(output, batch_y)
    return loss
"""


# -- the in-process IPython shell ------------------------------------------------------------


def run(shell: Any, cell: str) -> Any:
    with capture_output():
        return shell.run_cell(cell)


def setup(shell: Any, source: str, dev: str) -> None:
    result = run(shell, f"DEV = {dev!r}\n" + textwrap.dedent(source))
    assert result.success, result.error_in_exec or result.error_before_exec


def failing(shell: Any, cell: str) -> Any:
    """Run ``cell``; it must fail with a device error. Returns the session's diagnosis."""
    result = run(shell, cell)
    assert isinstance(result.error_in_exec, RuntimeError), result.error_in_exec
    diagnosis = get_session(shell).app.diagnose(result.error_in_exec, cell)
    assert diagnosis is not None
    for line in diagnosis.fix_lines:
        # every fix line is Python a user can run (in the function, for a function's line)
        body = (
            line.source
            if line.where in ("cell", "loop") or line.where.startswith("line ")
            else ("def f(self):\n    " + line.source)
        )
        compile(body, "<fix>", "exec")
    return diagnosis


def apply_cell_fixes(shell: Any, diagnosis: Any) -> None:
    fixes = [f.source for f in diagnosis.fix_lines if f.where == "cell"]
    assert fixes, diagnosis.text()
    result = run(shell, "\n".join(fixes))
    assert result.success, result.error_in_exec or result.error_before_exec


def culprit(diagnosis: Any, name: str) -> Any:
    return next(c for c in diagnosis.culprits if (c.alias or c.name) == name)


def assert_succeeds(shell: Any, cell: str) -> None:
    result = run(shell, cell)
    assert result.success, result.error_in_exec


def press_the_button(shell: Any, diagnosis: Any) -> None:
    """What the one-click button does: the planner accepts, the engine moves."""
    session = get_session(shell)
    action = diagnosis.action
    assert action is not None, diagnosis.text()
    assert session.app.can_move(action.device, action.names) is None
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        assert session.app.move(action.device, list(action.names)).ok
        return
    from torchdevice_magic.shell.fixbutton import fix_button

    box = fix_button(session.app, action, "cell-1", session.request_rerun)
    assert box is not None
    button, status = box.children
    assert button.description == action.label
    button.click()
    assert status.value.startswith("moved: re-run the cell"), status.value


# -- 1. a plain tensor attribute of a submodule --------------------------------------------------


#: a head keeping a plain tensor attribute (not a buffer): model.to() leaves it behind
HEAD = """
import torch, torch.nn as nn
class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.temperature = torch.ones(4)
    def forward(self, h):
        return self.fc(h) / self.temperature
"""

#: a trainer holding its model and optimizer in attributes
TRAINER = """
import torch, torch.nn as nn
class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
    def step(self, batch):
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss
"""
