"""What a diagnosis says and how it looks: :class:`Diagnosis` (text and escaped HTML).

Pure: the standard library only. A diagnosis keeps no reference to user objects or frames (a
stored diagnosis must not keep GPU memory alive): only names, kinds, devices and sizes.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ..units import format_bytes
from .schema import MessageMatch

__all__ = ["Culprit", "Diagnosis", "FixLine", "MoveAction"]


@dataclass
class Culprit:
    """One object involved in the mismatch.

    ``where`` is ``"cell"`` (a name the cell reads, looked up in the namespace) or
    ``"frame <funcname>"`` (a local of a user function on the traceback). ``bytes`` is what
    the object occupies (meta: 0); ``needed_bytes`` what it would occupy on a real device.
    ``alias`` is the namespace name bound to the same object, for frame locals.
    """

    name: str
    where: str
    kind: str
    devices: tuple[str, ...]
    bytes: int
    needed_bytes: int = 0
    bytes_by_device: dict[str, int] = field(default_factory=dict)
    dtype: str | None = None
    alias: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "where": self.where,
            "kind": self.kind,
            "devices": list(self.devices),
            "bytes": self.bytes,
            "needed_bytes": self.needed_bytes,
            "bytes_by_device": dict(self.bytes_by_device),
            "dtype": self.dtype,
            "alias": self.alias,
        }


@dataclass(frozen=True)
class MoveAction:
    """A fix that is exactly "move these namespace names to ``device``" (and re-run)."""

    names: tuple[str, ...]
    device: str

    @property
    def label(self) -> str:
        what = self.names[0] if len(self.names) == 1 else ", ".join(self.names[:3])
        if len(self.names) > 3:
            what += f" and {len(self.names) - 3} more"
        return f"Move {what} to {self.device} and re-run"

    def to_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), "device": self.device}


@dataclass(frozen=True)
class FixLine:
    """One statement of the fix and where it goes: ``"cell"``, ``"loop"`` (top of the cell's
    ``for`` body) or ``"frame <funcname>"`` (inside that function)."""

    where: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return {"where": self.where, "source": self.source}


@dataclass
class Diagnosis:
    """Everything :func:`diagnose` found; ``text()`` and ``_repr_html_()`` render it."""

    message: str
    kind: str
    devices: tuple[str, ...]
    argument: str | None
    operator: str | None
    culprits: list[Culprit]
    fix: str
    note: str
    target: str | None
    fix_lines: list[FixLine] = field(default_factory=list)
    reason: str = ""
    match: MessageMatch | None = None
    #: False when no safe one-line fix exists (``why_no_fix`` says why; ``fix`` is a comment)
    safe: bool = True
    why_no_fix: str = ""
    #: The fix as a move the move engine can apply (the one-click button), or None
    action: MoveAction | None = None
    #: where the error happened when that is not the user's own kernel: ``"engine 0"``,
    #: ``"engines 0, 1 (ranks 0, 1 on node7)"`` (ipyparallel engines); "" for this kernel
    origin: str = ""

    # -- rendering -------------------------------------------------------------------------

    def _where_it_failed(self) -> str:
        """`` in addmm (argument mat1)``: the operation and argument the message names, in the
        user's words; nothing where it names none (the rule's internal code means nothing to a
        user)."""
        if not self.operator:
            return ""
        argument = f" (argument {self.argument})" if self.argument else ""
        return f" in {self.operator}{argument}"

    def _headline(self) -> str:
        return f"Device mismatch on {self.origin}" if self.origin else "Device mismatch"

    def summary(self) -> str:
        """The first line: who is on which device."""
        head = self._headline()
        shown = self.culprits[:6]
        if shown:
            parts = [_describe_culprit(c) for c in shown]
            more = len(self.culprits) - len(shown)
            tail = f"; and {more} more" if more > 0 else ""
            return f"{head}: " + "; ".join(parts) + tail + "."
        bits = []
        if self.devices:
            bits.append("the operation mixed " + " and ".join(self.devices) + " tensors")
        else:
            bits.append("the operation mixed tensors of different devices or types")
        if self.argument:
            where = f" in {self.operator}" if self.operator else ""
            bits.append(f"(argument '{self.argument}'{where})")
        elif self.operator:
            bits.append(f"(in {self.operator})")
        return f"{head}: " + " ".join(bits) + "."

    def fix_text_lines(self) -> list[str]:
        """``Fix: ...`` lines, one per place the fix goes."""
        head = "Fix" if self.safe else "Instead"
        out = [] if self.safe else [f"No safe one-line fix: {self.why_no_fix}"]
        if not self.fix_lines:
            return out + ([f"{head}: {self.fix}"] if self.fix else [])
        # one line per place the fix goes (the cell, a loop, a function, a class's __init__)
        groups: dict[str, list[str]] = {}
        for line in self.fix_lines:
            groups.setdefault(line.where, []).append(line.source)
        for i, (where, sources) in enumerate(groups.items()):
            label = _place_label(where)
            src = "; ".join(sources)
            reason = (
                f"   # {self.reason}"
                if self.safe and self.reason and i == 0 and "#" not in src
                else ""
            )
            out.append(f"{head}{label}: {src}{reason}")
        return out

    def text(self) -> str:
        lines = [self.summary(), *self.fix_text_lines()]
        if self.note:
            lines.append(f"Note: {self.note}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        e = html.escape
        items = []
        for c in self.culprits:
            devs = ", ".join(f"<code>{e(d)}</code>" for d in c.devices) or "no device"
            items.append(
                f"<li><code>{e(c.alias or c.name)}</code> ({e(c.kind)}, "
                f"{e(format_bytes(_shown_bytes(c)))}{e(_culprit_where(c))}) on {devs}</li>"
            )
        culprits = f"<ul>{''.join(items)}</ul>" if items else f"<p>{e(self.summary())}</p>"
        # JupyterLab's output CSS breaks <pre> text anywhere (word-break: break-all): a fix line
        # may wrap at its spaces, never inside `x.to("cuda:0")`
        fixes = "".join(
            f'<pre style="{_FIX_STYLE}">{e(line)}</pre>' for line in self.fix_text_lines()
        )
        note = f"<p><b>Note:</b> {e(self.note)}</p>" if self.note else ""
        return (
            '<div class="torchdevice-magic-diagnosis">'
            f"<p><b>{e(self._headline())}</b>{e(self._where_it_failed())}</p>"
            f"{culprits}{fixes}{note}"
            f"<details><summary>Original message</summary><pre>{e(self.message)}</pre>"
            "</details></div>"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "kind": self.kind,
            "devices": list(self.devices),
            "argument": self.argument,
            "operator": self.operator,
            "culprits": [c.to_dict() for c in self.culprits],
            "fix": self.fix,
            "fix_lines": [f.to_dict() for f in self.fix_lines],
            "note": self.note,
            "target": self.target,
            "reason": self.reason,
            "match": self.match.to_dict() if self.match is not None else None,
            "safe": self.safe,
            "why_no_fix": self.why_no_fix,
            "action": self.action.to_dict() if self.action is not None else None,
            "origin": self.origin,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnosis:
        """The diagnosis :meth:`to_dict` wrote (sent from another process: an ipyparallel
        engine). The rule's match is not carried: nothing shown is read from it."""
        action = data.get("action")
        return cls(
            message=str(data["message"]),
            kind=str(data["kind"]),
            devices=tuple(data.get("devices", ())),
            argument=data.get("argument"),
            operator=data.get("operator"),
            culprits=[
                Culprit(**{**c, "devices": tuple(c.get("devices", ()))})
                for c in data.get("culprits", ())
            ],
            fix=str(data.get("fix", "")),
            note=str(data.get("note", "")),
            target=data.get("target"),
            fix_lines=[FixLine(**line) for line in data.get("fix_lines", ())],
            reason=str(data.get("reason", "")),
            safe=bool(data.get("safe", True)),
            why_no_fix=str(data.get("why_no_fix", "")),
            action=(
                MoveAction(tuple(action["names"]), str(action["device"]))
                if isinstance(action, dict)
                else None
            ),
            origin=str(data.get("origin", "")),
        )


_FIX_STYLE = "white-space:pre-wrap;word-break:normal;overflow-wrap:normal"


def _shown_bytes(c: Culprit) -> int:
    # Meta objects occupy nothing; show what they would need, which is what matters when
    # deciding which side to move.
    return c.needed_bytes or c.bytes


def _culprit_where(c: Culprit) -> str:
    """``""`` for the cell, ``", in train()"`` for a frame, ``", self in forward()"`` when a
    frame local is also a namespace name (shown under that name)."""
    if c.where == "cell":
        return ""
    if c.where.startswith("line "):
        return f", created in {c.where}"
    if c.where.startswith("attribute "):
        return f", a plain tensor attribute of {c.where.removeprefix('attribute ')}"
    func = c.where.removeprefix("frame ")
    return f", {c.name} in {func}()" if c.alias else f", in {func}()"


def _describe_culprit(c: Culprit) -> str:
    devs = " and ".join(c.devices) if c.devices else "no device"
    size = format_bytes(_shown_bytes(c))
    return f"{c.alias or c.name} ({c.kind}, {size}{_culprit_where(c)}) is on {devs}"


def _place_label(where: str) -> str:
    if where == "cell":
        return ""
    if where == "loop":
        return " (first line inside the for loop)"
    if where.startswith("frame "):
        return f" (inside {where.removeprefix('frame ')}())"
    if where.startswith("line "):
        return f" (rewrite {where})"
    if where.startswith("class "):
        return f" (in {where.removeprefix('class ')})"
    return f" ({where})"
