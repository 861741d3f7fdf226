"""The wire schema is one definition: labextension/src/protocol.ts is generated from it, and
every message the kernel builds passes the schema's own check."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from torchdevice_magic import protocol, scan
from torchdevice_magic.viewmodel import Target

ROOT = Path(__file__).resolve().parent.parent


def test_typescript_types_are_generated_from_the_python_schema() -> None:
    generated = protocol.typescript()
    on_disk = (ROOT / "labextension" / "src" / "protocol.ts").read_text()
    assert on_disk == generated, (
        "labextension/src/protocol.ts drifted from protocol.py: run "
        "`python -m torchdevice_magic.protocol > labextension/src/protocol.ts`"
    )


def test_every_struct_and_message_type_is_in_the_typescript() -> None:
    generated = protocol.typescript()
    for name in protocol.STRUCTS:
        assert f"export interface I{name} {{" in generated
    for kind in protocol.MESSAGES:
        assert f"  type: '{kind}';" in generated


def test_a_view_of_a_real_inventory_matches_the_schema() -> None:
    model = torch.nn.Linear(3, 3)
    inv = scan({"x": torch.ones(2), "model": model, "opt": torch.optim.SGD(model.parameters())})
    message = protocol.snapshot(inv, targets=[Target("cpu", True, ""), Target("meta", True, "")])
    protocol.check_message(message)
    assert message["header"]["target"] == "meta"


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"type": "view", "seq": 1}, "lacks"),
        ({"type": "nope"}, "unknown message type"),
        ({"type": "unloaded", "seq": 1, "message": 3}, "must be a string"),
        ({"type": "undo", "request_id": "a", "seq": 1}, "unexpected"),
    ],
)
def test_malformed_messages_are_refused(message, error) -> None:
    with pytest.raises(protocol.ProtocolError, match=error):
        protocol.check_message(message)
