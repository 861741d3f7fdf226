"""The transaction: apply a :class:`~.jobs.Plan` all or nothing.

1. **Check memory** (nothing touched yet, :mod:`.budget`): the bytes that will land on each
   target fit in its free memory, else :class:`MoveError` with the numbers.
2. **Move in place / copy** (no name is rebound yet). Modules move with ``module.to``
   semantics (``Module._apply``) and Parameters stay the same objects; every parameter's data
   and gradient and every buffer was recorded by the plan so it can be put back. Plain tensors
   are copied (:mod:`.copying`) but not put anywhere yet. Copies from the CPU to CUDA are
   staged through pinned memory and issued with ``non_blocking=True`` (:mod:`.staging`).
3. **Synchronise** once.
4. **Commit**: put the copies back where the plan found them (names, dict keys, list items,
   attributes, optimizer state), rebuilding immutable containers. Nothing here allocates
   device memory.

If anything in 2-4 fails (out of memory, an object whose ``.to()`` raises, Ctrl-C), what was
moved in place is restored from the records, every write is undone in reverse order and the
copies are dropped: the namespace is exactly as before and the result's ``failed`` says what
failed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from itertools import compress, repeat
from operator import attrgetter
from typing import Any, Protocol

from .. import objects
from .budget import check_memory, needed_bytes
from .copying import copy_one, copy_shared, moved_in_place
from .jobs import BulkTensors, ModuleJob, Plan, PlannedItem, PutBack, storage_of
from .places import NAMESPACE, put_back
from .plan_tensors import finish_bulk
from .result import MovedItem, MoveResult, ProgressCallback, Undoable, one_line, reason
from .staging import Copier

_CDATA = attrgetter("_cdata")


class RecordUndo(Protocol):
    """Makes what undo needs from a finished move (:class:`~.undo.UndoRecord`)."""

    def __call__(
        self,
        namespace: Any,
        to_meta: bool,
        items: list[PlannedItem],
        bulk: list[BulkTensors],
        new_of: dict[int, Any],
    ) -> Undoable: ...


class _RunState:
    """What the run did so far: what rollback undoes, and what failed."""

    __slots__ = ("current", "applied", "new_of", "committed", "bulk_done")

    def __init__(self) -> None:
        self.current = ""  # the name being worked on (what a failure names)
        self.bulk_done: list[tuple[BulkTensors, int]] = []  # (bulk, names rebound so far)
        self.applied: list[ModuleJob] = []
        self.new_of: dict[int, Any] = {}  # id(old tensor) -> its copy
        self.committed: list[PutBack] = []


class Progress:
    """Calls ``callback(done_bytes, total_bytes)`` at the start, every 1%, and at the end."""

    __slots__ = ("callback", "total", "done", "next", "step")

    def __init__(self, callback: ProgressCallback, total: int) -> None:
        self.callback = callback
        self.total = total
        self.done = 0
        self.step = max(total // 100, 1)
        self.next = self.step
        callback(0, total)

    def add(self, n: int) -> None:
        self.done += n
        if self.done >= self.next and self.done < self.total:
            self.callback(self.done, self.total)
            self.next = self.done + self.step

    def finish(self) -> None:
        self.callback(self.total, self.total)


def execute(
    plan: Plan,
    progress: ProgressCallback | None,
    started: float,
    free_bytes: int | None,
    to_meta: bool,
    record_undo: RecordUndo,
) -> MoveResult:
    """Apply ``plan``: all of it, or nothing (the result's ``failed`` then says why)."""
    finish_bulk(plan)
    budget = needed_bytes(plan)
    check_memory(budget.need, free_bytes)  # raises MoveError: nothing touched yet
    total = budget.data_bytes
    state = _RunState()
    try:
        report = Progress(progress, total) if progress is not None else None
        _run(plan, state, report, budget.need)
    except BaseException as e:
        problems = _rollback(plan, state)
        if not isinstance(e, Exception):
            raise  # Ctrl-C: the namespace is back as it was; let the interrupt through
        why = reason(e)
        failed = f"{state.current}: {why}" if state.current else why
        if problems:
            failed += f" (and could not restore {', '.join(problems)})"
        return MoveResult(
            device=plan.label,
            skipped=list(plan.skipped),
            failed=one_line(failed),
            seconds=time.perf_counter() - started,
        )
    items = plan.items
    moved = [
        MovedItem(it.name, it.kind, it.nbytes, it.from_devices, it.to_device)
        for it in items
        if it.listed
    ]
    # (generator expressions, not for-loops: a loop variable would keep old tensors alive)
    moved.extend(item for bulk in plan.bulk for item in _bulk_items(plan, bulk))
    record = record_undo(plan.ns, to_meta, items, plan.bulk, state.new_of) if moved else None
    held = _old_storages(plan)
    # Drop every reference the plan holds to the old tensors, then see which storages live on.
    del items, state
    plan.items = []
    plan.groups = {}
    plan.modules = {}
    plan.param_records = {}
    plan.put_backs = []
    plan.rebuilds = {}
    plan.clear_walks()
    bulk_held = [(bulk.storages, bulk.keys) for bulk in plan.bulk]
    plan.bulk = []
    still_held = _still_held(held, bulk_held)
    return MoveResult(
        device=plan.label,
        moved=moved,
        skipped=list(plan.skipped),
        seconds=time.perf_counter() - started,
        bytes_moved=total,
        predicted_bytes=sum(budget.need.values()),
        still_held_bytes=still_held,
        left_behind=list(plan.left_behind),
        _undo=record,
    )


def _bulk_items(plan: Plan, bulk: BulkTensors) -> Iterable[MovedItem]:
    froms = {d: (plan.device_label(d),) for d in bulk.distinct}
    if len(froms) == 1:
        sources: Iterable[tuple[str, ...]] = repeat(next(iter(froms.values())))
    else:
        sources = map(froms.__getitem__, bulk.devices)
    fields = zip(
        bulk.names,
        repeat("tensor"),
        bulk.nbytes,
        sources,
        repeat(plan.device_label(bulk.dest)),
        strict=False,  # repeat() is endless
    )
    return map(tuple.__new__, repeat(MovedItem), fields)


def resolve(plan: Plan, old: Any, new_of: dict[int, Any], memo: dict[int, Any]) -> Any:
    """What ``old`` becomes: its copy (a tensor), itself rebuilt (an immutable container with
    moved children), or itself."""
    new = new_of.get(id(old))
    if new is not None:
        return new
    entry = plan.rebuilds.get(id(old))
    if entry is None:
        return old
    new = memo.get(id(old))
    if new is None:
        changes = {key: resolve(plan, child, new_of, memo) for key, child in entry.parts}
        new = memo[id(old)] = objects.rebuilt(entry.container, entry.kind, changes)
    return new


def _run(plan: Plan, state: _RunState, report: Progress | None, need: dict[Any, int]) -> None:
    copier = Copier(plan.torch)
    _move_modules(plan, state, report, copier)
    _copy_groups(plan, state, report, copier)
    _copy_bulk(plan, state, report, copier)
    _synchronise(plan, state, need)
    _commit(plan, state)
    if report is not None:
        report.finish()


def _move_modules(plan: Plan, state: _RunState, report: Progress | None, copier: Copier) -> None:
    """1. Modules and Parameters, in place."""
    for job in plan.modules.values():
        state.current = job.name
        state.applied.append(job)
        job.apply(copier)
        if report is not None:
            report.add(job.nbytes)


def _copy_groups(plan: Plan, state: _RunState, report: Progress | None, copier: Copier) -> None:
    """2. Plain tensors: copies, not yet visible; one storage copied once."""
    new_of = state.new_of
    anchors = moved_in_place(plan, new_of) if plan.modules and plan.groups else {}
    state.current = ""
    for gkey, members in plan.groups.items():
        if len(members) == 1 and gkey not in anchors:
            t = members[0].tensor
            if id(t) not in new_of:
                state.current = members[0].name
                new_of[id(t)] = copy_one(t, gkey[1], new_of, copier)
        else:
            state.current = members[0].name
            copy_shared(plan.torch, members, gkey[1], anchors.get(gkey), new_of, copier)
        if report is not None:
            report.add(members[0].storage_bytes)


def _copy_bulk(plan: Plan, state: _RunState, report: Progress | None, copier: Copier) -> None:
    """2b. Bulk tensors: one C-level map each (in 1% slices when progress is reported)."""
    to = plan.torch.Tensor.to  # looked up now: tests replace it to inject faults
    for bulk in plan.bulk:
        copies: list[Any] = []
        bulk.copies = copies
        try:
            if bulk.dest.type == "cuda":
                copies.extend(map(copier.to, bulk.tensors, repeat(bulk.dest)))
            elif report is None:
                copies.extend(map(to, bulk.tensors, repeat(bulk.dest)))
            else:
                step = max(len(bulk.tensors) // 100, 1)
                for i in range(0, len(bulk.tensors), step):
                    copies.extend(map(to, bulk.tensors[i : i + step], repeat(bulk.dest)))
                    report.add(sum(bulk.nbytes[i : i + step]))
        except BaseException:
            state.current = bulk.names[len(copies)] if len(copies) < len(bulk.names) else ""
            raise


def _synchronise(plan: Plan, state: _RunState, need: dict[Any, int]) -> None:
    """3. One synchronisation per CUDA device: copies were issued with non_blocking=True."""
    state.current = ""
    cuda = {d for d in need if d.type == "cuda"}
    cuda.update(d for d in _source_devices(plan) if d.type == "cuda")
    for bulk in plan.bulk:
        cuda.update(d for d in bulk.distinct if d.type == "cuda")
    for d in cuda:
        plan.torch.cuda.synchronize(d)


def _commit(plan: Plan, state: _RunState) -> None:
    """4. New immutable containers first, then every write; rebinding names, items,
    attributes and optimizer state cannot run out of device memory."""
    memo: dict[int, Any] = {}
    resolved: list[tuple[PutBack, Any]] = []
    for write in plan.put_backs:
        new = resolve(plan, write.old, state.new_of, memo)
        if new is not write.old:
            resolved.append((write, new))
    committed = state.committed
    for write, new in resolved:
        holder, kind, key, _old = write
        state.current = key if kind == NAMESPACE and isinstance(key, str) else ""
        committed.append(write)
        put_back(holder, kind, key, new)
    state.current = ""
    ns = plan.ns
    plain_dict = type(ns) is dict
    for bulk in plan.bulk:
        if plain_dict:
            state.bulk_done.append((bulk, len(bulk.names)))
            ns.update(zip(bulk.names, bulk.copies, strict=True))
        else:
            state.bulk_done.append((bulk, 0))
            for count, (name, new) in enumerate(zip(bulk.names, bulk.copies, strict=True), 1):
                state.current = name
                ns[name] = new
                state.bulk_done[-1] = (bulk, count)
    state.current = ""


def _source_devices(plan: Plan) -> set[Any]:
    devices: set[Any] = set()
    for item in plan.items:
        for name in item.from_devices:
            if name.startswith("cuda"):
                devices.add(plan.torch.device(name))
    return devices


def _rollback(plan: Plan, state: _RunState) -> list[str]:
    problems: list[str] = []
    for bulk, count in reversed(state.bulk_done):
        try:
            plan.ns.update(zip(bulk.names[:count], bulk.tensors[:count], strict=True))
        except Exception:
            problems.append("names")
    for holder, kind, key, old in reversed(state.committed):
        try:
            put_back(holder, kind, key, old)
        except Exception:
            problems.append(str(key) if kind == NAMESPACE else "a container")
    for job in reversed(state.applied):
        try:
            job.restore()
        except Exception:
            problems.append(job.name)
    return problems


def _old_storages(plan: Plan) -> list[tuple[Any, Any, int]]:
    """(storage, key, bytes) of everything replaced or moved in place: what may stay
    allocated on the old device."""
    out: dict[Any, Any] = {}
    for (key, _want), members in plan.groups.items():
        s = members[0].storage
        if s is not None:
            out[key] = s
    for job in plan.modules.values():
        for record in job.params:
            want = job.target_of(record.param)
            for t in (record.data, record.grad_data):
                if t is not None and t.device != want:  # (what was already there stayed)
                    key, _n, s = storage_of(t)
                    if s is not None:
                        out.setdefault(key, s)
        for buffer in job.buffers:
            if buffer.buffer.device != job.target_of(buffer.buffer):
                s = storage_of(buffer.buffer)[2]
                if s is not None:
                    out.setdefault(buffer.storage_key, s)
    return [(s, key, int(s.nbytes())) for key, s in out.items()]


def _still_held(
    held: list[tuple[Any, Any, int]], bulk_held: list[tuple[list[Any], list[Any]]]
) -> int:
    """Bytes of old storages that something other than this move still holds.

    Called once the move dropped every tensor it held, keeping only the storages (``held``
    triples of storage, key, bytes; for bulk tensors ``bulk_held`` pairs of storage and key
    lists): a storage whose use count is above one (ours) is still referenced elsewhere
    (IPython's ``Out``, an attribute, a ``state_dict()`` alias, a view) and its memory stays
    allocated. Nothing here takes a weak reference to a Parameter (torch refuses to swap
    tensors that have them).
    """
    import torch

    use_count = getattr(torch._C, "_storage_Use_Count", None)
    try:
        if use_count is None:
            return 0
        # (the count is asked by StorageImpl address; the storage objects held keep it alive)
        total = sum(n for s, _key, n in held if use_count(s._cdata) > 1)
        for storages, _keys in bulk_held:
            shared = map((1).__lt__, map(use_count, map(_CDATA, storages)))
            total += sum(map(torch.UntypedStorage.nbytes, compress(storages, shared)))
        return total
    except Exception:
        return 0
    finally:
        held.clear()
        bulk_held.clear()
