"""Fixtures of the diagnose tests that run in the in-process IPython shell."""

from __future__ import annotations

from typing import Any

import pytest

from torchdevice_magic.shell import get_session


@pytest.fixture
def shown(ip, monkeypatch) -> list[str]:
    """The diagnoses the user sees (text/plain of what the session publishes)."""
    seen: list[str] = []
    session = get_session(ip)
    original = session.publish

    def publish(data: dict[str, Any], metadata: Any = None) -> None:
        seen.append(data.get("text/plain", ""))
        original(data, metadata)

    monkeypatch.setattr(session, "publish", publish)
    return seen


@pytest.fixture
def diagnoses(ip, monkeypatch) -> list[Any]:
    """The diagnoses the session shows after cells (the objects, in order)."""
    seen: list[Any] = []
    session = get_session(ip)
    original = session.show_diagnosis_result

    def show(diagnosis: Any, cell_id: str | None = None) -> None:
        seen.append(diagnosis)
        original(diagnosis, cell_id)

    monkeypatch.setattr(session, "show_diagnosis_result", show)
    return seen
