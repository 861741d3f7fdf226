"""The extension on an ipyparallel engine: what differs from a notebook's own kernel.

An engine (``ipcluster``, ``ipp.Cluster``) runs the ordinary extension: the same hooks and the
same diagnosis. Three things differ, and only here:

- **no widgets**: an engine's display data reaches the client as a message, where no frontend
  draws a widget an engine made (the fix button arrived as the text ``HBox(children=...``), so
  :func:`widgets_render` is False there: the fix is text, ``%devices`` a text/HTML table;
- **the engine is named** in every diagnosis (its id; the rank and host once a
  ``torch.distributed`` process group is up), since the client shows many engines' outputs;
- **the diagnosis travels with the error reply**: :class:`EngineReplies` puts the last
  diagnosis made while a request ran (an ``execute`` cell or an ``apply``/``map`` call) into
  the ``engine_info`` of the error reply the engine sends anyway. ipyparallel keeps
  ``engine_info`` on the client's ``RemoteError`` (and in a ``CompositeError``'s list), where
  :func:`torchdevice_magic.diagnose.engine_diagnoses` reads it: plain data, computed here where
  the failing frames live, never parsed back from text.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import sys
from dataclasses import dataclass
from typing import Any

from ..diagnose import ENGINE_INFO_KEY, Diagnosis, failing_line

log = logging.getLogger("torchdevice_magic")


def engine_kernel(shell: Any) -> Any:
    """The shell's kernel where it is an ipyparallel engine's kernel, else None. ipyparallel is
    read from ``sys.modules``: an engine has imported it, and nothing else needs it imported."""
    kernel = getattr(shell, "kernel", None)
    module = sys.modules.get("ipyparallel.engine.kernel")
    engine_class = getattr(module, "IPythonParallelKernel", None)
    if kernel is None or engine_class is None:
        return None
    return kernel if isinstance(kernel, engine_class) else None


def widgets_render(shell: Any) -> bool:
    """Whether a widget shown from ``shell`` can be drawn: a Jupyter frontend is connected (a
    kernel, not a terminal or an in-process shell), and it is not an ipyparallel engine."""
    return getattr(shell, "kernel", None) is not None and engine_kernel(shell) is None


@dataclass(frozen=True)
class EngineIdentity:
    """Which engine (and, with a process group up, which rank on which host) a result is from."""

    #: the engine's id in its cluster (``rc.ids``)
    engine_id: int
    #: the ``torch.distributed`` rank and world size, where a process group is initialised
    rank: int | None = None
    world_size: int | None = None
    #: the machine's host name, where a process group is initialised (ranks span machines)
    host: str | None = None

    def label(self) -> str:
        """``engine 0``, or ``engine 0 (rank 1 of 2 on node7)``."""
        if self.rank is None:
            return f"engine {self.engine_id}"
        return f"engine {self.engine_id} (rank {self.rank} of {self.world_size} on {self.host})"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def process_group() -> tuple[int, int, str] | None:
    """(rank, world size, host) of this process's ``torch.distributed`` group; None where torch
    or its distributed package was never imported or no group is initialised."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        return int(dist.get_rank()), int(dist.get_world_size()), socket.gethostname()
    except Exception:
        return None


def identity_of(kernel: Any) -> EngineIdentity:
    group = process_group()
    engine_id = int(getattr(kernel, "engine_id", -1))
    if group is None:
        return EngineIdentity(engine_id)
    rank, world_size, host = group
    return EngineIdentity(engine_id, rank, world_size, host)


class EngineReplies:
    """Names the engine in each diagnosis and puts the last one made during a request into that
    request's error reply (``engine_info[ENGINE_INFO_KEY]``).

    It wraps the engine kernel's ``init_metadata`` (called when any request starts: what is
    kept is forgotten) and ``finish_metadata`` (called with the reply's content just before it
    is sent, for ``execute_request`` and ``apply_request`` alike): the two places ipyparallel
    itself extends ipykernel's replies. :meth:`remove` puts both back.

    A cell's error reaches the extension's exception handler (IPython's ``CustomTB``) from
    ``run_code``; an ``apply``'s error does not: the engine calls ``shell.showtraceback()``
    itself. While an ``apply_request`` runs, that call is sent to the same handler, so a
    function's error is explained (and its traceback shortened) as a cell's is."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        #: what goes into the current request's error reply, if it fails
        self.pending: dict[str, Any] | None = None
        self._init_metadata = kernel.init_metadata
        self._finish_metadata = kernel.finish_metadata

    def install(self) -> None:
        # instance attributes: the kernel's class (and any other kernel) is left alone
        self.kernel.init_metadata = self.init_metadata
        self.kernel.finish_metadata = self.finish_metadata

    def remove(self) -> None:
        self._restore_showtraceback()
        for name in ("init_metadata", "finish_metadata"):
            if self.kernel.__dict__.get(name) == getattr(self, name):
                del self.kernel.__dict__[name]

    def named(self, diagnosis: Diagnosis) -> Diagnosis:
        """``diagnosis`` naming this engine; kept for the reply of the request that failed."""
        identity = identity_of(self.kernel)
        named = dataclasses.replace(diagnosis, origin=identity.label())
        error = sys.exc_info()[1]  # shown from inside the shell's ``except`` around the code
        self.pending = {
            "diagnosis": named.to_dict(),
            "engine": identity.to_dict(),
            "line": failing_line(error) if error is not None else None,
        }
        return named

    def init_metadata(self, parent: Any) -> Any:
        self.pending = None
        try:
            if parent["header"]["msg_type"] == "apply_request":
                self.kernel.shell.showtraceback = self.show_apply_error
        except Exception:
            log.debug("torchdevice_magic: apply errors are not explained", exc_info=True)
        return self._init_metadata(parent)

    def show_apply_error(self, exc_tuple: Any = None, *args: Any, **kwargs: Any) -> Any:
        """The engine shows an ``apply``'s error: through the extension's handler, as a cell's."""
        shell = self.kernel.shell
        self._restore_showtraceback()  # the handler may call IPython's own for other errors
        etype, value, tb = exc_tuple if exc_tuple is not None else sys.exc_info()
        custom = getattr(shell, "custom_exceptions", ())
        if custom and isinstance(value, custom):
            return shell.CustomTB(etype, value, tb)
        return shell.showtraceback(exc_tuple, *args, **kwargs)

    def _restore_showtraceback(self) -> None:
        shell = getattr(self.kernel, "shell", None)
        if shell is not None and shell.__dict__.get("showtraceback") == self.show_apply_error:
            del shell.__dict__["showtraceback"]

    def finish_metadata(self, parent: Any, metadata: Any, reply_content: Any) -> Any:
        self._restore_showtraceback()
        metadata = self._finish_metadata(parent, metadata, reply_content)
        pending, self.pending = self.pending, None
        try:
            if pending is not None and reply_content.get("status") == "error":
                reply_content.setdefault("engine_info", {})[ENGINE_INFO_KEY] = pending
        except Exception:  # the reply must go out whatever happens here
            log.debug("torchdevice_magic: no diagnosis added to the reply", exc_info=True)
        return metadata


def engine_replies(shell: Any) -> EngineReplies | None:
    """The installed :class:`EngineReplies` of ``shell``'s engine kernel (None elsewhere)."""
    kernel = engine_kernel(shell)
    if kernel is None:
        return None
    replies = EngineReplies(kernel)
    replies.install()
    return replies


__all__ = [
    "EngineIdentity",
    "EngineReplies",
    "engine_kernel",
    "engine_replies",
    "identity_of",
    "process_group",
    "widgets_render",
]
