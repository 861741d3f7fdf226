"""The JSON schema shared by the ipywidgets table and the JupyterLab sidebar.

One schema, versioned, so both views render the same facts and the sidebar's TypeScript
types (``labextension/src/protocol.ts``) can mirror it field by field.

Kernel -> frontend messages
---------------------------
``snapshot``::

    {
      "protocol": "torchdevice_magic", "version": 1, "type": "snapshot",
      "seq": 7,                       # increases with every snapshot this kernel sends
      "torch_imported": true,         # false: nothing to show yet (we never import torch)
      "devices": [DeviceTotal, ...],  # per-device totals, sorted cpu first then by name
      "targets": [Target, ...],       # devices a move may go to, with why some are disabled
      "default_target": "cuda:0",
      "warnings": ["model spans cpu and meta", ...],
      "rows": [Row, ...],             # at most ``row_limit`` rows, biggest first
      "total_rows": 1234,             # how many records the inventory has
      "can_undo": false,
      "last_action": ActionOutcome | null,
    }

``timeline`` (memory per cell and device, after each cell; the sidebar's small chart)::

    {"protocol": ..., "version": 1, "type": "timeline", "seq": 7,
     "rows": [{"cell": 12, "device": "cuda:0", "bytes": 123, "delta": -4,
               "peak": 456 | null, "changes": [["losses: 8 autograd graphs", 1024], ...],
               "note": "del x freed nothing of ..."}, ...]}   # oldest first, at most 200

``reply`` (answer to one request)::

    {"protocol": ..., "version": 1, "type": "reply", "request_id": "...", "ok": bool,
     "message": "one line", "outcome": ActionOutcome | null}

``rerun`` (after a one-click fix under a diagnosis: run that notebook cell again)::

    {"protocol": ..., "version": 1, "type": "rerun", "cell_id": "..."}

Frontend -> kernel requests
---------------------------
``{"type": "refresh", "request_id": str}``
``{"type": "move", "request_id": str, "device": str, "names": [str, ...] | null}``
``{"type": "undo", "request_id": str}``

Every request is checked by :func:`parse_request` before anything runs; a request that does
not match raises :class:`ProtocolError` and the kernel answers with an error reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .records import Record

PROTOCOL_NAME = "torchdevice_magic"
PROTOCOL_VERSION = 1
COMM_TARGET = "torchdevice_magic"

#: Snapshot rows are capped so a namespace with 100,000 names still sends a small message;
#: the sidebar says how many were left out (``total_rows``).
DEFAULT_ROW_LIMIT = 5000

REQUEST_TYPES = ("refresh", "move", "undo")
_MAX_NAMES_PER_REQUEST = 100_000
_MAX_STRING = 1000


class ProtocolError(ValueError):
    """A message from a frontend that does not match the schema."""


@dataclass(frozen=True)
class Request:
    type: str
    request_id: str
    device: str | None = None
    names: tuple[str, ...] | None = None


def _check_string(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ProtocolError(f"'{field}' must be a string, got {type(value).__name__}")
    if len(value) > _MAX_STRING:
        raise ProtocolError(f"'{field}' is longer than {_MAX_STRING} characters")
    return value


def parse_request(message: Any) -> Request:
    """Validate a frontend request; raise :class:`ProtocolError` with a one-line reason."""
    if not isinstance(message, dict):
        raise ProtocolError(f"a request must be a JSON object, got {type(message).__name__}")
    kind = message.get("type")
    if kind not in REQUEST_TYPES:
        raise ProtocolError(
            f"unknown request type {kind!r}; expected one of {', '.join(REQUEST_TYPES)}"
        )
    version = message.get("version", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version {version!r} is not supported (kernel speaks {PROTOCOL_VERSION})"
        )
    request_id = _check_string(message.get("request_id", ""), "request_id")
    allowed = {"type", "request_id", "version", "protocol"}
    if kind == "move":
        allowed |= {"device", "names"}
    extra = set(message) - allowed
    if extra:
        raise ProtocolError(
            f"unexpected field(s) for '{kind}': {', '.join(sorted(map(str, extra)))}"
        )
    if kind != "move":
        return Request(type=kind, request_id=request_id)

    device = _check_string(message.get("device"), "device")
    if not device.strip():
        raise ProtocolError("'device' must not be empty")
    names = message.get("names")
    if names is not None:
        if not isinstance(names, list):
            raise ProtocolError("'names' must be a list of strings or null")
        if len(names) > _MAX_NAMES_PER_REQUEST:
            raise ProtocolError(f"'names' has more than {_MAX_NAMES_PER_REQUEST} entries")
        names = tuple(_check_string(n, "names[]") for n in names)
    return Request(type="move", request_id=request_id, device=device, names=names)


def envelope(kind: str, **fields: Any) -> dict[str, Any]:
    return {"protocol": PROTOCOL_NAME, "version": PROTOCOL_VERSION, "type": kind, **fields}


def reply(
    request_id: str, ok: bool, message: str, outcome: dict[str, Any] | None = None
) -> dict[str, Any]:
    return envelope("reply", request_id=request_id, ok=ok, message=message, outcome=outcome)


def rerun(cell_id: str) -> dict[str, Any]:
    """Ask the frontend to run the notebook cell ``cell_id`` (IPython's ExecutionInfo.cell_id)."""
    return envelope("rerun", cell_id=_check_string(cell_id, "cell_id"))


def target(device: str, enabled: bool, reason: str = "") -> dict[str, Any]:
    """One entry of the target-device selector; ``reason`` says why it is disabled."""
    return {"device": device, "enabled": enabled, "reason": reason}


#: Most timeline rows sent at once (the chart shows the recent cells).
TIMELINE_ROWS = 200
_TIMELINE_ROW_FIELDS: dict[str, type | tuple[type, ...]] = {
    "cell": int,
    "device": str,
    "bytes": int,
    "delta": int,
    "peak": (int, type(None)),
    "changes": list,
    "note": str,
}


def timeline(rows: list[dict[str, Any]], *, seq: int = 0) -> dict[str, Any]:
    """The ``timeline`` message from :meth:`memory.Timeline.to_json` rows (the last
    ``TIMELINE_ROWS``), checked against the schema before it is sent."""
    message = envelope(
        "timeline",
        seq=seq,
        rows=[{key: row[key] for key in _TIMELINE_ROW_FIELDS} for row in rows[-TIMELINE_ROWS:]],
    )
    check_timeline(message)
    return message


def check_timeline(message: Any) -> None:
    """Assert the shape of a ``timeline`` message."""
    if not isinstance(message, dict) or message.get("type") != "timeline":
        raise ProtocolError("not a timeline message")
    if message.get("version") != PROTOCOL_VERSION or not isinstance(message.get("seq"), int):
        raise ProtocolError("timeline: wrong version or seq")
    rows = message.get("rows")
    if not isinstance(rows, list) or len(rows) > TIMELINE_ROWS:
        raise ProtocolError(f"timeline: 'rows' must be a list of at most {TIMELINE_ROWS}")
    for row in rows:
        if not isinstance(row, dict) or set(row) != set(_TIMELINE_ROW_FIELDS):
            raise ProtocolError("timeline rows have exactly " + ", ".join(_TIMELINE_ROW_FIELDS))
        for key, kind in _TIMELINE_ROW_FIELDS.items():
            value = row[key]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ProtocolError(f"timeline row: field '{key}' mistyped")
        for change in row["changes"]:
            if (
                not isinstance(change, list)
                or len(change) != 2
                or not isinstance(change[0], str)
                or not isinstance(change[1], int)
            ):
                raise ProtocolError("timeline row: 'changes' are [name, bytes] pairs")


def check_snapshot(snapshot: Any) -> None:
    """Assert the shape of a snapshot (used by the tests and the fixture generator)."""
    if not isinstance(snapshot, dict):
        raise ProtocolError("snapshot must be an object")
    required = {
        "protocol": str,
        "version": int,
        "type": str,
        "seq": int,
        "torch_imported": bool,
        "devices": list,
        "targets": list,
        "default_target": (str, type(None)),
        "warnings": list,
        "rows": list,
        "total_rows": int,
        "can_undo": bool,
    }
    for key, kind in required.items():
        if key not in snapshot:
            raise ProtocolError(f"snapshot lacks '{key}'")
        if not isinstance(snapshot[key], kind):
            raise ProtocolError(f"snapshot '{key}' has the wrong type")
    if snapshot["type"] != "snapshot" or snapshot["version"] != PROTOCOL_VERSION:
        raise ProtocolError("not a snapshot of this protocol version")
    row_fields = {
        "name": str,
        "root": str,
        "kind": str,
        "type": str,
        "device": str,
        "devices": list,
        "dtype": (str, type(None)),
        "shape": (list, type(None)),
        "numel": int,
        "bytes": int,
        "would_need_bytes": int,
        "grad_bytes": int,
        "requires_grad": bool,
        "shares_with": list,
        "hidden": bool,
        "mixed": bool,
        "note": str,
        "movable": bool,
    }
    for row in snapshot["rows"]:
        for key, kind in row_fields.items():
            if key not in row or not isinstance(row[key], kind):
                raise ProtocolError(f"row {row.get('name')!r}: field '{key}' missing or mistyped")
    device_fields = {
        "device": str,
        "bytes": int,
        "would_need_bytes": int,
        "allocated": (int, type(None)),
        "reserved": (int, type(None)),
        "capacity": (int, type(None)),
    }
    for total in snapshot["devices"]:
        for key, kind in device_fields.items():
            if key not in total or not isinstance(total[key], kind):
                raise ProtocolError(f"device total: field '{key}' missing or mistyped")
    for entry in snapshot["targets"]:
        if set(entry) != {"device", "enabled", "reason"}:
            raise ProtocolError("target entries have exactly device, enabled, reason")


def snapshot(
    inventory: Any,
    *,
    seq: int = 0,
    targets: list[dict[str, Any]] | None = None,
    default_target: str | None = None,
    can_undo: bool = False,
    last_action: dict[str, Any] | None = None,
    row_limit: int = DEFAULT_ROW_LIMIT,
) -> dict[str, Any]:
    """The snapshot message for an Inventory (rows biggest first, capped at ``row_limit``)."""
    records = inventory.records
    ordered = sorted(records, key=Record.size_order)
    return envelope(
        "snapshot",
        seq=seq,
        torch_imported=bool(inventory.torch_imported),
        devices=[total.to_dict() for total in inventory.device_totals()]
        if inventory.torch_imported
        else [],
        targets=targets or [],
        default_target=default_target,
        warnings=inventory.mixed_warnings() if inventory.torch_imported else [],
        rows=[record.to_dict() for record in ordered[:row_limit]],
        total_rows=len(records),
        can_undo=can_undo,
        last_action=last_action,
    )
