"""THE rule for IPython's own names: ``In``, ``Out``, ``_``, ``_3``, ``_i3``, ``__x``...

IPython puts its bookkeeping into the user's namespace. These names are never user objects: the
scan does not list them (``Out`` is looked at only when the caller asks for the output
history), a move never moves through them, and the memory views never name them as holders.
Every part of the package asks this module, so they all agree on what "IPython's own" means.
"""

from __future__ import annotations

import re

#: IPython's own bookkeeping: never user objects (``Out`` is looked at only with include_hidden).
IPYTHON_NAMES = frozenset(
    {"In", "Out", "_", "__", "___", "_i", "_ii", "_iii", "_ih", "_oh", "_dh", "exit", "quit"}
    | {"get_ipython", "_exit_code"}
)
#: the names IPython binds to new objects after every cell it stores in its history (the input
#: history always, the output history when the cell has a result): a scan expects them to change
REBOUND_EVERY_CELL = ("_i", "_ii", "_iii", "_", "__", "___")
_IPYTHON_NUMBERED = re.compile(r"_i?\d+\Z")


def is_ipython_bookkeeping(name: str) -> bool:
    if not name.startswith("_"):
        return name in IPYTHON_NAMES
    return (
        name in IPYTHON_NAMES or name.startswith("__") or _IPYTHON_NUMBERED.match(name) is not None
    )
