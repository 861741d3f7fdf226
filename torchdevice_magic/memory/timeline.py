"""Memory per cell: :class:`Timeline` records, after each cell, the bytes held per device
(named + holders, each storage once), the change, the names that grew or shrank, allocator
figures, and notices holders that keep growing (a leak), reusing the scan the hook already
made; :func:`device_figures` and :func:`reset_peaks` read and reset the accelerator's figures
only when it is already initialised.

Pure core: no IPython, no ipywidgets, torch never imported here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..names import is_ipython_bookkeeping
from ..scan import Inventory
from ..units import device_sort_key, format_bytes
from .base import (
    _NOTHING_TO_HOLD,
    _RELEASES,
    ErrorGetter,
    Keys,
    StorageKey,
    _by_device,
    _root_keys,
    _Source,
)
from .graphs import KeyMemo
from .holding import _maybe_orphaned, _named_keys_without_optimizers
from .leaks import TrackedHolder
from .sources import _last_errors, _name_sources, _out_sources, _traceback_source

#: Names changed since the last cell above which the timeline counts the whole namespace again
#: (column-wise, ~40 ms at 100,000 names) instead of updating name by name
RECOUNT_ABOVE = 2000

#: Cells per device the sidebar's memory chart draws (``MAX_CELLS`` in
#: ``labextension/src/timeline.ts``): the timeline message sends no more
CHART_CELLS = 40


@dataclass
class CellMemory:
    """One row of the timeline: a cell on a device, or a move or undo made after the cell
    ``cell`` (``action`` says which: ``"move to cuda:0"``, ``"undo"``; "" for a cell's row)."""

    cell: int
    device: str
    bytes: int
    delta: int
    peak: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    changes: tuple[tuple[str, int], ...] = ()  # (name or holder, bytes it grew or shrank)
    note: str = ""
    #: of ``bytes``, what holders outside the named variables keep (the last error's
    #: traceback, Out[...]...): ``bytes - outside`` is what the device table's total shows
    outside: int = 0
    action: str = ""

    @property
    def grew(self) -> str:
        return ", ".join(f"{n} {_signed(b)}" for n, b in self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "device": self.device,
            "bytes": self.bytes,
            "delta": self.delta,
            "peak": self.peak,
            "allocated": self.allocated,
            "reserved": self.reserved,
            "grew": self.grew,
            "changes": [list(c) for c in self.changes],
            "note": self.note,
            "outside": self.outside,
            "action": self.action,
        }


def _signed(nbytes: int) -> str:
    return ("+" if nbytes >= 0 else "-") + format_bytes(abs(nbytes))


def _optimizer_names(namespace: Any) -> list[str]:
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    optimizer = torch.optim.Optimizer
    return [n for n, v in list(namespace.items()) if isinstance(v, optimizer)]


class Timeline:
    """Per-cell memory of one session. :meth:`record` takes the inventory the post-execute
    hook already made (no second walk); holders are re-measured only for what the cell
    touched (its names, a new ``Out`` entry, a new error), so a plain cell costs a dict merge."""

    def __init__(self, limit: int = 2000, last_error: ErrorGetter | None = None) -> None:
        #: the last failing cell's exception as the shell keeps it (besides sys.last_value)
        self.last_error = last_error
        self.rows: list[CellMemory] = []
        self.limit = limit
        #: rows ever recorded (``rows`` keeps the last ``limit``): a sidebar that has the
        #: first ``n`` is sent only the rows after them
        self.recorded = 0
        #: the last cell recorded (None: none yet): a move or undo is recorded after it
        self.last_cell: int | None = None
        self.forgotten: dict[str, Keys] = {}
        self._previous: Inventory | None = None
        self._totals: dict[str, int] = {}
        self._tracked: dict[str, TrackedHolder] = {}  # label -> what it holds
        # the names cells mentioned that were bound after them: a holder first seen under
        # one of these was there before the cell that filled it (``losses = []``, then a
        # cell appending to it)
        self._bound: set[str] = set()
        self._out_keys: set[Any] = set()
        self._out_last: Any = None
        self._error_ids: tuple[int, ...] = ()
        self._releases = _RELEASES[0]
        self._module_ids: dict[str, int] = {}
        # the named variables' storages (each once), how many names reach each, per device
        self._named: Keys = {}
        self._counts: dict[StorageKey, int] | None = None
        self._named_totals: dict[str, int] = {}
        # the storages no name held before the last cell, and those no name holds after it:
        # what a name's growth is made of (a second name for a held tensor grows nothing)
        self._arrived: set[StorageKey] = set()
        self._gone: set[StorageKey] = set()

    # -- recording ------------------------------------------------------------------------
    def record(
        self,
        cell: int,
        inventory: Inventory,
        namespace: Any,
        names: Iterable[str] = (),
        *,
        error: BaseException | None = None,
        cuda: Mapping[str, tuple[int | None, int | None, int | None]] | None = None,
        action: str = "",
    ) -> tuple[list[CellMemory], list[str]]:
        """Record the cell; return its rows and any leak warnings (one line each).

        ``action``: not a cell but a move or undo made after cell ``cell`` (the sidebar's
        buttons, a fix button): its rows show what it changed on each device, at once rather
        than with the next cell. It takes the holders' new storages without counting them
        as a run of any cell (a leak is growth over runs of cells), and warns of nothing."""
        if not inventory.torch_imported:
            return [], []
        names = [n for n in dict.fromkeys(names) if not is_ipython_bookkeeping(n)]
        previous = self._previous
        # the names whose entries are not the very ones the last record saw (O(what changed))
        changed = (
            inventory.changed_since(previous)
            if previous is not None and hasattr(inventory, "changed_since")
            else None
        )
        named = self._update_named(previous, inventory, changed)
        if self._module_ids_changed(namespace, names, first=previous is None):
            # a module was deleted or rebound: its parameters may now be held only by an
            # optimizer, so measure the optimizers again
            names += [n for n in _optimizer_names(namespace) if n not in names]
        changed_holders = self._update_holders(namespace, inventory, names, named, bool(action))
        present = namespace.keys() if hasattr(namespace, "keys") else set()
        for name in names:
            if name in present:
                self._bound.add(name)
            else:
                self._bound.discard(name)
        totals = {d: n for d, n in self._named_totals.items() if n}
        extra: Keys = {}
        for tracked in self._tracked.values():
            extra.update(tracked.source.keys)
        outside = _by_device({k: v for k, v in extra.items() if k not in named})
        for dev, nbytes in outside.items():
            totals[dev] = totals.get(dev, 0) + nbytes
        looked_at = set(changed) if changed is not None else None
        changes, note = self._name_changes(previous, inventory, namespace, names, named, looked_at)
        changes.extend(changed_holders)
        warnings = (
            [line for tracked in self._tracked.values() for line in tracked.warnings()]
            if not action
            else []
        )
        rows = []
        for dev in sorted(set(totals) | set(self._totals), key=device_sort_key):
            now, before = totals.get(dev, 0), self._totals.get(dev, 0)
            if not now and not before:
                continue
            figures = (cuda or {}).get(dev, (None, None, None))
            mine = [(label, d) for label, dv, d in changes if dv == dev and d]
            mine.sort(key=lambda c: -abs(c[1]))
            rows.append(
                CellMemory(
                    cell,
                    dev,
                    now,
                    now - before,
                    figures[2],
                    figures[0],
                    figures[1],
                    tuple(mine[:3]),
                    note.get(dev, ""),
                    outside.get(dev, 0),
                    action,
                )  # fmt: skip
            )
        self._totals = totals
        self._previous = inventory
        if not action:
            self.last_cell = cell
        self.rows.extend(rows)
        self.recorded += len(rows)
        del self.rows[: max(0, len(self.rows) - self.limit)]
        return rows, warnings

    def _update_named(
        self, previous: Inventory | None, inventory: Inventory, changed: list[str] | None
    ) -> Keys:
        """The storages the named variables hold, each once, and their per-device totals --
        kept up to date from the names whose entries changed since the last cell (the hook's
        rescan reused the others), so a cell costs what it changed, not the namespace."""
        counts = self._counts
        if (
            previous is None
            or counts is None
            or changed is None
            # a full scan in between (a move, %devices...) changes every name: counting the
            # whole namespace column-wise beats updating it name by name
            or len(changed) > RECOUNT_ABOVE
        ):
            before = self._named
            if not hasattr(inventory, "storages_of"):
                self._named, self._counts = inventory.storages(), None
            else:
                self._named, self._counts = inventory.named_storages()
            self._named_totals = _by_device(self._named)
            self._arrived = set(self._named.keys() - before.keys())
            self._gone = set(before.keys() - self._named.keys())
            return self._named
        named, totals = self._named, self._named_totals
        arrived: set[StorageKey] = set()
        gone: set[StorageKey] = set()
        for name in changed:
            for key in previous.storages_of(name):
                left = counts.get(key, 0) - 1
                if left > 0:
                    counts[key] = left
                elif key in named:
                    del counts[key]
                    device, nbytes = named.pop(key)
                    gone.add(key)
                    if device != "meta":
                        totals[device] -= nbytes
            for key, value in inventory.storages_of(name).items():
                held = counts.get(key, 0)
                counts[key] = held + 1
                if not held:
                    named[key] = value
                    arrived.add(key)
                    if value[0] != "meta":
                        totals[value[0]] = totals.get(value[0], 0) + value[1]
        # a storage that left one name and came under another in the same cell did neither
        self._arrived, self._gone = arrived - gone, gone - arrived
        return named

    def _module_ids_changed(self, namespace: Any, names: list[str], first: bool) -> bool:
        """Whether a name that held a module was deleted or rebound (tracked by id for the
        names cells touch; the whole namespace once, at the first record)."""
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        module = torch.nn.Module
        changed = False
        for name in list(namespace) if first else names:
            value = namespace.get(name)
            known = self._module_ids.get(name)
            if isinstance(value, module):
                changed |= known is not None and known != id(value)
                self._module_ids[name] = id(value)
            elif known is not None:
                del self._module_ids[name]
                changed = True
        return changed and not first

    def _name_changes(
        self,
        previous: Inventory | None,
        inventory: Inventory,
        namespace: Any,
        names: list[str],
        named: Keys,
        changed: set[str] | None = None,
    ) -> tuple[list[tuple[str, str, int]], dict[str, str]]:
        """(name, device, bytes it grew) for the names the cell touched (deleting one touches
        it); and a note per device when a deleted or rebound name's storages stay alive under
        another name (the timeline then remembers them: ``forgotten``). ``changed``: the names
        whose entries changed since ``previous`` (the others hold the very storages they held)."""
        if previous is None:
            return [], {}
        changes: list[tuple[str, str, int]] = []
        notes: dict[str, str] = {}
        # a storage that came or went is told once, under the first name the cell mentions
        arrived, gone = set(self._arrived), set(self._gone)
        for name in names:
            if changed is not None and name not in changed:
                continue
            old_keys = _root_keys(previous, name)
            new_keys = _root_keys(inventory, name)
            # what the name gained that no name held before, lost that no name holds now
            came = arrived.intersection(new_keys)
            went = gone.intersection(old_keys)
            arrived -= came
            gone -= went
            old = _by_device({k: v for k, v in old_keys.items() if k in new_keys or k in went})
            new = _by_device({k: v for k, v in new_keys.items() if k in old_keys or k in came})
            for dev in set(old) | set(new):
                delta = new.get(dev, 0) - old.get(dev, 0)
                if delta:
                    changes.append((name, dev, delta))
            left = {k: v for k, v in old_keys.items() if k not in new_keys and k in named}
            if left:
                if name not in namespace:
                    self.forgotten[name] = left  # holders() names the second name
                verb = "del" if name not in namespace else "rebinding"
                for dev, size in _by_device(left).items():
                    notes[dev] = (
                        f"{verb} {name} freed nothing of {format_bytes(size)}: "
                        "another name still holds it (%devices --holders)"
                    )
        # forget what is no longer held at all, or whose name is back
        for name in list(self.forgotten):
            keys = {k: v for k, v in self.forgotten[name].items() if k in named}
            if keys and name not in namespace:
                self.forgotten[name] = keys
            else:
                del self.forgotten[name]
        return changes, notes

    def _update_holders(
        self,
        namespace: Any,
        inventory: Inventory,
        names: list[str],
        named: Keys,
        after_action: bool = False,
    ) -> list[tuple[str, str, int]]:
        """Re-measure the holders this cell could have changed (its names, a new error, new
        ``Out`` entries; everything after a release); return (holder, device, growth)."""
        full = self._releases != _RELEASES[0]
        self._releases = _RELEASES[0]
        fresh: dict[str, _Source | None] = {}
        errors = _last_errors(self.last_error)
        ids = tuple(map(id, errors))
        if full or ids != self._error_ids:
            self._error_ids = ids
            fresh["error"] = _traceback_source(errors, named, self.last_error)
        out = namespace.get("Out") if hasattr(namespace, "get") else None
        out = out if isinstance(out, dict) else {}
        # IPython only ever adds at the end: same size and same last key means no change
        last = next(reversed(out)) if out else None
        if full or len(out) != len(self._out_keys) or last != self._out_last:
            current = set(out)
        else:
            current = self._out_keys
        self._out_last = last
        added = current if full else current - self._out_keys
        for key in (self._out_keys - current) | (added if full else set()):
            fresh[f"out:{key!r}"] = None
        self._out_keys = current
        if added:
            for entry in _out_sources(namespace, sorted(added, key=repr)):
                fresh[f"out:{entry.token[0]!r}"] = entry
        present = namespace.keys() if hasattr(namespace, "keys") else set()
        tracked_names = {
            label.split("\x00")[1] for label in self._tracked if label[:5] == "name\x00"
        }
        for name in tracked_names:
            if full or name not in present or name in names:
                for label in [k for k in self._tracked if k.startswith(f"name\x00{name}\x00")]:
                    fresh[label] = None
        optimizer_type = sys.modules["torch"].optim.Optimizer  # record() runs only with torch
        without_optimizers: Keys | None = None
        maybe_orphaned: set[str] | None = None
        memo: KeyMemo = {}
        for name in list(present) if full else names:
            if name not in present or is_ipython_bookkeeping(name):
                continue
            value = namespace.get(name)
            if type(value) in _NOTHING_TO_HOLD:
                continue
            if isinstance(value, optimizer_type):
                if not full and not inventory.objects_changed:
                    # no module or optimizer changed since the last scan: what it orphans
                    # is as it was (keep what is tracked for it)
                    for label in [k for k in fresh if k.startswith(f"name\x00{name}\x00")]:
                        del fresh[label]
                    continue
                if maybe_orphaned is None:
                    said = _maybe_orphaned(inventory)
                    maybe_orphaned = set(present) if said is None else said
                if name not in maybe_orphaned:
                    continue  # every parameter it updates is reachable: nothing orphaned
                if without_optimizers is None:
                    without_optimizers = _named_keys_without_optimizers(namespace, inventory)
            for brought in _name_sources(namespace, name, value, without_optimizers or {}, memo):
                fresh[f"name\x00{name}\x00{brought.key}"] = brought
        return self._remeasure(fresh, names, named, after_action)

    def _remeasure(
        self,
        fresh: dict[str, _Source | None],
        names: list[str],
        named: Keys,
        after_action: bool = False,
    ) -> list[tuple[str, str, int]]:
        """Take the holders' new measurements (None: gone); return (holder, device, change in
        the bytes it holds beyond the named storages)."""
        cell = frozenset(names)
        changes: list[tuple[str, str, int]] = []
        for label, source in fresh.items():
            tracked = self._tracked.get(label)
            old = tracked.last_bytes if tracked is not None else {}
            if source is None:
                self._tracked.pop(label, None)
                new: dict[str, int] = {}
                shown = tracked.source.where if tracked is not None else label
            else:
                if tracked is None:
                    tracked = self._tracked[label] = TrackedHolder(source)
                # a name's holder first seen after a cell that did not bind the name: the
                # cell added to what the name already held
                bound = label[:5] == "name\x00" and label.split("\x00")[1] in self._bound
                if after_action:  # new storages, but no cell ran: no growth to count
                    tracked.moved(source)
                else:
                    tracked.measured(source, cell, first_grows=bound)
                subtract = named if source.subtract is None else source.subtract
                new = _by_device({k: v for k, v in source.keys.items() if k not in subtract})
                tracked.last_bytes = new
                shown = source.where
            for dev in set(old) | set(new):
                if new.get(dev, 0) != old.get(dev, 0):
                    changes.append((shown, dev, new.get(dev, 0) - old.get(dev, 0)))
        return changes

    # -- reading ---------------------------------------------------------------------------
    def to_frame(self) -> Any:
        import pandas as pd

        columns = ["cell", "device", "bytes", "delta", "peak", "grew", "action"]
        rows = [{c: row.to_dict()[c] for c in columns} for row in self.rows]
        frame = pd.DataFrame(rows, columns=columns)
        frame["peak"] = pd.array(frame["peak"].tolist(), dtype="Int64")
        return frame

    def text(self, last: int | None = None) -> str:
        rows = self.rows[-last:] if last else self.rows
        if not rows:
            return "No cells recorded yet (the timeline starts when torch is imported)."
        header = ("cell", "device", "held", "change", "peak", "grew / shrank")
        table = [header] + [
            (
                f"{r.cell}, then {r.action}" if r.action else str(r.cell),
                r.device,
                format_bytes(r.bytes),
                _signed(r.delta),
                format_bytes(r.peak) if r.peak is not None else "",
                r.grew + (f"  ({r.note})" if r.note else ""),
            )
            for r in rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
        return "\n".join(
            "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True))
            + "  "
            + row[-1]
            for row in table
        ).rstrip()

    def to_json(self, last: int = 200) -> list[dict[str, Any]]:
        """The rows the sidebar's chart draws, oldest first: of the last ``last`` rows, each
        device's last :data:`CHART_CELLS`. The chart draws no more (``MAX_CELLS`` in
        ``labextension/src/timeline.ts``), and the message goes out after every cell that
        changed tensors: its size must not grow with the notebook's history."""
        kept: list[CellMemory] = []
        per_device: dict[str, int] = {}
        for row in reversed(self.rows[-last:]):
            count = per_device.get(row.device, 0)
            if count < CHART_CELLS:
                per_device[row.device] = count + 1
                kept.append(row)
        return [row.to_dict() for row in reversed(kept)]


def device_figures() -> dict[str, tuple[int | None, int | None, int | None]]:
    """{"cuda:N": (allocated, reserved, peak allocated)} for the accelerator's devices -- only
    when it is *already* initialised (reading them otherwise would initialise it)."""
    from ..devices import accelerator_type, device_count, is_initialized, memory_figures

    kind = accelerator_type()
    if kind is None or not is_initialized(kind):
        return {}
    figures = {}
    for index in range(device_count(kind)):
        found = memory_figures(f"{kind}:{index}")
        if found.allocated is not None or found.reserved is not None:
            figures[f"{kind}:{index}"] = (found.allocated, found.reserved, found.peak)
    return figures


def reset_peaks() -> bool | None:
    """Reset the process-wide peak counters of the accelerator's devices
    (``reset_peak_memory_stats``) when it is already initialised; never initialises it.
    None: nothing initialised yet (a peak read later is the peak since then)."""
    from ..devices import accelerator_type, device_count, is_initialized, reset_peak

    kind = accelerator_type()
    if kind is None or not is_initialized(kind):
        return None
    return all([reset_peak(f"{kind}:{i}") for i in range(device_count(kind))])
