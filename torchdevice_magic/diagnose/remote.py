"""Diagnoses made on ipyparallel engines, read in the client from the errors they come back in.

An engine with the extension loaded explains its own device error where the failing frames
live, and sends the diagnosis as plain data in the ``engine_info`` of its error reply
(``torchdevice_magic.shell.engine``). ipyparallel raises it in the client as a ``RemoteError``
(one engine) or a ``CompositeError`` (its ``elist`` holds each engine's ``engine_info``): this
module reads those back (:func:`engine_diagnoses`), never the error's text, and shows one
diagnosis per distinct finding: "Device mismatch on engines 0, 1: ...".

Pure: the standard library only; ipyparallel is never imported (its errors are read by their
documented attributes).
"""

from __future__ import annotations

import html
import json
import linecache
from dataclasses import dataclass, replace
from typing import Any

from .explain import Diagnosis
from .frames import is_cell_code, is_user_filename, traceback_entries

__all__ = [
    "ENGINE_INFO_KEY",
    "EngineDiagnoses",
    "EngineFinding",
    "engine_diagnoses",
    "failing_line",
]

#: the key of an engine's diagnosis in the ``engine_info`` of its error reply
ENGINE_INFO_KEY = "torchdevice_magic"


def failing_line(error: BaseException) -> dict[str, Any] | None:
    """Where the user's code failed: the innermost frame of the user's own code on the
    traceback (a cell's line, or a line of a function the user wrote), as plain data:
    ``{"file", "line", "function" (None for a cell), "source"}``."""
    found = None
    for _, code, line in traceback_entries(getattr(error, "__traceback__", None)):
        if is_user_filename(code.co_filename):
            found = (code, line)
    if found is None:
        return None
    code, line = found
    try:
        source = linecache.getline(code.co_filename, line).strip()
    except Exception:
        source = ""
    function = None if is_cell_code(code) else str(code.co_name)
    return {
        "file": str(code.co_filename),
        "line": int(line),
        "function": function,
        "source": source,
    }


def _where(line: dict[str, Any] | None) -> str:
    """``line 3 of the cell: y = model(x)``, ``line 5 in step() (train.py): ...``; "" unknown."""
    if not isinstance(line, dict) or not isinstance(line.get("line"), int):
        return ""
    function = line.get("function")
    if function:
        name = str(line.get("file", "")).replace("\\", "/").rsplit("/", 1)[-1]
        place = f"line {line['line']} in {function}()" + (f" ({name})" if name else "")
    else:
        place = f"line {line['line']} of the cell"
    source = str(line.get("source") or "")
    return f"{place}: {source}" if source else place


@dataclass
class EngineFinding:
    """One diagnosis and the engines that made it (identical diagnoses are shown once)."""

    #: the diagnosis, its ``origin`` naming every engine that made it
    diagnosis: Diagnosis
    #: the engines' ids, as the client numbers them
    engines: tuple[int, ...]
    #: where the user's code failed (see :func:`failing_line`), or None
    line: dict[str, Any] | None
    #: how the engines ran the code: ``"execute"`` (a cell: ``%%px``, ``execute``) or
    #: ``"apply"`` (a function: ``apply``, ``map``)
    method: str

    def px_line(self) -> str:
        """The fix as a line the client can run on the same engines (``%px x = x.to(...)``):
        where the code was a cell and the fix is statements for that cell; "" otherwise."""
        d = self.diagnosis
        if self.method != "execute" or not d.safe or not d.fix_lines:
            return ""
        if any(fix.where != "cell" for fix in d.fix_lines):
            return ""
        return "%px " + "; ".join(fix.source for fix in d.fix_lines)

    def extra_lines(self) -> list[str]:
        lines = []
        where = _where(self.line)
        if where:
            lines.append(f"At {where}")
        px = self.px_line()
        if px:
            lines.append(f"From the client, on the same engines: {px}")
        return lines

    def text(self) -> str:
        return "\n".join([self.diagnosis.text(), *self.extra_lines()])

    def _repr_html_(self) -> str:
        extra = "".join(f"<p>{html.escape(line)}</p>" for line in self.extra_lines())
        return self.diagnosis._repr_html_() + extra


@dataclass
class EngineDiagnoses:
    """What the engines explained about a remote device error, one finding per distinct
    diagnosis. Shown by the client's extension in place of a diagnosis of the error's text."""

    findings: list[EngineFinding]
    #: what the client adds (a one-click fix's trial); the engines' own notes are in findings
    note: str = ""
    #: the client has no one-click move for the engines' objects
    action: Any = None

    def text(self) -> str:
        body = "\n\n".join(finding.text() for finding in self.findings)
        return f"{body}\nNote: {self.note}" if self.note else body

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        note = f"<p><b>Note:</b> {html.escape(self.note)}</p>" if self.note else ""
        return "".join(finding._repr_html_() for finding in self.findings) + note

    def to_dict(self) -> dict[str, Any]:
        return {
            "findings": [
                {
                    "diagnosis": f.diagnosis.to_dict(),
                    "engines": list(f.engines),
                    "line": f.line,
                    "method": f.method,
                }
                for f in self.findings
            ],
            "note": self.note,
        }


def _engine_infos(error: BaseException) -> list[dict[str, Any]]:
    """The ``engine_info`` of each engine's error inside an ipyparallel error (empty for any
    other error)."""
    if not type(error).__module__.startswith("ipyparallel"):
        return []
    error = getattr(error, "original_error", None) or error  # streamed %px output: shown once
    elist = getattr(error, "elist", None)
    if isinstance(elist, list):
        infos = [entry[3] for entry in elist if isinstance(entry, tuple) and len(entry) == 4]
    else:
        infos = [getattr(error, "engine_info", None)]
    return [info for info in infos if isinstance(info, dict)]


def _label(engines: list[dict[str, Any]]) -> str:
    """``engine 0``, ``engines 0, 1``, ``engines 0, 1 (ranks 0, 1 on node7)``."""
    ids = ", ".join(str(e.get("engine_id")) for e in engines)
    label = f"engine {ids}" if len(engines) == 1 else f"engines {ids}"
    ranks = [e.get("rank") for e in engines]
    if any(rank is None for rank in ranks):
        return label
    hosts = ", ".join(dict.fromkeys(str(e.get("host")) for e in engines))
    sizes = {e.get("world_size") for e in engines}
    of = f" of {sizes.pop()}" if len(sizes) == 1 else ""
    word = "rank" if len(ranks) == 1 else "ranks"
    return f"{label} ({word} {', '.join(str(r) for r in ranks)}{of} on {hosts})"


def engine_diagnoses(error: BaseException) -> EngineDiagnoses | None:
    """The engines' own diagnoses of an ipyparallel ``RemoteError``/``CompositeError``, equal
    ones merged (None where no engine sent one, or none that reads back: the error's text is
    then all there is). Never raises."""
    groups: dict[str, tuple[dict[str, Any], list[dict[str, Any]], Any, str]] = {}
    for info in _engine_infos(error):
        sent = info.get(ENGINE_INFO_KEY)
        if not isinstance(sent, dict) or not isinstance(sent.get("diagnosis"), dict):
            continue
        diagnosis = {k: v for k, v in sent["diagnosis"].items() if k not in ("origin", "match")}
        method = str(info.get("method") or "")
        # where it failed as the user reads it: each engine caches its cells under a file name
        # of its own
        where = _where(sent.get("line"))
        key = json.dumps([diagnosis, where, method], sort_keys=True, default=str)
        engine = dict(sent.get("engine") or {})
        # the client's numbering of the engine, which the engine's own may not know
        engine["engine_id"] = info.get("engine_id", engine.get("engine_id"))
        groups.setdefault(key, (diagnosis, [], sent.get("line"), method))[1].append(engine)
    findings = []
    for diagnosis, engines, line, method in groups.values():
        engines.sort(key=lambda e: (str(type(e.get("engine_id"))), e.get("engine_id")))
        try:
            shown = replace(Diagnosis.from_dict(diagnosis), origin=_label(engines))
        except Exception:  # another version's or a broken engine's data: its text is left
            continue
        ids = tuple(int(e["engine_id"]) for e in engines if isinstance(e.get("engine_id"), int))
        findings.append(EngineFinding(shown, ids, line, method))
    return EngineDiagnoses(findings) if findings else None
