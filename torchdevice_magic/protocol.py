"""The wire schema (version 4) between the kernel and the JupyterLab sidebar.

One definition: :data:`STRUCTS` (the shapes) and :data:`MESSAGES` (every message type, in one
table, with its direction and fields). The sidebar's TypeScript types in
``labextension/src/protocol.ts`` are generated from these tables by
``python -m torchdevice_magic.protocol > labextension/src/protocol.ts`` and a test fails when
the file drifts. Another part of the extension adds a message by adding a row to
:data:`MESSAGES` (and its structs to :data:`STRUCTS`) and regenerating.

The conversation::

    sidebar opens the comm            -> kernel sends ``view`` (the 200 biggest rows) at once
    sidebar sends ``window``           -> ``view`` for that sort / filter / page / target
    after a cell, if its window or totals changed -> ``delta`` (rows upserted / removed, the
                                          splices that turn the old key order into the new
                                          one, the header's fields that changed,
                                          the outcome of a move or undo made since, wherever,
                                          the memory chart's new rows: one message per cell)
    a cell that changed nothing tensor-related    -> nothing
    ``refresh`` / ``move`` / ``undo``  -> ``reply`` (the outcome, skip reasons in words), then
                                          ``delta`` or ``view``
    ``%unload_ext``                    -> ``unloaded``, then the comm closes
    a one-click fix under a diagnosis  -> ``rerun`` (the notebook runs that cell again)
    an ipyparallel client opened or closed -> ``engines_reachable`` (on open and after any
                                          cell, only when it changed; ``gather_engines`` asks
                                          the engines, answered by ``engines``)
    after a cell that changed tensors  -> the memory chart's rows recorded since the last ones
                                          (``Timeline``, which they follow) inside that cell's
                                          ``delta`` or ``view``; a ``timeline`` message of their
                                          own only when the sidebar's window had nothing to send

Every request is checked against the table before anything runs: a message that does not
match raises :class:`ProtocolError` (the kernel answers with an error reply, nothing runs).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from .scan import register_drawing
from .viewmodel import MAX_LIMIT, SORTS, WindowSpec, timeline_texts

PROTOCOL_NAME = "torchdevice_magic"
PROTOCOL_VERSION = 4
COMM_TARGET = "torchdevice_magic"
_MAX_NAMES_PER_REQUEST = 100_000
_MAX_STRING = 1000

# -- the schema ---------------------------------------------------------------------------------
# Field types: "str" "int" "float" "bool" "any", a struct name, "list[T]", "T?" (or null),
# "enum[a|b|c]".

STRUCTS: dict[str, dict[str, str]] = {
    "Action": {"enabled": "bool", "label": "str", "reason": "str"},
    "Row": {
        "key": "str",
        "name": "str",
        "root": "str",
        "kind": "str",
        "type": "str",
        "device": "str",
        "dtype": "str",
        "shape": "str",
        "size": "str",
        "size_bytes": "int",
        "grad": "str",
        "grad_bytes": "int",
        "status": "str",
        "selectable": "bool",
        "action": "Action",
        "mixed": "bool?",  # its data spans several devices (a v3 kernel may leave it out)
        # held only by IPython's output history (Out[2], _): outside the totals, never moved
        # (a kernel before it may leave it out)
        "hidden": "bool?",
    },
    "DeviceBar": {"device": "str", "bytes": "int", "text": "str", "fraction": "float"},
    "Target": {"device": "str", "enabled": "bool", "reason": "str"},
    "Buttons": {
        "move_all": "Action",
        "move_selected": "Action",
        "undo": "Action",
        "refresh": "Action",
    },
    "Header": {
        "torch_imported": "bool",
        "message": "str",
        "bars": "list[DeviceBar]",
        "totals_note": "str",
        "device_notes": "list[str]",
        "warnings": "list[str]",
        "targets": "list[Target]",
        "target": "str?",
        "buttons": "Buttons",
    },
    "WindowSpec": {
        "sort": "enum[" + "|".join(SORTS) + "]",
        "reverse": "bool",
        "filter": "str",
        "offset": "int",
        "limit": "int",
        "target": "str?",
    },
    "Window": {"spec": "WindowSpec", "rows": "list[Row]", "matching": "int", "total": "int"},
    # at ``at`` of the key order, take ``remove`` keys out and put ``insert`` in (in order,
    # each on the result of the one before: Array.prototype.splice)
    "Splice": {"at": "int", "remove": "int", "insert": "list[str]"},
    "WindowDelta": {
        "upsert": "list[Row]",
        "remove": "list[str]",
        "splices": "list[Splice]",
        "matching": "int",
        "total": "int",
    },
    "Skip": {"name": "str", "reason": "str"},
    # memory per cell and device (torchdevice_magic.memory): the sidebar's small chart
    "TimelineRow": {
        "cell": "int",
        "device": "str",
        "bytes": "int",
        "delta": "int",
        "peak": "int?",
        "changes": "list[any]",  # [name, bytes] pairs: check_timeline checks them
        "note": "str",
        "outside": "int",  # of bytes, held outside the named variables (holders)
        # the words the sidebar draws (viewmodel.timeline), every size as units.format_bytes
        "label": "str",  # over the device's chart: held, of it outside, the last change
        "tooltip": "str",  # one point's: the cell, its change, the peak, what grew, the note
    },
    # the memory chart's rows recorded since the ones sent before (protocol.timeline_update):
    # ``follows`` null: they are the whole chart; else the seq of the message that carried the
    # rows they come after
    "Timeline": {"rows": "list[TimelineRow]", "follows": "int?"},
    "Outcome": {
        "action": "str",
        "ok": "bool",
        "message": "str",
        "skipped": "list[Skip]",
        "time": "float",
    },
    # every ipyparallel engine of the kernel's client (viewmodel.engines, shell/gather.py)
    "EngineDevice": {
        "device": "str",
        "objects": "int",
        "bytes": "int",
        "size": "str",
        "memory": "str",  # the accelerator's "used / total", "" where it has no figures
    },
    "EngineObject": {
        "name": "str",
        "kind": "str",
        "type": "str",
        "device": "str",
        "bytes": "int",
        "size": "str",
    },
    "Engine": {
        "engine": "int",
        "rank": "int?",
        "host": "str",
        "status": "str",
        "devices": "list[EngineDevice]",
        "objects": "list[EngineObject]?",  # only the engine the sidebar expanded
    },
    "MissingEngine": {"engine": "int", "reason": "str"},
}
#: a delta's header: only the fields that changed since the message before (each optional)
STRUCTS["HeaderChanges"] = {
    name: spec if spec.endswith("?") else f"{spec}?" for name, spec in STRUCTS["Header"].items()
}

#: Every message type: who sends it and its fields (besides protocol/version/type, and seq on
#: kernel messages). One table, so new message types are one row each.
MESSAGES: dict[str, dict[str, Any]] = {
    # kernel -> sidebar
    "view": {
        "from": "kernel",
        "fields": {
            "header": "Header",
            "window": "Window",
            "last_action": "Outcome?",
            "live": "bool",
            "timeline": "Timeline?",
        },
    },
    "delta": {
        "from": "kernel",
        # header: the fields that changed since the message before, else null; last_action:
        # the outcome of a move or undo since the message before, else null; timeline: the
        # memory chart's rows recorded since, else null
        "fields": {
            "base": "int",
            "header": "HeaderChanges?",
            "window": "WindowDelta",
            "last_action": "Outcome?",
            "timeline": "Timeline?",
        },
    },
    "reply": {
        "from": "kernel",
        "fields": {"request_id": "str", "ok": "bool", "message": "str", "outcome": "Outcome?"},
    },
    "unloaded": {"from": "kernel", "fields": {"message": "str"}},
    # memory per cell and device, oldest first, at most TIMELINE_ROWS (memory): a Timeline
    # of its own, sent only after a cell whose rows found no view or delta to travel in
    "timeline": {"from": "kernel", "fields": STRUCTS["Timeline"]},
    # after a one-click fix under a diagnosis: the notebook runs that cell again (diagnose)
    "rerun": {"from": "kernel", "fields": {"cell_id": "str"}},
    # the answer to ``gather_engines``: every engine's summary (one small message per engine
    # was gathered), the engines that did not answer in time; available false: no client
    "engines": {
        "from": "kernel",
        "fields": {
            "request_id": "str",
            "available": "bool",
            "message": "str",
            "engines": "list[Engine]",
            "missing": "list[MissingEngine]",
            "seconds": "float",
            "expanded": "int?",
        },
    },
    # whether the kernel has an open ipyparallel client to gather from (shell/gather.py; the
    # sidebar shows its engines section only then): sent when it changes, after any cell
    "engines_reachable": {"from": "kernel", "fields": {"available": "bool"}},
    # sidebar -> kernel
    "window": {"from": "frontend", "fields": {"request_id": "str", "spec": "WindowSpec"}},
    "refresh": {"from": "frontend", "fields": {"request_id": "str"}},
    "move": {
        "from": "frontend",
        "fields": {"request_id": "str", "device": "str", "names": "list[str]?"},
    },
    "undo": {"from": "frontend", "fields": {"request_id": "str"}},
    # gather every engine's summary (and the objects of engine ``expand``): answered by an
    # ``engines`` message, then the reply
    "gather_engines": {"from": "frontend", "fields": {"request_id": "str", "expand": "int?"}},
}


def request_types() -> tuple[str, ...]:
    """The request types (read from the table each time: other parts add rows)."""
    return tuple(name for name, m in MESSAGES.items() if m["from"] == "frontend")


REQUEST_TYPES = request_types()


class ProtocolError(ValueError):
    """A message that does not match the schema."""


def check(value: Any, spec: str, where: str = "message") -> None:
    """Raise :class:`ProtocolError` unless ``value`` matches the type ``spec``."""
    if spec.endswith("?"):
        if value is None:
            return
        spec = spec[:-1]
    if spec == "any":
        return
    if spec == "str":
        if not isinstance(value, str):
            raise ProtocolError(f"'{where}' must be a string, got {type(value).__name__}")
        return
    if spec == "bool":
        if not isinstance(value, bool):
            raise ProtocolError(f"'{where}' must be true or false")
        return
    if spec == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise ProtocolError(f"'{where}' must be an integer")
        return
    if spec == "float":
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ProtocolError(f"'{where}' must be a number")
        return
    if spec.startswith("enum["):
        options = spec[5:-1].split("|")
        if value not in options:
            raise ProtocolError(f"'{where}' must be one of {', '.join(options)}")
        return
    if spec.startswith("list["):
        if not isinstance(value, list):
            raise ProtocolError(f"'{where}' must be a list")
        inner = spec[5:-1]
        for index, item in enumerate(value):
            check(item, inner, f"{where}[{index}]")
        return
    fields = STRUCTS.get(spec)
    if fields is None:
        raise AssertionError(f"unknown type {spec!r} in the schema")
    check_fields(value, fields, where)


def check_fields(
    value: Any, fields: dict[str, str], where: str, extra: frozenset[str] = frozenset()
) -> None:
    if not isinstance(value, dict):
        raise ProtocolError(f"'{where}' must be an object, got {type(value).__name__}")
    unexpected = set(value) - set(fields) - extra
    if unexpected:
        raise ProtocolError(
            f"unexpected field(s) in '{where}': {', '.join(sorted(map(str, unexpected)))}"
        )
    for name, spec in fields.items():
        if name not in value:
            if spec.endswith("?"):
                continue
            raise ProtocolError(f"'{where}' lacks '{name}'")
        check(value[name], spec, f"{where}.{name}" if where != "message" else name)


_ENVELOPE = frozenset({"protocol", "version", "type"})


def check_message(message: Any) -> None:
    """Check any message (either direction) against :data:`MESSAGES`."""
    if not isinstance(message, dict):
        raise ProtocolError(f"a message must be a JSON object, got {type(message).__name__}")
    kind = message.get("type")
    entry = MESSAGES.get(kind) if isinstance(kind, str) else None
    if entry is None:
        raise ProtocolError(f"unknown message type {kind!r}")
    version = message.get("version", PROTOCOL_VERSION)
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version {version!r} is not supported (kernel speaks {PROTOCOL_VERSION})"
        )
    extra = _ENVELOPE | ({"seq"} if entry["from"] == "kernel" else frozenset())
    check_fields(message, entry["fields"], "message", frozenset(extra))


# -- requests ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    type: str
    request_id: str
    device: str | None = None
    names: tuple[str, ...] | None = None
    spec: WindowSpec | None = None
    #: the checked fields of a request type added by another part (see comm.add_handler)
    fields: dict[str, Any] | None = None


def _short(value: Any, field: str) -> None:
    if isinstance(value, str) and len(value) > _MAX_STRING:
        raise ProtocolError(f"'{field}' is longer than {_MAX_STRING} characters")


def parse_request(message: Any) -> Request:
    """Validate a sidebar request; raise :class:`ProtocolError` with a one-line reason."""
    if not isinstance(message, dict):
        raise ProtocolError(f"a request must be a JSON object, got {type(message).__name__}")
    kind = message.get("type")
    types = request_types()
    if kind not in types:
        raise ProtocolError(f"unknown request type {kind!r}; expected one of {', '.join(types)}")
    message = dict(message)
    message.setdefault("request_id", "")
    check_message(message)
    request_id = message["request_id"]
    _short(request_id, "request_id")
    if kind == "window":
        raw = message["spec"]
        for name in ("filter", "target"):
            _short(raw.get(name), name)
        if raw["offset"] < 0:
            raise ProtocolError("'offset' must not be negative")
        if not 1 <= raw["limit"] <= MAX_LIMIT:
            raise ProtocolError(f"'limit' must be between 1 and {MAX_LIMIT}")
        spec = WindowSpec(
            sort=raw["sort"],
            reverse=raw["reverse"],
            filter=raw["filter"],
            offset=raw["offset"],
            limit=raw["limit"],
            target=raw.get("target"),
        )
        return Request(type=kind, request_id=request_id, spec=spec)
    if kind in ("refresh", "undo"):
        return Request(type=kind, request_id=request_id)
    if kind != "move":  # a request type another part added to MESSAGES: checked above
        extra = {k: v for k, v in message.items() if k in MESSAGES[kind]["fields"]}
        return Request(type=kind, request_id=request_id, fields=extra)
    device = message["device"]
    _short(device, "device")
    if not device.strip():
        raise ProtocolError("'device' must not be empty")
    names = message.get("names")
    if names is not None:
        if len(names) > _MAX_NAMES_PER_REQUEST:
            raise ProtocolError(f"'names' has more than {_MAX_NAMES_PER_REQUEST} entries")
        for name in names:
            _short(name, "names[]")
        names = tuple(names)
    return Request(type="move", request_id=request_id, device=device, names=names)


# -- kernel messages ------------------------------------------------------------------------------


def envelope(kind: str, **fields: Any) -> dict[str, Any]:
    return {"protocol": PROTOCOL_NAME, "version": PROTOCOL_VERSION, "type": kind, **fields}


def reply(
    request_id: str, ok: bool, message: str, outcome: dict[str, Any] | None = None
) -> dict[str, Any]:
    return envelope("reply", request_id=request_id, ok=ok, message=message, outcome=outcome)


def rerun(cell_id: str) -> dict[str, Any]:
    """Ask the frontend to run the notebook cell ``cell_id`` (IPython's ExecutionInfo.cell_id);
    ``SidebarChannel.send_rerun`` numbers it in each comm's sequence."""
    check(cell_id, "str", "cell_id")
    _short(cell_id, "cell_id")
    return envelope("rerun", cell_id=cell_id)


#: Most timeline rows sent at once (the chart shows the recent cells).
TIMELINE_ROWS = 200
_TIMELINE_TEXTS = ("label", "tooltip")
_TIMELINE_FACTS = tuple(f for f in STRUCTS["TimelineRow"] if f not in _TIMELINE_TEXTS)


def timeline_update(rows: list[dict[str, Any]], follows: int | None = None) -> dict[str, Any]:
    """The memory chart's rows (a ``Timeline``) from :meth:`memory.Timeline.to_json` rows (the
    last ``TIMELINE_ROWS``) with their words (:func:`viewmodel.timeline_texts`): it travels
    inside a ``delta`` or ``view``, or in a ``timeline`` message. ``follows``: the seq of the
    message on the same comm that carried the rows these come after (None: they are the whole
    chart). Not checked here, like the rest of a cell's delta (the check costs more than making
    the update, after every cell): the tests check every update on the wire with
    :func:`check_timeline_update`, and a ``timeline`` message is checked whole."""
    update = {
        "rows": [
            {**{key: row[key] for key in _TIMELINE_FACTS}, **timeline_texts(row)}
            for row in rows[-TIMELINE_ROWS:]
        ],
        "follows": follows,
    }
    return update


def timeline(
    rows: list[dict[str, Any]], *, seq: int = 0, follows: int | None = None
) -> dict[str, Any]:
    """A ``timeline`` message of its own: :func:`timeline_update` in an envelope."""
    message = envelope("timeline", seq=seq, **timeline_update(rows, follows))
    check_timeline(message)
    return message


def check_timeline(message: Any) -> None:
    """Assert the shape of a ``timeline`` message (the schema, and the [name, bytes] pairs)."""
    if not isinstance(message, dict) or message.get("type") != "timeline":
        raise ProtocolError("not a timeline message")
    check_message(message)
    _check_timeline_rows(message["rows"])


def check_timeline_update(update: Any) -> None:
    """Assert the shape of a ``Timeline`` (inside a delta or view, or a message's fields)."""
    check(update, "Timeline", "timeline")
    _check_timeline_rows(update["rows"])


def _check_timeline_rows(rows: list[Any]) -> None:
    if len(rows) > TIMELINE_ROWS:
        raise ProtocolError(f"timeline: 'rows' must be a list of at most {TIMELINE_ROWS}")
    for row in rows:
        for change in row["changes"]:
            if (
                not isinstance(change, list)
                or len(change) != 2
                or not isinstance(change[0], str)
                or not isinstance(change[1], int)
                or isinstance(change[1], bool)
            ):
                raise ProtocolError("timeline row: 'changes' are [name, bytes] pairs")


def outcome(
    action: str, ok: bool, message: str, skipped: Any = (), time: float = 0.0
) -> dict[str, Any]:
    """An action's outcome; skip reasons in words (never internal codes)."""
    from .viewmodel import in_words

    return {
        "action": action,
        "ok": ok,
        "message": message,
        "skipped": [{"name": str(n), "reason": in_words(str(r))} for n, r in skipped],
        "time": float(time),
    }


def snapshot(
    inventory: Any,
    *,
    targets: Any = (),
    default_target: str | None = None,
    spec: WindowSpec | None = None,
    seq: int = 1,
    device_notes: Any = (),
    **_ignored: Any,
) -> dict[str, Any]:
    """A whole ``view`` message for an Inventory (``Inventory.to_json``, fixtures, tests)."""
    from .viewmodel import Target, header, window

    targets = [t if isinstance(t, Target) else Target(**t) for t in targets]
    top = header(inventory, targets, default_target=default_target, device_notes=device_notes)
    records = inventory.records if inventory.torch_imported else []
    shown = window(records, spec or WindowSpec(), top.target)
    return envelope(
        "view",
        seq=seq,
        header=top.to_wire(),
        window=shown.to_wire(),
        last_action=None,
        live=True,
        timeline=None,
    )


# -- the TypeScript side ----------------------------------------------------------------------------


def _ts_type(spec: str) -> str:
    if spec.endswith("?"):
        return _ts_type(spec[:-1]) + " | null"
    if spec.startswith("list["):
        inner = _ts_type(spec[5:-1])
        return f"{inner}[]" if "|" not in inner else f"({inner})[]"
    if spec.startswith("enum["):
        return " | ".join(f"'{o}'" for o in spec[5:-1].split("|"))
    return {"str": "string", "int": "number", "float": "number", "bool": "boolean"}.get(
        spec, "unknown" if spec == "any" else "I" + spec
    )


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def typescript() -> str:
    """``labextension/src/protocol.ts``: the types and the schema, generated from this module."""
    out = [
        "// GENERATED by `python -m torchdevice_magic.protocol` from torchdevice_magic/protocol.py.",
        "// Do not edit: change the tables there and regenerate (tests/test_protocol.py checks).",
        "",
        f"export const PROTOCOL_NAME = '{PROTOCOL_NAME}';",
        f"export const PROTOCOL_VERSION = {PROTOCOL_VERSION};",
        f"export const COMM_TARGET = '{COMM_TARGET}';",
        "",
    ]
    for name, fields in STRUCTS.items():
        out.append(f"export interface I{name} {{")
        out += [f"  {field}: {_ts_type(spec)};" for field, spec in fields.items()]
        out += ["}", ""]
    out += [
        "export interface IEnvelope {",
        "  protocol: string;",
        "  version: number;",
        "  type: string;",
        "}",
        "",
    ]
    kernel: list[str] = []
    frontend: list[str] = []
    for kind, entry in MESSAGES.items():
        iname = f"I{_camel(kind)}Message"
        (kernel if entry["from"] == "kernel" else frontend).append(iname)
        out.append(f"export interface {iname} extends IEnvelope {{")
        out.append(f"  type: '{kind}';")
        if entry["from"] == "kernel":
            out.append("  seq: number;")
        out += [f"  {field}: {_ts_type(spec)};" for field, spec in entry["fields"].items()]
        out += ["}", ""]
    out.append(f"export type FromKernel = {' | '.join(kernel)};")
    out.append(f"export type ToKernel = {' | '.join(frontend)};")
    out.append("")
    schema = {"structs": STRUCTS, "messages": MESSAGES}
    out.append("/** The schema itself, for the runtime checks in validate.ts. */")
    out.append(f"export const SCHEMA = {json.dumps(schema, indent=2)} as const;")
    out.append("")
    return "\n".join(out)


# Inventory.to_json() is this snapshot
register_drawing("json", snapshot)

if __name__ == "__main__":  # pragma: no cover - the generator's entry point
    sys.stdout.write(typescript())
