"""torchdevice_magic: every tensor, module and optimizer in your kernel with its device and
memory; device-mismatch errors explained; safe one-click moves between devices.

    %load_ext torchdevice_magic

Public API (the pure core, usable without IPython): :func:`scan`, :func:`move`,
:func:`diagnose`, :func:`holders`, :func:`trace` (and its :class:`Tracer`), :func:`dry_run`; in an ipyparallel
client, :func:`engines_frame` (every engine's devices). Importing this
package never imports torch.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _Package(types.ModuleType):
    """This package's module type: its public functions stay functions.

    Importing a submodule binds it as an attribute of its parent package (``import
    torchdevice_magic.diagnose`` sets ``torchdevice_magic.diagnose`` to the module), which
    would shadow the function of the same name after any import order. A public function
    name is never rebound to a module; the submodule stays reachable through ``sys.modules``
    and ``from torchdevice_magic.diagnose import ...``.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FUNCTIONS and isinstance(value, types.ModuleType):
            current = self.__dict__.get(name)
            if callable(current) and not isinstance(current, types.ModuleType):
                return
        super().__setattr__(name, value)


#: Public names that are functions even where a submodule of the same name exists.
_FUNCTIONS = frozenset({"scan", "move", "diagnose", "trace", "holders", "dry_run"})
sys.modules[__name__].__class__ = _Package

# protocol and render register how an Inventory is drawn (to_json; repr and notebook HTML):
# imported here, every Inventory is drawable whichever module the user imported first
from . import protocol, render  # noqa: E402, F401
from .records import Record  # noqa: E402
from .scan import Inventory, Scanner, scan  # noqa: E402

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


def trace(cell: str, namespace: Any = None, **options: Any) -> Any:
    """Run ``cell`` in ``namespace`` under the device tracer and return its ``TraceReport``:
    the first op mixing devices, copies between devices and host reads per line (see
    :mod:`.trace`)."""
    from .trace import trace as _trace

    return _trace(cell, namespace, **options)


def engines_frame(
    client_or_view: Any = None, timeout: float | None = None, engine: int | None = None
) -> Any:
    """Every ipyparallel engine's devices as one pandas DataFrame (engine, rank, host, device,
    objects, bytes, used, total, status); with ``engine``, that engine's objects. The client is
    the one the ``%px`` magics use unless given; engines that do not answer within ``timeout``
    seconds (default 2) are named in ``status`` (see :mod:`.shell.gather`)."""
    from .shell import engines_frame as _engines_frame

    return _engines_frame(client_or_view, timeout=timeout, engine=engine)


def dry_run(cell: str, namespace: Any, **options: Any) -> Any:
    """Run ``cell`` on fake copies of the tensors, modules and optimizers it reads from
    ``namespace`` (nothing real is touched) and return its ``DryRunReport``: the device error it
    would raise (explained), its peak memory per device, the devices it would not fit on and
    where the prediction stopped (see :mod:`.dryrun`)."""
    from .dryrun import dry_run as _dry_run

    return _dry_run(cell, namespace, **options)


def __getattr__(name: str) -> Any:
    # the recorder as a context manager and its report type, without importing them up front
    if name in ("Tracer", "TraceReport"):
        import importlib

        # (``from . import trace`` would give the function of that name, not the module)
        return getattr(importlib.import_module(f"{__name__}.trace"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    from .shell import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from .shell import unload

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
    "holders",
    "engines_frame",
    "dry_run",
    "__version__",
]
