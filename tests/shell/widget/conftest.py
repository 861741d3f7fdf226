"""Fixtures of the widget table's tests: IPython's one in-process shell (``globalipapp``) with
the user's names of earlier tests put aside, the extension's session, tables that are closed
after the test, and a small namespace with meta enabled."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from IPython.testing import globalipapp
from torch import nn

from torchdevice_magic.names import is_ipython_bookkeeping
from torchdevice_magic.shell import load
from torchdevice_magic.shell.widget import DeviceTable


@pytest.fixture
def ip() -> Iterator[Any]:
    """The shared in-process shell, with the user's names of earlier tests put aside (and put
    back afterwards): each test sees only what it creates."""
    shell = globalipapp.get_ipython()  # started once, shared by the test session
    shell.run_cell("import torch", store_history=False)
    shell.displayhook.flush()  # Out and _ of earlier tests
    ns = shell.user_ns
    aside = {
        name: ns.pop(name)
        for name in list(ns)
        if not is_ipython_bookkeeping(name) and name not in ("torch", "__builtins__")
    }
    yield shell
    shell.displayhook.flush()
    for name in list(ns):
        if not is_ipython_bookkeeping(name) and name != "torch":
            del ns[name]
    ns.update(aside)


@pytest.fixture
def session(ip: Any) -> Iterator[Any]:
    session = load(ip)
    session.config.allow_meta_target = False
    session.config.include_hidden = False
    session.config.default_device = ""
    session.app.undo_stack.clear()
    session.app.last_undoable = True
    session.app.full_scan()
    yield session
    session.config.allow_meta_target = False
    session.app.undo_stack.clear()
    session.app.last_action = None


@pytest.fixture
def make_table(session: Any) -> Iterator[Callable[..., DeviceTable]]:
    """Build tables; close them afterwards (ipywidgets keeps open widgets alive, and the
    session would go on refreshing them in later tests)."""
    made: list[DeviceTable] = []

    def make(**kwargs: Any) -> DeviceTable:
        table = DeviceTable(session.app, **kwargs)
        made.append(table)
        return table

    yield make
    for table in made:
        table.close()


@pytest.fixture
def small(ip: Any, session: Any) -> dict[str, Any]:
    """A tensor, a module with an optimizer, a dict batch, on the cpu; meta enabled."""
    session.config.allow_meta_target = True
    model = nn.Linear(4, 3)
    objects = {
        "x": torch.ones(100),
        "model": model,
        "opt": torch.optim.SGD(model.parameters(), lr=0.1),
        "batch": {"a": torch.ones(2), "b": torch.zeros(3)},
        "n": 5,
    }
    ip.user_ns.update(objects)
    return objects
