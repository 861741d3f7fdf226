"""Explain device-mismatch errors: what the message says, who is where, and the one-line fix.

Pure core: the standard library only; torch is used only when the user already imported it
(an error that mentions tensors cannot have happened otherwise), and objects are inspected
only through ``torchdevice_magic.scan()``.

- :mod:`.rules`      one :class:`~.rules.Rule` per error family, in one table (:data:`RULES`)
- :mod:`.cells`      a cell parsed once (``transform_cell`` + ``ast``) for every consumer
- :mod:`.core`       :func:`diagnose`: the matching rule, the culprits, the safe fix
- :mod:`.candidates` what an error could involve and what the scan says about each
- :mod:`.collect`    where candidates are found (cell, user frames, attributes), their names
- :mod:`.sources`    the user's code read without running it: sources, frames' names, lines
- :mod:`.fixes`      where to, and one statement per mover; notes, the one-click move
- :mod:`.explain`    :class:`Diagnosis` and its text/HTML rendering
- :mod:`.frames`     user frames vs library frames; short tracebacks
"""

from __future__ import annotations

from .cells import Cell, parse_cell
from .core import diagnose, find_match
from .explain import Culprit, Diagnosis, FixLine, MoveAction
from .frames import collapse_library_frames, is_user_filename
from .rules import RULES, MessageMatch, Rule, dtype_of, normalize_device, parse_message

__all__ = [
    "RULES",
    "Cell",
    "Culprit",
    "Diagnosis",
    "FixLine",
    "MessageMatch",
    "MoveAction",
    "Rule",
    "collapse_library_frames",
    "diagnose",
    "dtype_of",
    "find_match",
    "is_user_filename",
    "normalize_device",
    "parse_cell",
    "parse_message",
]
