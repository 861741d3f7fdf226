"""torchdevice_magic: every tensor, module and optimizer in your kernel with its device and
memory; device-mismatch errors explained; safe one-click moves between devices.

    %load_ext torchdevice_magic

Public API (the pure core, usable without IPython): :func:`scan`, :func:`move`,
:func:`diagnose`, :func:`holders`. Importing this package never imports torch.
"""

from __future__ import annotations

from typing import Any

from .records import Record
from .scanner import Inventory, Scanner, scan

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


def holders(namespace: Any, device: str | None = None, **options: Any) -> Any:
    """What keeps tensor memory alive outside the named variables of ``namespace``: a list of
    :class:`~torchdevice_magic.memory.Holder` (``.where``, ``.device``, ``.bytes``,
    ``.release()``), biggest first (see :mod:`.memory`)."""
    from .memory import holders as _holders

    return _holders(namespace, device, **options)


def load_ipython_extension(ipython: Any) -> None:
    from .session import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .session import unload

    unload(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "torchdevice-magic"}]


__all__ = ["Inventory", "Record", "Scanner", "scan", "move", "diagnose", "holders", "__version__"]
