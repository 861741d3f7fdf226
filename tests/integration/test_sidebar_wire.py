"""The sidebar's comm through a real kernel (jupyter_client, over the wire): opening it gets
the first window; each cell that changes a tensor then sends it one comm message, the
window's delta, with the memory chart's row for that cell inside."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager

from torchdevice_magic import protocol

pytestmark = pytest.mark.kernel

ROOT = Path(__file__).resolve().parents[2]


def _comm_data_until_idle(client: Any, parent: str, comm_id: str) -> list[dict[str, Any]]:
    """The data of every comm message on ``comm_id`` that request ``parent`` caused."""
    found = []
    while True:
        message = client.get_iopub_msg(timeout=120)
        if message["parent_header"].get("msg_id") != parent:
            continue
        kind, content = message["msg_type"], message["content"]
        if kind == "comm_msg" and content.get("comm_id") == comm_id:
            found.append(content["data"])
        elif kind == "error":
            raise AssertionError("\n".join(content.get("traceback", [])))
        elif kind == "status" and content["execution_state"] == "idle":
            return found


def _run(client: Any, code: str, comm_id: str) -> tuple[int, list[dict[str, Any]]]:
    parent = client.execute(code, store_history=True)
    sent = _comm_data_until_idle(client, parent, comm_id)
    reply = client.get_shell_msg(timeout=120)
    while reply["parent_header"].get("msg_id") != parent:  # e.g. a comm request's reply
        reply = client.get_shell_msg(timeout=120)
    assert reply["content"]["status"] == "ok", reply["content"]
    return reply["content"]["execution_count"], sent


@pytest.fixture
def client():
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env={**os.environ, "PYTHONPATH": str(ROOT)})
    kernel_client = manager.client()
    kernel_client.start_channels()
    kernel_client.wait_for_ready(timeout=120)
    yield kernel_client
    kernel_client.stop_channels()
    manager.shutdown_kernel(now=True)


def test_each_cell_sends_the_sidebar_one_message_with_its_chart_row(client):
    comm_id = uuid.uuid4().hex
    first, _ = _run(
        client, "%load_ext torchdevice_magic\nimport torch\nx = torch.zeros(4)", comm_id
    )
    opening = client.session.msg(
        "comm_open", {"comm_id": comm_id, "target_name": protocol.COMM_TARGET, "data": {}}
    )
    client.shell_channel.send(opening)
    [view] = _comm_data_until_idle(client, opening["header"]["msg_id"], comm_id)
    assert view["type"] == "view"
    # the opening view carries the chart recorded before the sidebar opened
    protocol.check_timeline_update(view["timeline"])
    assert view["timeline"]["follows"] is None
    chart: list[dict[str, Any]] = view["timeline"]["rows"]
    assert chart[-1]["cell"] == first
    carried_by = view["seq"]
    for index in range(3):
        cell, sent = _run(client, f"y = torch.zeros({8 * (index + 1)})", comm_id)
        [message] = sent  # one message per cell: the delta carries the chart's row
        protocol.check_message(message)
        assert message["type"] == "delta"
        update = message["timeline"]
        protocol.check_timeline_update(update)
        assert update["follows"] == carried_by
        chart = chart + update["rows"]
        carried_by = message["seq"]
        assert chart[-1]["cell"] == cell and chart[-1]["delta"] == 8 * 4
    _, sent = _run(client, "n = 1", comm_id)
    assert sent == []  # nothing tensor-related: nothing sent
