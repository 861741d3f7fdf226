"""Which rule an error's message belongs to: :func:`parse_message` and :func:`find_match`.

Pure: the standard library only. The first rule of :data:`~.rules.RULES` that matches wins; a
message no rule knows that still speaks of devices in a mismatch's words is ``generic``. An
exception's ``__cause__``/``__context__`` chain is searched too (a library may wrap the error).
"""

from __future__ import annotations

import re

from .rules import GENERIC, RULES
from .schema import MessageMatch, Rule, distinct
from .vocabulary import DEVICE_TOKEN, normalize_device

__all__ = ["exception_chain", "find_match", "parse_message", "rule_for"]

_GENERIC_HINT = re.compile(
    r"same device|same GPU|different devices?|same devices|expected device|to be on (?:cpu|gpu)"
    r"|not on the expected device|device mismatch|devices? do(?:es)? not match"
    r"|on different devices|devices? (?:are|is) not the same|wrong device"
    r"|must be on (?:the )?(?:cpu|gpu|cuda)\b|cross-device",
    re.IGNORECASE,
)
#: Wordings that mention devices but are not mismatches (availability, CUDA runtime errors).
_NOT_MISMATCH = re.compile(
    r"CUDA error|out of memory|not compiled with|no CUDA GPUs|is not available|invalid device"
    r"|device-side assert",
    re.IGNORECASE,
)

_BY_KIND = {rule.kind: rule for rule in (*RULES, GENERIC)}


def rule_for(kind: str) -> Rule:
    return _BY_KIND.get(kind, GENERIC)


def parse_message(text: str) -> MessageMatch | None:
    """Recognise a device-mismatch error message; ``None`` for anything else.

    Searches (not matches) so prefixes such as torch.compile's wrapping text do not hide it.
    """
    try:
        if not isinstance(text, str) or not text:
            return None
        text = text[:20_000]
        for rule in RULES:
            found = rule.match(text)
            if found is not None:
                return found
        if _GENERIC_HINT.search(text) and not _NOT_MISMATCH.search(text):
            devices = distinct(normalize_device(m.group(0)) for m in DEVICE_TOKEN.finditer(text))
            return MessageMatch("generic", devices)
    except Exception:
        return None
    return None


def exception_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what caused it or was being handled when it came (breadth first, 20 at most)."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo and len(chain) < 20:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        chain.append(e)
        for nxt in (getattr(e, "__cause__", None), getattr(e, "__context__", None)):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    return chain


def _message_of(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        try:
            text = str(exc.args[0]) if exc.args else ""
        except Exception:
            text = ""
    return text


def find_match(exc: BaseException) -> tuple[BaseException, str, MessageMatch] | None:
    """The first exception in ``exc``'s cause/context chain whose message a rule matches."""
    try:
        if not isinstance(exc, BaseException):
            return None
        for e in exception_chain(exc):
            text = _message_of(e)
            match = parse_message(text)
            if match is not None:
                return e, text, match
    except Exception:
        return None
    return None
