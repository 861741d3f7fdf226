"""The sidebar channel's fixtures: a shell with a tensor, a model and an optimizer, and a
sidebar's comm opened on it (tests/shell/commkit.py has the stand-in comm and the mirror)."""

from __future__ import annotations

import pytest
from commkit import FakeComm

from torchdevice_magic.shell import get_session


@pytest.fixture
def shell(ip):
    ip.run_cell(
        "import torch\nx = torch.ones(3)\nmodel = torch.nn.Linear(2, 2)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)"
    )
    return ip


@pytest.fixture
def channel(shell):
    session = get_session(shell)
    fake = FakeComm()
    session.channel._on_open(fake, {"content": {"data": {}}})
    return session, fake
