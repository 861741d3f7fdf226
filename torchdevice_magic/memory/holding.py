"""Who keeps tensor memory alive outside the named variables: :class:`Holder` (where, device,
bytes, :meth:`Holder.release`), :func:`holders` (every kind of source together, named storages
subtracted), :func:`held_outside`, :func:`holders_text` and :class:`HolderList`.

Named ``holding`` so that the module cannot shadow the function :func:`holders` in the
package.

Pure core: no IPython, no ipywidgets, torch never imported here.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import Any

from ..names import is_ipython_bookkeeping
from ..scan import Inventory, scan
from ..units import device_sort_key, format_bytes
from .base import (
    _NOTHING_TO_HOLD,
    ErrorGetter,
    Keys,
    StorageKey,
    _by_device,
    _Source,
    holders_changed,
)
from .graphs import KeyMemo
from .interactive import shell_references
from .sources import (
    _global_hook_sources,
    _last_errors,
    _name_sources,
    _out_sources,
    _second_name_sources,
    _traceback_source,
)


@dataclass
class Holder:
    """One reference that keeps tensor memory alive outside the named variables, on one device.

    ``bytes``: storages counted once, not counting storages a named variable holds anyway (for
    a ``second name`` holder: the bytes a deleted name left behind that only it still holds).
    """

    where: str
    device: str
    bytes: int
    kind: str
    fix: str = ""
    count: int = 0  # tensors / graphs / frames / entries behind it, where that means something
    _release: Callable[[], str] | None = field(default=None, repr=False)
    _keys: Keys = field(default_factory=dict, repr=False)
    _namespace: Any = field(default=None, repr=False)
    _last_error: Any = field(default=None, repr=False)
    released: bool = field(default=False, repr=False)
    note: str = ""
    #: after :meth:`release`: the named variables and other holders that still reach some of
    #: what this one held (why the bytes freed can be fewer than :attr:`bytes`)
    still_held_by: tuple[str, ...] = field(default=(), repr=False)

    def release(self) -> int:
        """Drop exactly this reference; return the bytes that are now freed (on every device
        the reference held: storages no named variable and no other holder still reaches)."""
        if self.released or self._release is None:
            return 0
        self.note = self._release()
        self.released = True
        holders_changed()
        still, self.still_held_by = _still_held(self._namespace, self._last_error, self._keys)
        return sum(nbytes for key, (_, nbytes) in self._keys.items() if key not in still)

    def line(self, index: int | None = None) -> str:
        head = f"[{index}] " if index is not None else ""
        text = f"{head}{self.where}: {format_bytes(self.bytes)} on {self.device}"
        return text + (f" -> {self.fix}" if self.fix else "")


class Following:
    """A namespace whose deleted and rebound names a timeline remembers (``forgotten``): kept
    alive by whoever follows it (the controller); :func:`holders` of that namespace then names
    a second name exactly as ``%devices --holders`` does."""

    __slots__ = ("namespace", "forgotten", "__weakref__")

    def __init__(self, namespace: Any, forgotten: Mapping[str, Keys]) -> None:
        self.namespace = namespace
        self.forgotten = forgotten


_FOLLOWED: weakref.WeakValueDictionary[int, Following] = weakref.WeakValueDictionary()


def follow(namespace: Any, forgotten: Mapping[str, Keys]) -> Following:
    """Register what a timeline remembers of ``namespace``; keep the result alive as long as
    it should count (it is forgotten with it)."""
    following = Following(namespace, forgotten)
    _FOLLOWED[id(namespace)] = following
    return following


def _followed_forgotten(namespace: Any) -> Mapping[str, Keys] | None:
    following = _FOLLOWED.get(id(namespace))
    if following is None or following.namespace is not namespace:
        return None
    return following.forgotten


def _maybe_orphaned(inventory: Inventory) -> set[str] | None:
    """Optimizers the scan says update parameters no name reaches (by object identity; cheap),
    or None where the inventory cannot tell: only those are measured storage by storage."""
    check = getattr(inventory, "orphaned_optimizers", None)
    if check is None:
        return None
    try:
        return {found[0] for found in check()}
    except Exception:
        return None


def _named_keys_without_optimizers(namespace: Any, inventory: Inventory) -> Keys:
    torch = sys.modules.get("torch")
    optimizer_type = torch.optim.Optimizer if torch is not None else ()
    names = [n for n in inventory.names() if not isinstance(namespace.get(n), optimizer_type)]
    return inventory.subset(names).storages()


def _candidates(namespace: Any) -> list[tuple[str, Any]]:
    """(name, value) of the names that may bring a holder: not plain values, not IPython's
    bookkeeping, not plain tensors without a graph (most of a namespace; picked out
    column-wise, in C)."""
    tensor_type = sys.modules["torch"].Tensor
    try:
        names = list(namespace)
        values = list(map(namespace.__getitem__, names))
    except Exception:
        return []
    kinds = list(map(type, values))
    plain = list(map(is_, kinds, repeat(tensor_type)))
    graphs = iter(map(attrgetter("grad_fn"), compress(values, plain)))
    found = []
    for name, value, kind, is_plain in zip(names, values, kinds, plain, strict=True):
        if is_plain:
            if next(graphs) is None:
                continue  # a plain tensor holds nothing beyond itself
        elif kind in _NOTHING_TO_HOLD:
            continue
        if not is_ipython_bookkeeping(name):
            found.append((name, value))
    return found


def _sources(
    namespace: Any,
    inventory: Inventory,
    named: Keys,
    forgotten: Mapping[str, Keys] | None = None,
    output_refs: Callable[[Any], None] | None = None,
    last_error: ErrorGetter | None = None,
) -> list[_Source]:
    sources: list[_Source] = []
    traceback = _traceback_source(_last_errors(last_error), named, last_error)
    if traceback is not None:
        sources.append(traceback)
    sources.extend(_out_sources(namespace, output_refs=output_refs))
    maybe_orphaned = _maybe_orphaned(inventory)
    # the named storages less the optimizers' own: only needed to look for orphans
    without_optimizers = (
        _named_keys_without_optimizers(namespace, inventory)
        if maybe_orphaned is None or maybe_orphaned
        else {}
    )
    memo: KeyMemo = {}
    for name, value in _candidates(namespace):
        reachable = maybe_orphaned is not None and name not in maybe_orphaned
        if reachable and isinstance(value, sys.modules["torch"].optim.Optimizer):
            continue  # the scan knows every parameter it updates is reachable
        sources.extend(_name_sources(namespace, name, value, without_optimizers, memo))
    sources.extend(_global_hook_sources())
    if forgotten:
        sources.extend(_second_name_sources(namespace, inventory, forgotten))
    return sources


def _still_held(
    namespace: Any, last_error: ErrorGetter | None, keys: Keys
) -> tuple[set[StorageKey], tuple[str, ...]]:
    """Every storage key a named variable or a holder reaches; and of them, who reaches any
    of ``keys`` (top-level names first, then the holders' ``where``)."""
    inventory = scan(namespace)
    named = inventory.storages()
    held = set(named)
    who: list[str] = []
    if not held.isdisjoint(keys):  # a named variable still reaches some: which (no records)
        storages_of = inventory.storages_of
        who += [n for n in inventory.names() if not storages_of(n).keys().isdisjoint(keys)]
    for source in _sources(namespace, inventory, named, last_error=last_error):
        held.update(source.keys)
        if not source.keys.keys().isdisjoint(keys) and source.where not in who:
            who.append(source.where)
    return held, tuple(who)


def holders(
    namespace: Mapping[str, Any],
    device: str | None = None,
    *,
    inventory: Inventory | None = None,
    forgotten: Mapping[str, Keys] | None = None,
    output_refs: Callable[[Any], None] | None = None,
    last_error: ErrorGetter | None = None,
) -> list[Holder]:
    """Who keeps tensor memory alive outside the named variables of ``namespace``, biggest
    first; ``device`` (``"cuda:0"``, or a type like ``"cuda"``) keeps only that device's.

    The one implementation behind ``tdm.holders(get_ipython().user_ns)``, ``%devices
    --holders`` and ``--release``: for a shell's namespace it finds by itself what the shell
    keeps (:mod:`.interactive`) and what the extension's timeline remembers (:func:`follow`).

    ``inventory``: a scan of ``namespace`` made just now (saves one); ``forgotten``: storage
    keys of names deleted or rebound recently (default: what the timeline following this
    namespace remembers) -- a named variable still holding one is listed as a ``second
    name``; ``output_refs(obj)``: called when an ``Out`` entry is released, to drop the
    references a front end keeps besides the namespace (default: a shell's display hook,
    ``user_ns_hidden`` and last result); ``last_error()``: the last failing cell's exception
    where ``sys.last_value`` may not name it (default: the one a shell keeps), found besides
    ``sys.last_value``.
    """
    if "torch" not in sys.modules:
        return []
    if output_refs is None or last_error is None:
        shell_output_refs, shell_last_error = shell_references(namespace)
        output_refs = output_refs or shell_output_refs
        last_error = last_error or shell_last_error
    if forgotten is None:
        forgotten = _followed_forgotten(namespace)
    if inventory is None:
        inventory = scan(namespace)
    named = inventory.storages()
    found: list[Holder] = []
    for source in _sources(namespace, inventory, named, forgotten, output_refs, last_error):
        subtract = named if source.subtract is None else source.subtract
        keys = source.keys
        if len(keys) == 1:  # most holders (an output, a tensor): one storage, kept or not
            outside = {} if next(iter(keys)) in subtract else keys
        else:
            outside = {k: v for k, v in keys.items() if k not in subtract}
        for dev, nbytes in _by_device(outside).items():
            if nbytes <= 0 or not _device_matches(dev, device):
                continue
            found.append(
                Holder(
                    source.where,
                    dev,
                    nbytes,
                    source.kind,
                    source.fix,
                    source.count,
                    source.release,
                    outside,
                    namespace,
                    last_error,
                )
            )
    order = {d: device_sort_key(d) for d in {h.device for h in found}}
    found.sort(key=lambda h: (-h.bytes, order[h.device], h.where))
    return found


def _device_matches(device: str, wanted: str | None) -> bool:
    if not wanted:
        return True
    wanted = str(wanted)
    return device == wanted or (":" not in wanted and device.partition(":")[0] == wanted)


def held_outside(found: Iterable[Holder]) -> dict[str, int]:
    """{device: bytes} held outside named variables by these holders, each storage once."""
    keys: Keys = {}
    for holder in found:
        if holder.kind != "second name":
            keys.update(holder._keys)
    totals: dict[str, int] = {}
    for dev, nbytes in keys.values():
        totals[dev] = totals.get(dev, 0) + nbytes
    return {d: totals[d] for d in sorted(totals, key=device_sort_key) if totals[d]}


def holders_text(found: list[Holder]) -> str:
    if not found:
        return "Nothing holds tensor memory outside your named variables."
    totals = held_outside(found)
    lines = []
    if totals:
        lines.append("Held outside named variables:")
        lines.extend(f"  {device}: {format_bytes(n)}" for device, n in totals.items())
        lines.append("")
    lines.extend(holder.line(index) for index, holder in enumerate(found))
    lines.append("")
    lines.append("Release one: %devices --release N   (or holders = %devices --holders -o; ")
    lines[-1] += "holders[N].release())"
    return "\n".join(lines)


class HolderList(list[Holder]):
    """``%devices --holders -o``: a list of :class:`Holder` that prints as the text table."""

    def __repr__(self) -> str:
        return holders_text(list(self))

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))
