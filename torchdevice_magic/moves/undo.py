"""Undo: what a move needs to be taken back, and taking it back.

A move leaves an :class:`UndoRecord`: for each name it changed, where everything came from
(a device per tensor, per module parameter, per optimizer state entry, per tensor found in a
container or an attribute, by path). It never holds a tensor, a container or a Parameter
(modules and optimizers weakly): undo information keeps no memory alive.

Undo builds its own plan from that record — each object to the device it came from — and
hands it to the same transaction, so an undo is all or nothing too. Things that changed since
the move are handled as users expect:

* a name rebound since the move, or a tensor replaced in its container, is left as it is;
* optimizer state created after the move (the first ``opt.step()`` on the new device creates
  Adam's moments there) follows its parameters back, like the state that was moved; every
  optimizer bound to a name whose parameters go back follows too, so ``opt.step()`` works.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import MutableMapping
from typing import Any

from ..units import device_sort_key
from .jobs import BulkTensors, Plan, PlannedItem, Refused
from .plan_modules import SavedByAGraph, add_module
from .plan_optimizers import add_followers, add_optimizer
from .plan_tensors import queue_bulk
from .planner import add
from .result import MoveError, MoveResult, ProgressCallback, reason
from .transaction import execute


class UndoEntry:
    __slots__ = ("name", "kind", "ref", "oid", "layout", "top")

    def __init__(self, name: str, kind: str, obj: Any, layout: Any, top: bool) -> None:
        self.name = name
        self.kind = kind
        # Modules and optimizers are weakly referenced, so undo information never keeps a model
        # alive. Tensors and Parameters are checked by id: a weak reference would stop torch
        # from swapping them later (swap_tensors refuses weakly referenced tensors).
        self.ref = weakref.ref(obj) if kind in ("module", "optimizer") else None
        self.oid = id(obj)
        self.layout = layout
        self.top = top  # bound to ``name`` (else found inside a container: only its ref counts)

    def current(self, namespace: MutableMapping[str, Any]) -> Any:
        """The object if it is still what the move left there, else None."""
        if not self.top:
            return self.ref() if self.ref is not None else None
        try:
            obj = namespace[self.name]
        except KeyError:
            return None
        if self.ref is not None:
            return obj if self.ref() is obj else None
        return obj if id(obj) == self.oid else None


class UndoRecord:
    """What undo needs: names, the objects the move left there (weakly or by id), and the
    devices everything came from."""

    def __init__(
        self,
        namespace: MutableMapping[str, Any],
        to_meta: bool,
        items: list[PlannedItem],
        bulk: list[BulkTensors],
        new_of: dict[int, Any],
    ) -> None:
        self.namespace = namespace
        self.to_meta = to_meta
        self.used = False
        self.entries: list[UndoEntry] = []
        for item in items:
            kind = item.kind
            if kind in ("container", "object"):
                obj = namespace.get(item.name, item.obj)
                # path -> (id of the tensor the move put there, the device it came from)
                layout = {
                    path: (id(new_of.get(id(old), old)), dev) for path, old, dev in item.leaves
                }
            elif kind == "tensor":
                obj = namespace.get(item.name, item.obj)
                layout = item.layout
            else:
                obj, layout = item.obj, item.layout
            # bound to its name (else found inside a container, as a follower or a part)
            top = item.listed and (
                kind not in ("module", "optimizer") or namespace.get(item.name) is obj
            )
            self.entries.append(UndoEntry(item.name, kind, obj, layout, top))
        # bulk tensors: (names, ids of the new tensors, devices they came from)
        self.bulk = [(b.names, list(map(id, b.copies)), b.devices) for b in bulk]

    def take_back(self, progress: ProgressCallback | None) -> MoveResult:
        """Undo the move this record was made by (:meth:`MoveResult.undo` calls this)."""
        return undo(self, progress)


def undo(record: UndoRecord, progress: ProgressCallback | None) -> MoveResult:
    started = time.perf_counter()
    # planned in a function of its own: its loop variables (the last object it looked at)
    # are gone before the transaction asks which old storages something still holds
    plan = _plan_back(record)
    try:
        return execute(plan, progress, started, None, to_meta=False, record_undo=UndoRecord)
    finally:
        plan.T.forget_types()


def _plan_back(record: UndoRecord) -> Plan:
    """The plan that puts every recorded object back where the move found it."""
    plan = Plan(record.namespace, "", explicit=False)
    ns = record.namespace
    targets: set[str] = set()
    optimizers: list[tuple[UndoEntry, Any]] = []
    for entry in record.entries:
        obj = entry.current(ns)
        if obj is None:
            if entry.top:
                plan.skipped.append(
                    (entry.name, f"{entry.name} was rebound since the move; left as it is")
                )
            continue
        layout = entry.layout
        if entry.kind in ("tensor", "parameter"):
            targets.add(str(layout))
            add(plan, entry.name, obj, layout)
        elif entry.kind == "module":
            devices = set(layout.values())
            targets.update(str(d) for d in devices)
            one = next(iter(devices)) if len(devices) == 1 else None
            _guarded(plan, entry, add_module, obj, one, None if one else layout)
        elif entry.kind in ("container", "object"):
            targets.update(str(dev) for _oid, dev in layout.values())
            add(plan, entry.name, obj, None, layout)
        else:
            optimizers.append((entry, obj))
    tensor_type = plan.types[0]
    missing = object()
    for names, ids, bulk_devices in record.bulk:
        targets.update(str(d) for d in set(bulk_devices))
        for name, oid, dev in zip(names, ids, bulk_devices, strict=True):
            obj = ns.get(name, missing)
            if id(obj) != oid:
                plan.skipped.append((name, f"{name} was rebound since the move; left as it is"))
            elif type(obj) is tensor_type:
                queue_bulk(plan, name, obj, dev)
            else:  # a device's own tensor subclass (an out-of-tree backend's wrapper)
                add(plan, name, obj, dev)
    # Last: optimizer state follows the parameters planned above (state created after the
    # move has no recorded device and follows its parameter like the rest).
    for entry, obj in optimizers:
        targets.update(str(d) for d in entry.layout.values())
        _guarded(plan, entry, add_optimizer, obj, entry.layout)
    add_followers(plan)
    plan.label = ", ".join(sorted(targets, key=device_sort_key)) or "original devices"
    return plan


def _guarded(plan: Plan, entry: UndoEntry, plan_it: Any, *args: Any) -> None:
    """Plan one module or optimizer back; one that cannot be planned is skipped with why."""
    try:
        plan_it(plan, entry.name, *args, listed=entry.top)
    except SavedByAGraph as e:
        raise MoveError(f"nothing was undone: {e}") from None
    except Refused as e:
        plan.skipped.append((entry.name, str(e)))
    except Exception as e:
        plan.skipped.append((entry.name, f"{entry.name} could not be planned: {reason(e)}"))
