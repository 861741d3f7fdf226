"""The widget table's header carries the controller's device notes (where CUDA was first
initialised, what its used memory is made of) under the totals, escaped like every text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from torchdevice_magic.firstinit import InitSite
from torchdevice_magic.shell.widget import DeviceTable


def test_the_table_says_where_cuda_was_first_initialised(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable], monkeypatch: pytest.MonkeyPatch
) -> None:
    site = InitSite("cuda", 3, "<ipython-input-3>", 2, "model = model.to('cuda') <fast>")
    monkeypatch.setattr(session.app.first_init, "sites", {"cuda": site})
    ip.user_ns["x"] = __import__("torch").ones(4)
    table = make_table()
    assert (
        "CUDA was first initialised by cell [3], line 2: model = model.to(&#x27;cuda&#x27;) "
        "&lt;fast&gt;" in table.totals_note.value
    )
    assert "Totals count each storage once" in table.totals_note.value  # the note stays first
