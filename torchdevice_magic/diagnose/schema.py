"""What a diagnosis rule is: the schema every entry of the :data:`~.rules.RULES` table follows.

Pure: the standard library only. A :class:`Rule` is data: message patterns whose named groups
say what each part of the message is, and the fix policy the engine (:mod:`.core`) applies to
it -- where the fix sends things (:class:`Destination`), who moves (:class:`Movers`), and the
few per-family facts a fix needs (a reason, a note, a replacement fix). Every field is checked
once, in ``__post_init__``, so a bad table entry fails at import, not in a user's session.
:class:`MessageMatch` is what a rule read from one message.

Named groups in the patterns (all optional):

``got``   the device of the odd tensor (the argument, the out= tensor, the index, ...)
``want``  the device the operation expected (the common device, the indexed tensor's, ...)
``a``/``b`` two devices the message names without saying which is odd
``arg``   the argument's name;  ``op`` the operator or method
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .vocabulary import normalize_device

__all__ = [
    "DEVICE",
    "DEVICE_OR_REPR",
    "Destination",
    "MessageMatch",
    "Movers",
    "Rule",
    "clean_operator",
    "device_group",
    "distinct",
    "read_groups",
]


class Destination(str, Enum):
    """Where a rule's fix sends things (the engine's choice for each is in :mod:`.fixes`)."""

    #: where the model / the most bytes are: data follows the model
    BIGGER = "bigger"
    #: the device the message says the operation expected
    EXPECTED = "expected"
    #: the CPU (arguments read on the host, such as split indices)
    CPU = "cpu"
    #: a device that keeps data: the message's non-meta device (meta holds no data)
    REAL = "real"
    #: nothing moves; the rule's ``replacement_fix`` says what to do instead
    NONE = "none"


class Movers(str, Enum):
    """Who a rule's fix moves, among the candidates not already on the destination."""

    #: every one of them
    ALL = "all"
    #: the modules (DataParallel wants the module on device_ids[0], not the data)
    MODULES = "modules"
    #: the integer tensors: indices go to the data, never the data to the indices
    INDEX = "index"
    #: the out= tensor: its values are overwritten anyway
    OUT = "out"
    #: what holds meta tensors (modules with meta parameters first): they are materialised
    META = "meta"


#: A device as messages print it: ``cuda:0``, ``meta``, ``cpu``, ``simdev:0``.
DEVICE = r"[A-Za-z_][\w]*(?::\d+)?"
#: A device as messages print it, or a ``torch.device`` repr (``device(type='cuda', index=0)``).
DEVICE_OR_REPR = r"(?:device\(type='\w+'(?:, index=\d+)?\)|" + DEVICE + ")"


def device_group(name: str, pattern: str = DEVICE) -> str:
    """A named regex group for a device: ``device_group("got")`` in a rule's pattern."""
    return f"(?P<{name}>{pattern})"


@dataclass(frozen=True)
class MessageMatch:
    """What a rule read from an error message."""

    #: the rule's family (:attr:`Rule.kind`)
    kind: str
    #: normalised devices (``"cuda:0"``, ``"cuda"``, ``"cpu"``, ``"meta"``) in message order
    devices: tuple[str, ...] = ()
    #: the argument the message names (``weight``, ``out``, ``indices``), if any
    argument: str | None = None
    #: the operator or method the message names (``index_select``), if any
    operator: str | None = None
    #: the device of the named (odd) tensor, where the message says which one is odd
    argument_device: str | None = None
    #: the device the operation wanted, where the message says so
    expected: str | None = None
    #: the conv message's tensor-type names (``torch.cuda.FloatTensor``); empty otherwise
    types: tuple[str, ...] = ()
    #: the dtypes of those types (None where a type name gives none)
    dtypes: tuple[str | None, ...] = ()
    #: whether the conv message's two types also differ in dtype
    dtype_mismatch: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "devices": list(self.devices),
            "argument": self.argument,
            "operator": self.operator,
            "argument_device": self.argument_device,
            "expected": self.expected,
            "types": list(self.types),
            "dtypes": list(self.dtypes),
            "dtype_mismatch": self.dtype_mismatch,
        }


#: Reads a pattern's match into a :class:`MessageMatch` (None: not this family after all).
Reader = Callable[["re.Match[str]", "Rule"], "MessageMatch | None"]

#: The fields a rule's texts may use, filled from the match.
_TEXT_FIELDS = frozenset({"expected", "argument", "operator", "devices", "destination"})


@dataclass(frozen=True)
class Rule:
    """One family of device errors: how PyTorch words it and how its fix is chosen."""

    #: the family's name (an identifier; shown with spaces in the HTML)
    kind: str
    #: regexes searched in the message, first hit wins; named groups as in the module docstring
    patterns: tuple[str, ...]
    #: where the fix sends things
    target: Destination = Destination.BIGGER
    #: who the fix moves
    movers: Movers = Movers.ALL
    #: what the user should know, with ``{expected}``, ``{argument}``, ``{operator}``,
    #: ``{devices}`` filled from the match
    note: str = ""
    #: the operator when the message names none but the family implies one
    operator: str | None = None
    #: the argument when the message names none but the family implies one
    argument: str | None = None
    #: reads a match whose groups need interpreting (conv type names); None: the groups as named
    reader: Reader | None = None
    #: why the fix goes to the expected device, where this family knows better than the generic
    #: "move it to the device the operation expected" (only with ``Destination.EXPECTED``)
    reason: str = ""
    #: the message names one device only (the indexed tensor's; meta): every candidate that is
    #: on some device is listed, not only those on the message's devices
    lists_every_device: bool = False
    #: the message also carries dtypes (conv ``Input type ... weight type``): the input takes
    #: the layer's dtype too, and a note says so
    converts_dtype: bool = False
    #: the fix where nothing moves (``Destination.NONE``), with ``{destination}`` filled with
    #: the expected device (cpu when the message names none)
    replacement_fix: str = ""
    #: the fix when no culprit was found, with ``{destination}`` filled; empty: a comment that
    #: says what to move where
    fallback_fix: str = ""
    #: say that nothing real is moved to meta when meta tensors are involved (off where the
    #: message itself is about copying out of meta)
    says_meta_stays: bool = True
    #: when the fix lands on the CPU, also say how to run on the accelerator instead (off where
    #: the CPU is the only right place: meta copies, index tensors)
    offers_accelerator: bool = True
    #: the compiled ``patterns`` (filled in ``__post_init__``)
    compiled: tuple[re.Pattern[str], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.kind.isidentifier():
            raise ValueError(f"rule kind {self.kind!r} is not an identifier")
        if not isinstance(self.target, Destination) or not isinstance(self.movers, Movers):
            raise ValueError(f"rule {self.kind}: target and movers must be enum members")
        if self.reason and self.target is not Destination.EXPECTED:
            raise ValueError(f"rule {self.kind}: a reason is for Destination.EXPECTED only")
        if bool(self.replacement_fix) != (self.target is Destination.NONE):
            raise ValueError(f"rule {self.kind}: Destination.NONE needs a replacement_fix")
        for text in (self.note, self.replacement_fix, self.fallback_fix):
            used = {name for _, name, _, _ in string.Formatter().parse(text) if name}
            if not used <= _TEXT_FIELDS:
                raise ValueError(f"rule {self.kind}: unknown fields {sorted(used - _TEXT_FIELDS)}")
        compiled = tuple(re.compile(p, re.DOTALL) for p in self.patterns)
        object.__setattr__(self, "compiled", compiled)

    @property
    def moves_meta_objects(self) -> bool:
        """The fix materialises what is on meta (nothing else moves, nothing moves to meta)."""
        return self.movers is Movers.META

    @property
    def moves_nothing(self) -> bool:
        return self.target is Destination.NONE

    def match(self, text: str) -> MessageMatch | None:
        for pattern in self.compiled:
            m = pattern.search(text)
            if m is None:
                continue
            found = (self.reader or read_groups)(m, self)
            if found is not None:
                return found
        return None

    def text_for(self, template: str, match: MessageMatch, destination: str | None = None) -> str:
        """One of the rule's texts with the match's fields filled in."""
        if not template:
            return ""
        return template.format(
            expected=match.expected or "the expected device",
            argument=match.argument or "the argument",
            operator=match.operator or "the operation",
            devices=" and ".join(match.devices),
            destination=destination or "cpu",
        )

    def note_for(self, match: MessageMatch) -> str:
        return self.text_for(self.note, match)


def distinct(items: Iterable[str | None]) -> tuple[str, ...]:
    """The non-empty items, first occurrence first."""
    out: list[str] = []
    for item in items:
        if item and item not in out:
            out.append(item)
    return tuple(out)


def clean_operator(method: str | None) -> str | None:
    """``wrapper_CUDA__index_select`` -> ``index_select`` (codegen'd kernel wrapper names)."""
    if not method:
        return None
    m = re.match(r"^wrapper_(?:[A-Z][A-Za-z0-9]*_)?_?(.+)$", method)
    return m.group(1) if m else method


def read_groups(m: re.Match[str], rule: Rule) -> MessageMatch:
    """The default reader: each named group as the module docstring describes it."""
    groups = {k: v for k, v in m.groupdict().items() if v}
    got = normalize_device(groups["got"]) if "got" in groups else None
    want = normalize_device(groups["want"]) if "want" in groups else None
    a = normalize_device(groups["a"]) if "a" in groups else None
    b = normalize_device(groups["b"]) if "b" in groups else None
    # devices in the order the message prints them
    spans = sorted(
        (m.start(k), normalize_device(v))
        for k, v in groups.items()
        if k in ("got", "want", "a", "b")
    )
    return MessageMatch(
        rule.kind,
        distinct(d for _, d in spans) or distinct([a, b]),
        argument=groups.get("arg") or rule.argument,
        operator=clean_operator(groups.get("op")) or rule.operator,
        argument_device=got,
        expected=want,
    )
