"""One view of every ipyparallel engine: what each engine sends and what the client shows.

Pure core (no IPython, no ipyparallel, never imports torch). An engine turns its inventory into
a *summary* (:func:`engine_summary`): plain, json-able data (names, kinds, devices, bytes; never
a tensor), a few hundred bytes, so that a refresh costs one small message per engine. An
expanded engine also sends its biggest objects (:func:`object_rows`). The client puts the
answers together into :class:`Gathered`: one row per engine x device with the engine's
rank and host, the bytes its objects hold there, and the accelerator's used/total where the
engine had initialised it; engines that did not answer in time are named with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from ..devices import accelerator_type, device_count, is_initialized, memory_figures
from ..records import DeviceTotal, Record
from ..units import device_sort_key, format_bytes

#: bumped when the summary's fields change (an engine and its client may run different versions)
SUMMARY_VERSION = 2
#: how many of an expanded engine's objects travel (the biggest first)
OBJECT_LIMIT = 200


def engine_summary(
    records: Iterable[Record],
    totals: Iterable[DeviceTotal],
    *,
    rank: int | None,
    host: str,
    pid: int,
    note: str = "",
) -> dict[str, Any]:
    """An engine's summary: per device ``[bytes, objects]`` (bytes counted once per storage, as
    in the inventory's totals) and the allocator's ``[allocated, reserved, capacity]`` where the
    device is initialised. ``objects`` counts the visible top-level names."""
    counts: dict[str, int] = {}
    names = 0
    for record in records:
        if record.hidden or record.name != record.root:
            continue
        names += 1
        for device in record.devices:
            counts[device] = counts.get(device, 0) + 1
    devices: dict[str, list[int]] = {}
    memory: dict[str, list[int | None]] = {}
    for total in totals:
        devices[total.device] = [total.bytes, counts.get(total.device, 0)]
        if total.allocated is not None or total.capacity is not None:
            memory[total.device] = [total.allocated, total.reserved, total.capacity]
    summary: dict[str, Any] = {
        "v": SUMMARY_VERSION,
        "rank": rank,
        "host": host,
        "pid": pid,
        "objects": names,
        "devices": devices,
    }
    if memory:
        summary["memory"] = memory
    if note:
        summary["note"] = note
    return summary


def accelerator_totals(present: Iterable[str]) -> list[DeviceTotal]:
    """The allocator's figures of the accelerator's devices that hold none of the named objects
    (``present``) but memory all the same (freed tensors the caching allocator keeps, tensors
    no name reaches): only where the accelerator is already initialised, never initialising
    it, and only devices where this process holds something (an engine that uses one of eight
    GPUs reports that one)."""
    kind = accelerator_type()
    if kind is None or not is_initialized(kind):
        return []
    shown = set(present)
    rows = []
    for index in range(device_count(kind)):
        device = f"{kind}:{index}"
        if device in shown:
            continue
        figures = memory_figures(device)
        if not (figures.allocated or figures.reserved):
            continue
        rows.append(
            DeviceTotal(device, 0, 0, figures.allocated, figures.reserved, figures.capacity)
        )
    return rows


def object_rows(records: Iterable[Record], limit: int = OBJECT_LIMIT) -> list[list[Any]]:
    """An expanded engine's objects, biggest first: ``[name, kind, type, device, bytes,
    devices, param_devices, note]``. ``device`` is what the tables show (``Record.device``:
    ``cpu (params; no state yet)``); the last three are the DataFrame's (``Record.frame_row``:
    device names only, the words apart)."""
    visible = [r for r in records if not r.hidden and r.name == r.root]
    visible.sort(key=lambda r: (-r.data_bytes(), r.name))
    rows = []
    for record in visible[:limit]:
        frame = record.frame_row()
        rows.append(
            [record.name, record.kind, record.type, record.device, record.data_bytes(),
             frame["device"], frame["param_devices"], frame["note"]]
        )  # fmt: skip
    return rows


def _shown(row: Sequence[Any]) -> tuple[str, str, str, str, int]:
    """An object row's ``(name, kind, type, device as the tables show it, bytes)``."""
    name, kind, type_name, device, nbytes = row[:5]
    return str(name), str(kind), str(type_name), str(device), int(nbytes)


def _frame_fields(row: Sequence[Any]) -> tuple[str, str, str]:
    """An object row's ``(device names, param_devices, note)`` for the DataFrame; an engine
    of summary version 1 sent the tables' words alone (they stand in for the names)."""
    if len(row) < 8:
        return str(row[3]), "", ""
    return str(row[5]), str(row[6]), str(row[7])


@dataclass(frozen=True)
class EngineAnswer:
    """One engine's summary as the client received it (``objects`` only when expanded)."""

    engine: int
    summary: Mapping[str, Any]
    rows: Sequence[Sequence[Any]] | None = None

    @property
    def rank(self) -> int | None:
        rank = self.summary.get("rank")
        return int(rank) if rank is not None else None

    @property
    def host(self) -> str:
        return str(self.summary.get("host", ""))

    def devices(self) -> list[tuple[str, int, int]]:
        """``(device, bytes, objects)`` in device order."""
        found = self.summary.get("devices", {})
        ordered = sorted(found, key=device_sort_key)
        return [(d, int(found[d][0]), int(found[d][1])) for d in ordered]

    def memory(self, device: str) -> tuple[int | None, int | None]:
        """The accelerator's ``(used, total)``: allocated and capacity, where initialised."""
        figures = self.summary.get("memory", {}).get(device)
        if not figures:
            return None, None
        return figures[0], figures[2]


@dataclass(frozen=True)
class Gathered:
    """What a gather brought back: the engines that answered and why the others did not."""

    answers: list[EngineAnswer]
    missing: dict[int, str] = field(default_factory=dict)
    timeout: float = 0.0
    seconds: float = 0.0

    def rows(self) -> list[dict[str, Any]]:
        """One row per engine x device (an engine that holds nothing: one row, device None);
        one row per engine that did not answer, with its reason in ``status``."""
        rows: list[dict[str, Any]] = []
        for answer in sorted(self.answers, key=lambda a: a.engine):
            base = {"engine": answer.engine, "rank": answer.rank, "host": answer.host}
            devices: list[tuple[str | None, int, int]] = [*answer.devices()] or [(None, 0, 0)]
            for device, nbytes, count in devices:
                used, total = answer.memory(device) if device is not None else (None, None)
                status = str(answer.summary.get("note", "")) or "ok"
                rows.append(
                    {**base, "device": device, "objects": count, "bytes": nbytes,
                     "used": used, "total": total, "status": status}
                )  # fmt: skip
        for engine, why in sorted(self.missing.items()):
            rows.append(
                {"engine": engine, "rank": None, "host": None, "device": None, "objects": None,
                 "bytes": None, "used": None, "total": None, "status": why}
            )  # fmt: skip
        return rows

    def object_rows(self) -> list[dict[str, Any]]:
        """The expanded engines' objects, one row each, as ``%devices -o`` has them: ``device``
        names devices only, the words go to ``param_devices`` and ``note``."""
        rows = []
        for answer in sorted(self.answers, key=lambda a: a.engine):
            for row in answer.rows or ():
                name, kind, type_name, _words, nbytes = _shown(row)
                device, param_devices, note = _frame_fields(row)
                rows.append(
                    {"engine": answer.engine, "rank": answer.rank, "name": name, "kind": kind,
                     "type": type_name, "device": device, "param_devices": param_devices,
                     "bytes": nbytes, "note": note}
                )  # fmt: skip
        return rows

    def to_frame(self, objects: bool = False) -> Any:
        """A pandas DataFrame of :meth:`rows` (or, with ``objects``, of :meth:`object_rows`);
        ``frame.attrs["missing"]`` maps each engine that did not answer to the reason."""
        import pandas as pd

        if objects:
            columns = ["engine", "rank", "name", "kind", "type", "device", "param_devices",
                       "bytes", "note"]  # fmt: skip
            frame = pd.DataFrame(self.object_rows(), columns=columns)
        else:
            columns = ["engine", "rank", "host", "device", "objects", "bytes", "used", "total",
                       "status"]  # fmt: skip
            frame = pd.DataFrame(self.rows(), columns=columns)
        frame.attrs["missing"] = dict(self.missing)
        return frame

    def to_wire(self) -> dict[str, Any]:
        """The sidebar's ``engines`` fields (protocol.py ``Engine``, ``MissingEngine``): every
        size already in words (the sidebar formats no number)."""
        engines = []
        for answer in sorted(self.answers, key=lambda a: a.engine):
            devices = []
            for device, nbytes, count in answer.devices():
                used, total = answer.memory(device)
                devices.append(
                    {"device": device, "objects": count, "bytes": nbytes,
                     "size": format_bytes(nbytes), "memory": _memory_text(used, total)}
                )  # fmt: skip
            objects = None
            if answer.rows is not None:
                objects = [
                    {"name": n, "kind": k, "type": t, "device": d, "bytes": b,
                     "size": format_bytes(b)}
                    for n, k, t, d, b in map(_shown, answer.rows)
                ]  # fmt: skip
            engines.append(
                {"engine": answer.engine, "rank": answer.rank, "host": answer.host,
                 "status": str(answer.summary.get("note", "")), "devices": devices,
                 "objects": objects}
            )  # fmt: skip
        missing = [{"engine": e, "reason": why} for e, why in sorted(self.missing.items())]
        return {"engines": engines, "missing": missing, "seconds": round(self.seconds, 4)}

    def missing_line(self) -> str:
        if not self.missing:
            return ""
        # each reason says itself why ("no answer within 2 s (busy: ...)", "failed: ...")
        parts = [
            f"engine {e} is not in the table: {why}" for e, why in sorted(self.missing.items())
        ]
        return "; ".join(parts)

    def text(self) -> str:
        head = ["engine", "rank", "host", "device", "objects", "size", "used / total"]
        lines = [head]
        for row in self.rows():
            if row["status"] != "ok" and row["objects"] is None:
                continue  # the engines that did not answer are named below the table
            lines.append(_cells(row))
        widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
        text = [
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
            for line in lines
        ]
        text.extend(_expanded_text(self))
        if self.missing:
            text.append(self.missing_line())
        return "\n".join(text)

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        head = ["engine", "rank", "host", "device", "objects", "size", "used / total"]
        body = []
        for row in self.rows():
            if row["objects"] is None:
                continue
            cells = "".join(f"<td>{escape(cell)}</td>" for cell in _cells(row))
            body.append(f"<tr>{cells}</tr>")
        header = "".join(f"<th>{escape(h)}</th>" for h in head)
        parts = [
            f"<p><b>Engines</b> <i>{len(self.answers)} answered in {self.seconds * 1000:.0f} ms"
            "</i></p>",
            f"<table><thead><tr>{header}</tr></thead><tbody>{''.join(body)}</tbody></table>",
        ]
        for answer in self.answers:
            if answer.rows is None:
                continue
            items = "".join(
                f"<tr><td>{escape(str(n))}</td><td>{escape(str(t))}</td><td>{escape(str(d))}"
                f"</td><td>{escape(format_bytes(b))}</td></tr>"
                for n, _k, t, d, b in map(_shown, answer.rows)
            )
            parts.append(
                f"<p><b>Engine {answer.engine}</b></p><table><thead><tr><th>name</th>"
                f"<th>type</th><th>device</th><th>size</th></tr></thead><tbody>{items}</tbody>"
                "</table>"
            )
        if self.missing:
            parts.append(f"<p>⚠ {escape(self.missing_line())}</p>")
        return "".join(parts)


def _memory_text(used: int | None, total: int | None) -> str:
    """The accelerator's ``used / total`` ("" where the engine has no figures for it)."""
    if used is None and total is None:
        return ""
    return " / ".join(format_bytes(v) if v is not None else "?" for v in (used, total))


def _cells(row: Mapping[str, Any]) -> list[str]:
    memory = _memory_text(row["used"], row["total"])
    return [
        str(row["engine"]),
        "-" if row["rank"] is None else str(row["rank"]),
        str(row["host"] or ""),
        str(row["device"] or "-"),
        str(row["objects"]),
        format_bytes(row["bytes"] or 0),
        memory,
    ]


def _expanded_text(gathered: Gathered) -> list[str]:
    lines = []
    for answer in sorted(gathered.answers, key=lambda a: a.engine):
        if answer.rows is None:
            continue
        lines.append(f"engine {answer.engine}:")
        if not answer.rows:
            lines.append("  (no tensors, modules or optimizers)")
        for name, _kind, type_name, device, nbytes in map(_shown, answer.rows):
            lines.append(f"  {name}  {type_name}  {device}  {format_bytes(nbytes)}")
    return lines


__all__ = [
    "OBJECT_LIMIT",
    "accelerator_totals",
    "SUMMARY_VERSION",
    "EngineAnswer",
    "Gathered",
    "engine_summary",
    "object_rows",
]
