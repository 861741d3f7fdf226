"""The plan's data: what a move will do, worked out before anything is touched, as records the
transaction applies.

A :class:`Plan` holds:

* ``items``: one :class:`PlannedItem` per top-level name that will change (what
  :class:`~.result.MovedItem` reports), with what undo needs (the devices everything came from,
  where it was found);
* ``modules``: :class:`ModuleJob` in-place jobs (a module, or a holder of one standalone
  Parameter), each with a :class:`ParamRecord` of every parameter and gradient and a record of
  every buffer as they are now, for rollback;
* ``groups``: plain tensors to copy (:class:`QueuedTensor`), grouped by storage so aliases stay
  aliases; ``bulk``: top-level plain tensors copied in bulk (:class:`BulkTensors`);
* ``put_backs``: where a copied tensor (or a rebuilt immutable container) is put back
  (:class:`PutBack`: a name in the namespace, a key of a dict or of an optimizer's state, an item
  of a list, an attribute); ``rebuilds``: immutable containers (tuples, namedtuples) to rebuild
  with moved children;
* ``skipped``: ``(name, reason in words)``.

The planners (``plan_*.py``) fill it, one kind of object each; :mod:`.planner` picks the planner.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from itertools import compress, repeat
from operator import is_not, itemgetter
from typing import Any, NamedTuple, Protocol

from .. import objects
from ..units import device_sort_key
from .places import Link, Reached, is_mutable, reach
from .result import MoveError, reason


class Refused(Exception):
    """An object that must not be moved: a MoveError for named objects, a skip otherwise."""


class PlannedItem:
    """One top-level name in the plan (or, with ``listed`` False, a module or optimizer found
    inside a container: moved and undone, reported through its container)."""

    __slots__ = (
        "name",
        "kind",
        "obj",
        "from_devices",
        "nbytes",
        "to_device",
        "layout",
        "leaves",
        "listed",
    )

    def __init__(
        self,
        name: str,
        kind: str,
        obj: Any,
        from_devices: tuple[str, ...],
        nbytes: int,
        to_device: str,
        layout: Any,
        listed: bool = True,
    ) -> None:
        self.name = name
        self.kind = kind
        self.obj = obj
        self.from_devices = from_devices
        self.nbytes = nbytes
        self.to_device = to_device
        self.layout = layout  # the device(s) it came from: what undo needs to send it back
        #: containers/objects: (path, tensor before the move, its device) of what moves
        self.leaves: list[tuple[tuple[Any, ...], Any, Any]] = []
        self.listed = listed


def device_names(devices: Iterable[Any]) -> tuple[str, ...]:
    return tuple(sorted({str(d) for d in devices}, key=device_sort_key))


class QueuedTensor(NamedTuple):
    """A plain tensor queued for copying."""

    tensor: Any
    name: str  # the top-level name that brought it (what a failure names)
    storage_bytes: int  # bytes of its whole storage
    storage: Any  # its UntypedStorage, None when it has none of its own


class PutBack(NamedTuple):
    """At commit, ``holder[key]`` gets the copy of ``old`` (or ``old`` rebuilt, when it is an
    immutable container); rollback puts ``old`` back."""

    holder: Any
    holder_kind: str
    key: Any
    old: Any


class Rebuild(NamedTuple):
    """An immutable container (tuple, namedtuple, frozen dataclass) made again with moved
    children."""

    container: Any
    kind: str
    parts: list[tuple[Any, Any]]  # (key, old child)


# --------------------------------------------------------------------------------------------
# Storages


def storage_of(t: Any) -> objects.StorageIdentity:
    """(key, nbytes, storage) of the storage ``t``'s data lives in, by THE storage identity
    (objects/storage.py, what the scan counts by): tensors with one key share one storage, so a
    move copies it once and they share it on the target too."""
    return objects.storage_identity(objects.TorchTypes.current(), t)


def inner_of(t: Any) -> Any:
    """The one tensor a storage-less wrapper keeps its data in (``__tensor_flatten__``, read
    through objects/storage.py), or ``t`` itself."""
    try:
        if t.untyped_storage().nbytes() == 0 and t.numel() and t.device.type != "meta":
            T = objects.TorchTypes.current()
            inner = objects.inner_tensors(T, t) if T is not None else []
            if len(inner) == 1:
                return inner[0]
    except Exception:
        pass
    return t


# --------------------------------------------------------------------------------------------
# In-place moves (modules, Parameters) and how to put them back


class ParamRecord:
    """What a Parameter held before the move: enough to put it back exactly."""

    __slots__ = ("param", "data", "cls", "requires_grad", "grad", "grad_data", "plain")

    def __init__(self, param: Any) -> None:
        import torch

        self.param = param
        #: a plain tensor an optimizer updates, moved in place like a Parameter (a device
        #: subclass's Parameter is its class with ``_is_param``: isinstance reads that)
        self.plain = not isinstance(param, torch.nn.Parameter)
        self.data = param.data  # a plain alias of the old storage: keeps it alive until commit
        self.cls = type(param)
        self.requires_grad = param.requires_grad
        grad = param.grad
        self.grad = grad
        self.grad_data = grad.data if grad is not None else None

    def keep_its_kind(self) -> None:
        """A plain tensor moved as a Parameter (an optimizer's trainable leaf) stays a plain
        tensor: swapping made it a ``Parameter``, or marked a device subclass ``_is_param``."""
        import torch

        if not self.plain:
            return
        p = self.param
        swapped_in = type(p) is torch.nn.Parameter  # (a flag: mypy narrows on the test)
        if swapped_in:
            p.__class__ = torch.Tensor
        own = getattr(p, "__dict__", None)
        if isinstance(own, dict):
            own.pop("_is_param", None)

    def restore(self) -> None:
        import torch

        p, data, grad = self.param, self.data, self.grad
        if torch._has_compatible_shallow_copy_type(p, data):
            if grad is not None and self.grad_data is not None:
                grad.data = self.grad_data
            p.data = data
            if p.grad is not grad:
                p.grad = grad
            return
        # cpu <-> meta: the TensorImpl types differ, so the move swapped tensors; swap back.
        p.grad = None
        torch.utils.swap_tensors(p, torch.nn.Parameter(data, requires_grad=self.requires_grad))
        if type(p) is not self.cls:
            p.__class__ = self.cls
        if grad is not None and self.grad_data is not None:
            if torch._has_compatible_shallow_copy_type(grad, self.grad_data):
                grad.data = self.grad_data
            else:
                torch.utils.swap_tensors(grad, self.grad_data.detach())
            p.grad = grad


class TensorCopier(Protocol):
    """How a tensor is copied to a device (:class:`~.staging.Copier` stages CUDA copies)."""

    def to(self, t: Any, dest: Any) -> Any: ...


def plain_to(t: Any, dest: Any) -> Any:
    return t.to(dest, non_blocking=True) if dest.type == "cuda" else t.to(dest)


def table_entry(table: Any, key: str) -> Any:
    """``module._parameters[key]`` (or ``_buffers``) or None; TorchScript modules' tables
    (OrderedDictWrapper over the C++ module) have no ``get``."""
    try:
        return table[key]
    except (KeyError, RuntimeError):
        return None


_IN_PLACE_OK: dict[tuple[str, str], bool] = {}


def in_place_ok(src: Any, dst: Any) -> bool:
    """Whether ``param.data = tensor_on_dst`` works for a parameter on ``src`` (cached)."""
    import torch

    key = (src.type, dst.type)
    ok = _IN_PLACE_OK.get(key)
    if ok is None:
        a = torch.empty(0, device=src)
        b = torch.empty(0, device=dst)
        ok = _IN_PLACE_OK[key] = bool(torch._has_compatible_shallow_copy_type(a, b))
    return ok


class BufferRecord(NamedTuple):
    """A module buffer as it was before the move."""

    storage_key: Any
    buffer: Any
    owner: Any  # the submodule whose ``_buffers`` holds it
    key: str


#: a submodule with its (key, Parameter) and (key, buffer) entries before the move
SubmoduleRecord = tuple[Any, list[tuple[str, Any]], list[tuple[str, Any]]]


class ModuleJob:
    """One module (or a holder of one standalone Parameter) moved in place, and its records."""

    __slots__ = ("name", "module", "dest", "dest_of", "subs", "params", "buffers", "nbytes")

    def __init__(self, name: str, module: Any, dest: Any, dest_of: dict[int, Any] | None) -> None:
        self.name = name
        self.module = module
        self.dest = dest  # one device for everything, or None and ``dest_of`` (undo)
        self.dest_of = dest_of
        self.subs: list[SubmoduleRecord] = []
        self.params: list[ParamRecord] = []
        self.buffers: list[BufferRecord] = []
        self.nbytes = 0  # bytes it will copy (for progress)

    def target_of(self, t: Any) -> Any:
        if self.dest is not None:
            return self.dest
        return (self.dest_of or {}).get(id(t), t.device)

    def apply(self, copier: TensorCopier | None = None) -> None:
        import torch

        future = torch.__future__
        swap = self._needs_swap() and not future.get_swap_module_params_on_conversion()
        if swap:
            future.set_swap_module_params_on_conversion(True)
        try:
            if self.dest is not None and (self.dest.type != "cuda" or copier is None):
                self.module.to(self.dest)
            else:
                # to CUDA (staged through pinned memory) or per tensor (undo): the same
                # Module._apply that module.to runs, with our copy function
                dest, dest_of = self.dest, self.dest_of or {}
                to = copier.to if copier is not None else plain_to

                def convert(t: Any) -> Any:
                    d = dest if dest is not None else dest_of.get(id(t), t.device)
                    return t if t.device == d else to(t, d)

                self.module._apply(convert)
        finally:
            if swap:
                future.set_swap_module_params_on_conversion(False)
            for record in self.params:
                record.keep_its_kind()
        for sub, params, _buffers in self.subs:
            for key, p in params:
                if table_entry(sub._parameters, key) is not p:
                    raise RuntimeError(
                        f"{type(sub).__name__}.{key} was replaced by a new Parameter "
                        "(optimizers would lose it)"
                    )

    def _needs_swap(self) -> bool:
        """Some devices' tensors cannot take another device's data in place (cpu and meta:
        different TensorImpl types), so ``module.to`` would put new Parameter objects in the
        module; swapping keeps the objects, and the optimizers that hold them, valid."""
        import torch

        if torch.__future__.get_overwrite_module_params_on_conversion():
            return True
        targets = {self.dest} if self.dest is not None else set((self.dest_of or {}).values())
        sources = {r.data.device for r in self.params}
        return any(not in_place_ok(a, b) for a in sources for b in targets if a != b)

    def restore(self) -> None:
        for sub, params, buffers in self.subs:
            for key, p in params:
                if table_entry(sub._parameters, key) is not p:
                    sub._parameters[key] = p
            for key, b in buffers:
                if table_entry(sub._buffers, key) is not b:
                    sub._buffers[key] = b
        for record in self.params:
            record.restore()


class BulkTensors:
    """Plain tensors bound to top-level names, each alone in its storage, going to one device
    with no extra care: copied with one C-level map instead of per-tensor Python."""

    __slots__ = (
        "dest",
        "names",
        "tensors",
        "devices",
        "distinct",
        "storages",
        "keys",
        "nbytes",
        "copies",
    )

    def __init__(
        self,
        dest: Any,
        names: list[str],
        tensors: list[Any],
        devices: list[Any],
        storages: list[Any],
        keys: list[Any],
        nbytes: list[int],
    ) -> None:
        self.dest = dest
        self.names = names
        self.tensors = tensors
        self.devices = devices  # where each came from
        self.storages = storages
        self.keys = keys
        self.nbytes = nbytes  # what ``.to()`` allocates for each
        self.distinct: set[Any] = set()  # the devices they came from
        self.copies: list[Any] = []  # made by the transaction, one per name


# --------------------------------------------------------------------------------------------
# The plan


class Plan:
    """Everything a move will do, worked out before anything is touched."""

    def __init__(self, namespace: MutableMapping[str, Any], label: str, explicit: bool) -> None:
        import torch

        self.torch = torch
        self.ns = namespace
        self.label = label
        self.explicit = explicit  # names were given: a refusal refuses the whole move
        #: the device nested modules and optimizers go to (None: undo, which lists them itself)
        self.dest: Any = None
        self.items: list[PlannedItem] = []
        self.skipped: list[tuple[str, str]] = []
        #: moved modules' plain tensor attributes that stay where they are ("m.pe on cpu")
        self.left_behind: list[str] = []
        self.modules: dict[int, ModuleJob] = {}  # in-place jobs: modules and Parameter holders
        self.module_ids: set[int] = set()  # every submodule recorded by a job
        self.param_records: dict[int, ParamRecord] = {}
        self.param_dest: dict[int, Any] = {}  # id(param) -> where it will be
        #: (storage key, dest) -> the tensors of that storage going there
        self.groups: dict[tuple[Any, Any], list[QueuedTensor]] = {}
        self.plain_ids: set[int] = set()
        self.put_backs: list[PutBack] = []
        self.rebuilds: dict[int, Rebuild] = {}  # id(immutable container) -> how to rebuild it
        self._planned_places: set[tuple[int, Any]] = set()  # (id(holder), key) already planned
        T = objects.TorchTypes.current()
        assert T is not None  # torch is imported above
        self.T: objects.TorchTypes = T
        self._walks: dict[int, tuple[list[Reached], Any]] = {}
        self.optimizers: set[int] = set()
        self._device_labels: dict[Any, str] = {}
        self.types = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)
        #: plain torch.Tensor values bound to top-level names, per target, not yet checked:
        #: (names, tensors); the common case (thousands of tensors) is checked in bulk
        self.bulk_queue: dict[Any, tuple[list[str], list[Any]]] = {}
        self.bulk: list[BulkTensors] = []
        self._optimized: set[int] | None = None

    def trained_in_place(self, t: Any) -> bool:
        """Whether ``t`` is a plain trainable leaf an optimizer bound to a name updates
        (``w = torch.randn(3, requires_grad=True); opt = SGD([w])``): it moves in place like
        a Parameter, since a copy would leave the optimizer updating the old tensor."""
        return id(t) in self.optimized_ids() and bool(t.is_leaf) and bool(t.requires_grad)

    def optimized_ids(self) -> set[int]:
        """Ids of the tensors the optimizers bound to names, or kept in an object's attributes
        or a container (``trainer.opt``), update (found once per plan)."""
        if self._optimized is None:
            tensor_type, _module_type, optim_type = self.types
            # (a C-level pass drops the plain tensors: 100,000 of them hold no optimizer)
            everything = list(self.ns.items())
            values = map(itemgetter(1), everything)
            items = list(compress(everything, map(is_not, map(type, values), repeat(tensor_type))))
            optimizers = [v for _n, v in items if isinstance(v, optim_type)]
            for name, value in items:
                if isinstance(name, str) and objects.kind_of(self.T, value) in objects.COMPOSITES:
                    found_here, _walked = self.reach(name, value)
                    optimizers += [r.value for r in found_here if r.kind == objects.Kind.OPTIMIZER]
            self._optimized = {id(p) for opt in optimizers for p in objects.optimizer_params(opt)}
        return self._optimized

    def device_label(self, dev: Any) -> str:
        """``str(dev)``, made once per device (the bulk path labels thousands of tensors)."""
        s = self._device_labels.get(dev)
        if s is None:
            s = self._device_labels[dev] = str(dev)
        return s

    def skip_or_refuse(self, name: str, why: str) -> None:
        """Named explicitly: refuse the whole move. Found by ``names=None``: skip it."""
        if self.explicit:
            raise MoveError(why)
        self.skipped.append((name, why))

    def guarded(self, name: str, plan_it: Callable[..., Any], *args: Any) -> None:
        """Run one planner for ``name``: a refusal or a broken object is skipped (or refuses
        the move when named), never fatal."""
        try:
            plan_it(*args)
        except Refused as e:
            self.skip_or_refuse(name, str(e))
        except MoveError:
            raise
        except Exception as e:  # a broken object: skipped (or refused when named), never fatal
            self.skip_or_refuse(name, f"{name} could not be planned: {reason(e)}")

    @staticmethod
    def check_meta_source(name: str, dev: Any, dest: Any, what: str) -> None:
        if dev.type == "meta" and dest.type != "meta":
            raise Refused(f"{name}: {what} is on meta and has no data: create it again on {dest}")

    def add_plain(self, t: Any, name: str, dest: Any) -> int:
        """Queue a tensor to be copied (once per object; grouped by storage to keep sharing).

        Returns the bytes of its storage."""
        tid = id(t)
        key, snb, s = storage_of(t)
        if tid in self.plain_ids:
            return snb
        g = t.grad if t.is_leaf else None  # (read before the plan changes)
        follow = g is not None and g.device != dest
        self.plain_ids.add(tid)
        queued = QueuedTensor(t, name, snb, s)
        group = self.groups.get((key, dest))
        if group is None:
            self.groups[(key, dest)] = [queued]
        else:
            group.append(queued)
        if follow:
            self.add_plain(g, name, dest)
        return snb

    def put_back_chain(self, chain: tuple[Link, ...], old: Any) -> None:
        """Plan putting the copy of ``old`` back where it was found; each immutable container
        on the way up (tuple, namedtuple, frozen dataclass) is rebuilt and put back into its
        own holder, up to the first mutable one (a list, dict, object, or the namespace)."""
        for holder, kind, key in chain:
            try:
                place = (id(holder), key)
                if place in self._planned_places:
                    return
                self._planned_places.add(place)
            except TypeError:  # an unhashable key cannot be deduplicated; plan it anyway
                pass
            if is_mutable(holder, kind):
                self.put_backs.append(PutBack(holder, kind, key, old))
                return
            entry = self.rebuilds.get(id(holder))
            if entry is None:
                self.rebuilds[id(holder)] = Rebuild(holder, kind, [(key, old)])
            else:
                entry.parts.append((key, old))
            old = holder

    def clear_walks(self) -> None:
        """Forget what the walks found (they hold the old tensors)."""
        self._walks = {}

    def reach(self, name: str, value: Any) -> tuple[list[Reached], Any]:
        """What the one walker finds under ``name`` (walked once per object per plan)."""
        cached = self._walks.get(id(value))
        if cached is None or cached[1] is None:
            found, walked = reach(self.T, self.ns, name, value)
            cached = self._walks[id(value)] = (found, walked)
        return cached
