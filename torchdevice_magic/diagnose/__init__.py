"""Explain device-mismatch errors: what the message says, who is where, and the one-line fix.

Pure core: the standard library only; torch is used only when the user already imported it
(an error that mentions tensors cannot have happened otherwise), and objects are inspected
only through ``torchdevice_magic.scan()``.

Modules in the order data flows through them:

- :mod:`.vocabulary` devices and dtypes as PyTorch prints them, one spelling each
- :mod:`.schema`     what a :class:`Rule` is (every field explained and validated) and the
  :class:`MessageMatch` it reads; :mod:`.readers` the readers the table names
- :mod:`.rules`      the table: one rule per error family (:data:`RULES`), pure data
- :mod:`.messages`   which rule a message (or an exception chain) belongs to
- :mod:`.cells`      a cell parsed once (``transform_cell`` + ``ast``) for every consumer
- :mod:`.wrappers`   a cell run under a magic (``%%time``, ``%timeit``, ``%%capture``, ``%prun``,
  ``%run``): the user's own code, its failing line in the user's numbering, its namespace
- :mod:`.frames`     user frames vs library frames; short tracebacks
- :mod:`.sources`    the user's code read without running it: sources, frames' names, lines
- :mod:`.candidates` what an error could involve and what the scan says about each
- :mod:`.collect`    where candidates are found (cell, user frames, attributes), their names
- :mod:`.policy`     each rule's destination and movers mapped to what decides them
- :mod:`.explain`    :class:`Diagnosis` and its text/HTML rendering
- :mod:`.fixes`      one statement per mover; notes, the one-click move
- :mod:`.core`       :func:`diagnose`: the steps above in order
- :mod:`.remote`     diagnoses ipyparallel engines made, read back in the client from the
  errors they came in (:func:`engine_diagnoses`), equal ones merged
"""

from __future__ import annotations

from .cells import Cell, parse_cell
from .core import diagnose
from .explain import Culprit, Diagnosis, FixLine, MoveAction
from .frames import collapse_library_frames, is_user_filename
from .messages import find_match, parse_message
from .remote import ENGINE_INFO_KEY, EngineDiagnoses, EngineFinding, engine_diagnoses, failing_line
from .rules import RULES
from .schema import Destination, MessageMatch, Movers, Rule
from .vocabulary import dtype_of, normalize_device
from .wrappers import (
    WRAPPERS,
    CellRun,
    ShownErrors,
    Wrapper,
    traceback_cell,
    unwrap_run,
    user_code,
    wrapped_cell,
)

__all__ = [
    "ENGINE_INFO_KEY",
    "RULES",
    "WRAPPERS",
    "Cell",
    "CellRun",
    "Culprit",
    "Destination",
    "Diagnosis",
    "EngineDiagnoses",
    "EngineFinding",
    "FixLine",
    "MessageMatch",
    "MoveAction",
    "Movers",
    "Rule",
    "ShownErrors",
    "Wrapper",
    "collapse_library_frames",
    "diagnose",
    "dtype_of",
    "engine_diagnoses",
    "failing_line",
    "find_match",
    "is_user_filename",
    "normalize_device",
    "parse_cell",
    "parse_message",
    "traceback_cell",
    "unwrap_run",
    "user_code",
    "wrapped_cell",
]
