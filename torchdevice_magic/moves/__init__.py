"""The move engine: put named tensors, modules and optimizers (and the tensors inside
containers and objects) on another device, all or nothing, and take it back.

``move(namespace, "cuda")`` is what the widget's "Move all to cuda" button, the sidebar and the
public API call. It never touches IPython or widgets; it works on any mutable mapping of names.

Its modules, each importing only the ones before it:

* :mod:`.result` — what a move reports (:class:`MoveResult`, :class:`MovedItem`,
  :class:`MoveError`); :mod:`.places` — where tensors are found and put back (the walker's paths).
* :mod:`.jobs` — the plan's data: items, in-place module jobs with their records, tensors queued
  by storage, bulk tensors, put-backs and rebuilds.
* the planner, per kind — :mod:`.plan_modules` (modules and Parameters, in place),
  :mod:`.plan_optimizers` (state follows its parameters), :mod:`.plan_tensors` (named tensors,
  one by one or in bulk), :mod:`.plan_containers` (containers and objects); :mod:`.planner`
  picks one per name (:func:`plan_move`).
* :mod:`.budget` — the bytes each target will get, and the free-memory check.
* :mod:`.staging` (pinned staging to CUDA) and :mod:`.copying` (copies that keep sharing and
  autograd) — used by :mod:`.transaction`, which applies a plan all or nothing.
* :mod:`.undo` — what a move records to be taken back, and taking it back (a plan back, through
  the same transaction).

(The package is ``moves``, not ``move``: a subpackage ``torchdevice_magic.move`` would replace
the public function ``torchdevice_magic.move`` as soon as anything imported it.)

Choices a reader should know about:

* Optimizers: moving an optimizer moves its *state* to where its parameters will be (the
  target for parameters moved in the same call, their current device otherwise); it never
  moves the parameters themselves, which belong to their module. ``step`` counters stay where
  torch keeps them (on the CPU unless the group is ``capturable`` or ``fused``), like
  ``Optimizer.load_state_dict`` does. When modules or Parameters move, every optimizer bound to
  a top-level name whose state belongs to them is moved along, so ``opt.step()`` keeps working.
* A Parameter bound to a top-level name (``w = model.weight``) moves in place, so it stays the
  module's parameter. Moving it alone leaves the rest of the module where it was.
* Storage sharing is kept: two names for one tensor, a view and its base, and a tensor that
  aliases a module's parameter (``model.state_dict()``) still share storage on the target,
  which is copied once.
* Containers and objects are entered by the one walker (:mod:`torchdevice_magic.objects`);
  mutable ones (lists, dicts, mappings, objects' attributes) keep their identity and get the
  moved tensors in place; immutable ones (tuples, namedtuples) are rebuilt.
* Moving to CUDA reads the target's free memory, which creates the CUDA context if it did not
  exist yet; the move is about to create it anyway. Nothing else here initialises a device.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, MutableMapping
from typing import Any

from .. import objects
from ..devices import DeviceError, best_device
from .planner import plan_move
from .result import MovedItem, MoveError, MoveResult, ProgressCallback
from .transaction import execute
from .undo import UndoRecord

__all__ = [
    "MoveError",
    "MoveResult",
    "MovedItem",
    "ProgressCallback",
    "available_devices",
    "best_device",
    "move",
    "plan_move",
    "resolve_device",
]


def resolve_device(device: Any, allow_meta: bool) -> Any:
    """The ``torch.device`` a user typed, validated (:func:`torchdevice_magic.devices.resolve_device`);
    :class:`MoveError` with one line otherwise. Never initialises a device."""
    from .. import devices

    try:
        return devices.resolve_device(device, allow_meta)
    except DeviceError as error:
        raise MoveError(str(error)) from None


def available_devices(allow_meta: bool) -> list[tuple[str, bool, str]]:
    """``(device, enabled, reason)`` for each target of :func:`devices.available_targets`."""
    from .. import devices

    return [(t.device, t.enabled, t.reason) for t in devices.available_targets(allow_meta)]


def move(
    namespace: MutableMapping[str, Any],
    device: Any,
    names: Iterable[str] | None = None,
    *,
    free_bytes: int | None = None,
    progress: ProgressCallback | None = None,
    allow_meta: bool = True,
) -> MoveResult:
    """Move named objects of ``namespace`` to ``device``, all or nothing, and rebind the names.

    ``names=None`` moves everything the inventory marks movable: every top-level tensor,
    module, optimizer, and container or object holding them (IPython's bookkeeping names are
    left out). ``free_bytes`` replaces the target's free-memory figure (tests simulate a full
    device with it). ``progress(done, total)`` is called with byte counts while the move runs.
    ``allow_meta=False`` refuses ``meta`` as a target.

    Raises :class:`MoveError` (a ``ValueError``, one-line message) before touching anything
    for a bad device, an unknown name, an object that must not be moved, or a move that does
    not fit. A failure part-way is rolled back and reported in the result's ``failed``.
    """
    started = time.perf_counter()
    dest = resolve_device(device, allow_meta)
    try:
        plan = plan_move(namespace, dest, names)
        to_meta = dest.type == "meta"
        return execute(plan, progress, started, free_bytes, to_meta, record_undo=UndoRecord)
    finally:
        # hold no user class between moves (the per-type caches of objects)
        types = objects.TorchTypes.current()
        if types is not None:
            types.forget_types()
