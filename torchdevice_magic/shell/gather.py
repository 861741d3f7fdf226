"""One view of every ipyparallel engine (``%devices --engines``, :func:`engines_frame`).

The client asks each engine for its summary over the ipyparallel connection it already has
(one ``apply`` per engine, each through a view of its own): :func:`engine_report` runs on the
engine and returns plain data (:func:`..viewmodel.engines.engine_summary`). The gather never
waits longer than its timeout: a busy engine (a long ``%%px --noblock`` cell), a stopped or a
dead one is named as not answering and its request is aborted. The user's own results stay
as they were: the gather's message ids are taken out of ``client.history`` as soon as they are
sent, so ``rc.history[-1]`` is still the user's last request (ipyparallel itself purges a
resolved request's entries from ``client.results`` and ``client.metadata``; an aborted one's
"aborted" answer resolves it the same way).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from ..viewmodel.engines import (
    EngineAnswer,
    Gathered,
    accelerator_totals,
    engine_summary,
    object_rows,
)
from .hooks import get_session

#: seconds a gather waits for the engines before it shows what answered
DEFAULT_TIMEOUT = 2.0


def engine_report(expand: bool = False) -> dict[str, Any]:
    """Run on an engine: its summary (and with ``expand`` its objects), plain data only."""
    from IPython import get_ipython

    shell = get_ipython()
    session = get_session(shell) if shell is not None else None
    note = ""
    if session is not None:
        inventory = session.app.rescan()
    else:
        from ..scan import scan

        inventory = scan(shell.user_ns if shell is not None else {})
        note = "the extension is not loaded on this engine"
    records = inventory.records
    totals = inventory.device_totals()
    totals += accelerator_totals(total.device for total in totals)
    summary = engine_summary(
        records,
        totals,
        rank=process_rank(),
        host=socket.gethostname(),
        pid=os.getpid(),
        note=note,
    )
    if expand:
        summary["rows"] = object_rows(records)
    return summary


def process_rank() -> int | None:
    """This process's rank: torch.distributed's when a group is up (torch is never imported
    here), else the launcher's environment (torchrun, MPI), else None."""
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            return int(distributed.get_rank())
    except Exception:  # a half-torn-down group has no rank to report
        pass
    for variable in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        value = os.environ.get(variable, "")
        if value.isdigit():
            return int(value)
    return None


def find_client(client_or_view: Any = None) -> tuple[Any, list[int]]:
    """The ipyparallel client and the engine ids to ask: from a Client (every engine), a view
    (its targets) or, when None, the view the ``%px`` magics use in this shell."""
    if client_or_view is None:
        client_or_view = _px_view()
    client = getattr(client_or_view, "client", None)
    if client is None:  # a Client
        return client_or_view, list(client_or_view.ids)
    targets = client_or_view.targets
    ids = list(client.ids)
    if targets is None or targets == "all":
        return client, ids
    if isinstance(targets, int):
        return client, [targets]
    if isinstance(targets, slice):
        return client, ids[targets]
    return client, [int(t) for t in targets]


#: how a user of this kernel connects a client (the first client of a session becomes the
#: one ``%px`` uses; a later one only through ``rc.activate()``)
CONNECT_HINT = (
    "import ipyparallel as ipp; rc = ipp.Cluster(n=2).start_and_connect_sync() starts two "
    "engines and connects to them (rc = ipp.Client() connects to a cluster already running)"
)


def _px_view() -> Any:
    from IPython import get_ipython

    shell = get_ipython()
    px = shell.magics_manager.magics["line"].get("px") if shell is not None else None
    view = getattr(getattr(px, "__self__", None), "view", None)
    if view is None:
        raise LookupError(f"no ipyparallel client in this session: {CONNECT_HINT}")
    return view


def engines_reachable() -> dict[str, Any]:
    """The sidebar's ``engines_reachable`` status: ``available`` when this kernel has an open
    ipyparallel client for ``%px`` (the client a gather asks). Cheap enough for every cell: a
    kernel that never imported ipyparallel answers from ``sys.modules`` alone."""
    if "ipyparallel" not in sys.modules:
        return {"available": False}
    try:
        view = _px_view()
    except LookupError:
        return {"available": False}
    # ipyparallel has no public "closed" flag; a closed client refuses every request
    return {"available": not getattr(view.client, "_closed", False)}


def gather(
    client_or_view: Any = None, *, timeout: float = DEFAULT_TIMEOUT, expand: Iterable[int] = ()
) -> Gathered:
    """Every engine's summary (and the objects of the engines in ``expand``), waiting at most
    ``timeout`` seconds; the engines that did not answer are in ``Gathered.missing``."""
    client, targets = find_client(client_or_view)
    expanded = set(expand)
    registered = set(client.ids)
    # a view's engine that has since stopped (or an id never registered) is named, not asked
    unknown = sorted((expanded | set(targets)) - registered)
    started = time.perf_counter()
    pending = {}
    for engine in targets:
        if engine not in registered:
            continue
        view = client.direct_view(engine)
        try:
            result = view.apply_async(engine_report, engine in expanded)
        except RuntimeError as error:  # ipyparallel's "cannot be used after ... closed"
            raise LookupError(
                f"the ipyparallel client cannot reach its engines ({error}): connect a new one "
                "and give it to %px: rc = ipp.Client() (or rc = ipp.Cluster(n=2)"
                ".start_and_connect_sync()), then rc.activate()"
            ) from None
        _forget_history(client, result.msg_ids)
        pending[engine] = result
    deadline = started + timeout
    for result in pending.values():
        result.wait(max(deadline - time.perf_counter(), 0.0))
    answers = []
    missing = {engine: "not registered (stopped, dead or never started)" for engine in unknown}
    own = {msg_id for result in pending.values() for msg_id in result.msg_ids}
    busy = _busy_engines(client, own) if any(not r.ready() for r in pending.values()) else {}
    for engine, result in pending.items():
        if not result.ready():
            if busy.get(engine):
                why = f"busy: {busy[engine]} of your requests not finished yet"
            else:
                why = "nothing of yours is running there: stopped, hung or dead?"
            missing[engine] = f"no answer within {timeout:g} s ({why})"
            _abort_quietly(client, result, engine)
            continue
        try:
            summary = dict(result.get(0))
        except Exception as error:  # the engine answered with an error: say which
            missing[engine] = f"failed: {type(error).__name__}: {error}"
        else:
            rows = summary.pop("rows", None)
            answers.append(EngineAnswer(engine, summary, rows))
    seconds = time.perf_counter() - started
    return Gathered(answers, missing, timeout=timeout, seconds=seconds)


def engines_frame(
    client_or_view: Any = None,
    timeout: float | None = None,
    engine: int | None = None,
) -> Any:
    """A pandas DataFrame of every engine x device (engine, rank, host, device, objects,
    bytes, used, total, status); with ``engine``, that engine's objects instead. Engines that
    did not answer within ``timeout`` seconds (default :data:`DEFAULT_TIMEOUT`) are rows with
    their reason in ``status`` (and in ``frame.attrs["missing"]``)."""
    expand = () if engine is None else (engine,)
    wait = DEFAULT_TIMEOUT if timeout is None else timeout
    try:
        gathered = gather(client_or_view, timeout=wait, expand=expand)
    except LookupError as error:
        if client_or_view is not None:
            raise
        raise LookupError(f"{error}; or pass a client: engines_frame(rc)") from None
    return gathered.to_frame(objects=engine is not None)


def engines_handler(channel: Any) -> Callable[[Any], tuple[bool, str, None]]:
    """The sidebar's ``gather_engines`` request (a :class:`..protocol.Request`): gather, and
    send every open sidebar an ``engines`` message; ``available`` is false without a client."""

    def handle(request: Any) -> tuple[bool, str, None]:
        expand = (request.fields or {}).get("expand")
        try:
            gathered = gather(timeout=DEFAULT_TIMEOUT, expand=() if expand is None else (expand,))
        except LookupError as error:
            channel.broadcast(
                "engines", request_id=request.request_id, available=False, message=str(error),
                engines=[], missing=[], seconds=0.0, expanded=None,
            )  # fmt: skip
            return True, "", None
        channel.broadcast(
            "engines", request_id=request.request_id, available=True,
            message=gathered.missing_line(), expanded=expand, **gathered.to_wire(),
        )  # fmt: skip
        return True, "", None

    return handle


def _busy_engines(client: Any, own: set[str]) -> dict[int, int]:
    """How many of the user's requests each engine has not finished (an engine is known for a
    request once it has started it and said so)."""
    counts: dict[int, int] = {}
    for msg_id in list(client.outstanding):
        if msg_id in own:
            continue
        metadata = client.metadata.get(msg_id)  # .get: the defaultdict would add an entry
        engine = metadata.get("engine_id") if metadata is not None else None
        if engine is not None:
            counts[engine] = counts.get(engine, 0) + 1
    return counts


def _forget_history(client: Any, msg_ids: Iterable[str]) -> None:
    """Take the gather's requests out of the client's history: the user's last request stays
    ``rc.history[-1]``."""
    for msg_id in msg_ids:
        with contextlib.suppress(ValueError):
            client.history.remove(msg_id)


def _abort_quietly(client: Any, result: Any, engine: int) -> None:
    """Ask a busy engine to skip the gather's queued request (it answers "aborted", which
    resolves the request); an engine that is gone is not asked."""
    if engine not in client.ids:
        return
    # a closing connection refuses: the late answer, if any, resolves the request all the same
    with contextlib.suppress(Exception):
        client.abort(result.msg_ids, targets=engine, block=False)


__all__ = [
    "DEFAULT_TIMEOUT",
    "engine_report",
    "engines_frame",
    "engines_handler",
    "engines_reachable",
    "find_client",
    "gather",
]
