"""torchdevice_magic: every tensor, module and optimizer in your kernel with its device and
memory; device-mismatch errors explained; safe one-click moves between devices.

    %load_ext torchdevice_magic

Public API (the pure core, usable without IPython): :func:`scan`, :func:`move`,
:func:`diagnose`, :func:`trace`. Importing this package never imports torch.
"""

from __future__ import annotations

from typing import Any

from .records import Record
from .scanner import Inventory, Scanner, scan

# Imported here, not lazily in a wrapper: importing the submodule later would rebind the
# package's ``trace`` attribute to the module. (trace.py imports no torch at import time.)
from .trace import Tracer, TraceReport, trace

__version__ = "0.1.0"


def move(namespace: Any, device: str, names: Any = None, **options: Any) -> Any:
    """Move objects of ``namespace`` to ``device``, all or nothing (see :mod:`.moves`)."""
    from .moves import move as _move

    return _move(namespace, device, names, **options)


def diagnose(
    exc: BaseException, namespace: Any = None, cell: str | None = None, **options: Any
) -> Any:
    """Explain a device-mismatch error, or return None for other errors (see :mod:`.diagnose`)."""
    from .diagnose import diagnose as _diagnose

    return _diagnose(exc, namespace, cell, **options)


def load_ipython_extension(ipython: Any) -> None:
    from .session import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .session import unload

    unload(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "torchdevice-magic"}]


__all__ = [
    "Inventory",
    "Record",
    "Scanner",
    "TraceReport",
    "Tracer",
    "scan",
    "move",
    "diagnose",
    "trace",
    "__version__",
]
