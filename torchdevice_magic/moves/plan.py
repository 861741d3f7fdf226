"""The plan: what moves where, what follows, what is skipped and why — worked out before
anything is touched, as data the transaction applies.

A plan holds:

* ``items``: one per top-level name that will change (what :class:`MovedItem` reports), with
  what undo needs (the devices everything came from, where it was found);
* ``modules``: in-place jobs (a module, or a holder of one standalone Parameter), each with
  records of every parameter, gradient and buffer as it is now, for rollback;
* ``groups``: plain tensors to copy, grouped by storage so aliases stay aliases;
  ``fast_sets``: top-level plain tensors copied in bulk;
* ``writes``: where a copied tensor (or a rebuilt immutable container) is put back: a name in
  the namespace, a key of a dict or of an optimizer's state, an item of a list, an attribute;
  ``rebuilds``: immutable containers (tuples, namedtuples) to rebuild with moved children;
* ``skipped``: ``(name, reason in words)``.

Containers and objects are entered ONLY through :mod:`torchdevice_magic.objects` (the one
walker the scan also uses), so what the table marks movable is what "Move all" moves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, MutableMapping
from operator import attrgetter
from typing import Any, NamedTuple

from .. import objects
from ..names import IPYTHON_NAMES, is_ipython_bookkeeping
from ..objects import Kind
from ..units import device_sort_key
from .result import MoveError, reason
from .transaction import FastSet, ModuleJob, ParamRecord, storage, tensor_nbytes

_BOOKKEEPING = frozenset({"In", "Out", "exit", "quit", "get_ipython"})
# IPython's output and input caches: refused even when named explicitly (rebinding them would
# break IPython's history); user names such as ``_idx`` are allowed when named explicitly.
_HISTORY_NAME = re.compile(r"_{1,3}|_\d+|_i{1,3}|_i\d+|_oh|_ih|_dh")
META_ADVICE = (
    "parameters on meta have no data: use model.to_empty(device=...) and load the weights again"
)

#: ``target(path, tensor)``: the device a tensor found at ``path`` goes to, or None (stays).
Target = Callable[[tuple[Any, ...], Any], Any]


class Item:
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


class Refused(Exception):
    """An object that must not be moved: a MoveError for named objects, a skip otherwise."""


# A plain tensor queued for copying: (tensor, name that brought it, storage bytes, storage)
Member = tuple[Any, str, int, Any]


def accelerate_reason(T: Any, name: str, module: Any) -> str | None:
    """Why a module dispatched by accelerate must not be moved by hand (objects reads the
    hooks and the device map, the scan shows the same reason), or None."""
    dispatch = objects.accelerate_dispatch(T, name, list(module.modules()))
    return None if dispatch is None else dispatch.reason


def _script_reason(name: str, module: Any, T: Any) -> str | None:
    """TorchScript modules keep their parameters in C++ slots: ``param.data = ...`` works
    between devices with compatible tensor types (cpu <-> cuda), but where torch would have
    to swap Parameter objects (cpu <-> meta, out-of-tree backends) it cannot: refuse up
    front instead of failing half-way."""
    script = T.ScriptModule
    if script is None or not any(isinstance(m, script) for m in module.modules()):
        return None
    return (
        f"{name} is a TorchScript module: its parameters cannot be swapped to this device "
        "in place; script the model again after moving the original module"
    )


def module_tensors(m: Any) -> Iterable[Any]:
    for p in m.parameters():
        yield p
        if p.grad is not None:
            yield p.grad
    yield from m.buffers()


def module_bytes(m: Any) -> int:
    seen: set[Any] = set()
    total = 0
    for t in module_tensors(m):
        key, snb, _s = storage(t)
        if key not in seen:
            seen.add(key)
            total += snb
    return total


def module_layout(m: Any) -> dict[str, Any]:
    layout = {qual: p.device for qual, p in m.named_parameters()}
    layout.update((qual, b.device) for qual, b in m.named_buffers())
    return layout


def is_parameter(torch: Any, t: Any) -> bool:
    """A Parameter, also one of a device's tensor subclass (``nn.Parameter(subclass)`` keeps
    the subclass and sets ``_is_param``, which Parameter's isinstance check reads)."""
    tp = type(t)
    if tp is torch.Tensor:
        return False
    return tp is torch.nn.Parameter or isinstance(t, torch.nn.Parameter)


#: the kind of a :class:`Reached` that is a second place holding an immutable composite
ALIAS = "alias"

#: the holder kind of a top-level name (the namespace is written with ``ns[name] = value``)
NAMESPACE = "namespace"


def is_mutable(holder: Any, kind: str) -> bool:
    return kind == NAMESPACE or objects.is_mutable(holder, kind)


def put_back(holder: Any, kind: str, key: Any, value: Any) -> None:
    """Put ``value`` at ``key`` of ``holder``: a name, or in place through objects/putback.py."""
    if kind == NAMESPACE:
        holder[key] = value
    else:
        objects.set_child(holder, kind, key, value)


class Reached(NamedTuple):
    """A tensor, Parameter, module or optimizer the walker found under a top-level name."""

    label: str  # what users read: ``trainer.model``, ``batch['x']``
    path: tuple[Any, ...]  # the keys from the name down (what undo finds it by)
    chain: tuple[tuple[Any, str, Any], ...]  # (holder, holder kind, key), leaf's holder first
    value: Any
    kind: str


def reach(T: Any, ns: Any, name: str, value: Any) -> tuple[list[Reached], Any]:
    """Everything the one walker (objects.walk) finds under ``ns[name]``, with where each is
    held, up to the name: what a move needs to put moved tensors back."""
    walked = objects.walk(T, value, name)
    nodes = walked.nodes

    def held(index: int, key: Any, label: str, child: Any, kind: str) -> Reached:
        chain: list[tuple[Any, str, Any]] = []
        keys: list[Any] = []
        while index >= 0:
            node = nodes[index]
            chain.append((node.value, node.kind, key))
            keys.append(key)
            index, key = node.parent, node.key
        chain.append((ns, NAMESPACE, name))
        keys.reverse()
        return Reached(label, tuple(keys), tuple(chain), child, kind)

    found = [held(leaf.node, leaf.key, leaf.path, leaf.value, leaf.kind) for leaf in walked.leaves]
    # an immutable composite held a second time (one tuple in two lists): when it is rebuilt,
    # the rebuilt one goes to both places
    found.extend(
        held(index, key, nodes[index].path, child, ALIAS)
        for index, key, child in walked.aliases
        if not objects.is_mutable(child, objects.kind_of(T, child))
    )
    return found, walked


class Plan:
    """Everything a move will do, worked out before anything is touched."""

    def __init__(self, namespace: MutableMapping[str, Any], label: str, explicit: bool) -> None:
        import torch

        self.torch = torch
        self.ns = namespace
        self.label = label
        self.explicit = explicit
        #: the device nested modules and optimizers go to (None: undo, which lists them itself)
        self.dest: Any = None
        self.items: list[Item] = []
        self.skipped: list[tuple[str, str]] = []
        self.modules: dict[int, ModuleJob] = {}  # in-place jobs: modules and Parameter holders
        self.module_ids: set[int] = set()  # every submodule recorded by a job
        self.param_records: dict[int, ParamRecord] = {}
        self.param_dest: dict[int, Any] = {}  # id(param) -> where it will be
        self.groups: dict[tuple[Any, Any], list[Member]] = {}  # (storage key, dest) -> tensors
        self.plain_ids: set[int] = set()
        #: (holder, holder kind, key, old): at commit the slot gets the copy of ``old``, or
        #: ``old`` rebuilt when it is an immutable container (see :func:`put_back`)
        self.writes: list[tuple[Any, str, Any, Any]] = []
        #: id(immutable container) -> (container, kind, [(key, old child)]) to rebuild it with
        self.rebuilds: dict[int, tuple[Any, str, list[tuple[Any, Any]]]] = {}
        self._slots: set[tuple[int, Any]] = set()  # (id(holder), key) already planned
        T = objects.TorchTypes.current()
        assert T is not None  # torch is imported above
        self.T: objects.TorchTypes = T
        self._walks: dict[int, tuple[list[Reached], Any]] = {}
        self.optimizers: set[int] = set()
        self.devstr: dict[Any, str] = {}
        self.types = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)
        # Plain torch.Tensor values bound to top-level names, per target: the common case
        # (thousands of tensors) goes through C-level maps instead of per-tensor Python.
        self.fast: dict[Any, tuple[list[str], list[Any]]] = {}
        self.fast_sets: list[FastSet] = []
        self.data_bytes = 0  # set by needed_bytes()

    def dstr(self, dev: Any) -> str:
        s = self.devstr.get(dev)
        if s is None:
            s = self.devstr[dev] = str(dev)
        return s

    def skip_or_refuse(self, name: str, why: str) -> None:
        """Named explicitly: refuse the whole move. Found by ``names=None``: skip it."""
        if self.explicit:
            raise MoveError(why)
        self.skipped.append((name, why))

    @staticmethod
    def _check_meta_source(name: str, dev: Any, dest: Any, what: str) -> None:
        if dev.type == "meta" and dest.type != "meta":
            raise Refused(f"{name}: {what} is on meta and has no data: create it again on {dest}")

    def add_plain(self, t: Any, name: str, dest: Any) -> int:
        """Queue a tensor to be copied (once per object; grouped by storage to keep sharing).

        Returns the bytes of its storage."""
        tid = id(t)
        key, snb, s = storage(t)
        if tid in self.plain_ids:
            return snb
        g = t.grad if t.is_leaf else None  # (read before the plan changes)
        follow = g is not None and g.device != dest
        self.plain_ids.add(tid)
        group = self.groups.get((key, dest))
        if group is None:
            self.groups[(key, dest)] = [(t, name, snb, s)]
        else:
            group.append((t, name, snb, s))
        if follow:
            self.add_plain(g, name, dest)
        return snb

    def put_back_chain(self, chain: tuple[tuple[Any, str, Any], ...], old: Any) -> None:
        """Plan putting the copy of ``old`` back where it was found; each immutable container
        on the way up (tuple, namedtuple, frozen dataclass) is rebuilt and put back into its
        own holder, up to the first mutable one (a list, dict, object, or the namespace)."""
        for holder, kind, key in chain:
            try:
                slot = (id(holder), key)
                if slot in self._slots:
                    return
                self._slots.add(slot)
            except TypeError:  # an unhashable key cannot be deduplicated; plan it anyway
                pass
            if is_mutable(holder, kind):
                self.writes.append((holder, kind, key, old))
                return
            entry = self.rebuilds.get(id(holder))
            if entry is None:
                self.rebuilds[id(holder)] = (holder, kind, [(key, old)])
            else:
                entry[2].append((key, old))
            old = holder

    def clear_walks(self) -> None:
        """Forget what the walks found (they hold the old tensors)."""
        self._walks = {}

    def reach(self, name: str, value: Any) -> tuple[list[Reached], Any]:
        cached = self._walks.get(id(value))
        if cached is None or cached[1] is None:
            found, walked = reach(self.T, self.ns, name, value)
            cached = self._walks[id(value)] = (found, walked)
        return cached

    # -- named objects ----------------------------------------------------------------------------

    def add(self, name: str, obj: Any, dest: Any, layout: Any = None) -> None:
        """Plan one top-level name. ``dest`` None: per-tensor devices from ``layout`` (undo)."""
        tensor_type, module_type, optim_type = self.types
        tp = type(obj)
        try:
            if issubclass(tp, tensor_type):
                if is_parameter(self.torch, obj):
                    self._add_parameter(name, obj, dest if dest is not None else layout)
                else:
                    self._add_tensor(name, obj, dest if dest is not None else layout)
            elif issubclass(tp, module_type):
                self.add_module(name, obj, dest, layout)
            elif issubclass(tp, optim_type):
                self.add_optimizer(name, obj, layout)
            elif objects.kind_of(self.T, obj) in objects.COMPOSITES:
                self._add_container(name, obj, dest, layout)
            else:
                self.skip_or_refuse(
                    name,
                    f"{name} is a {tp.__name__}, not a tensor, module, optimizer or "
                    "container of tensors",
                )
        except Refused as e:
            self.skip_or_refuse(name, str(e))
        except MoveError:
            raise
        except Exception as e:  # a broken object: skipped (or refused when named), never fatal
            self.skip_or_refuse(name, f"{name} could not be planned: {reason(e)}")

    def _add_tensor(self, name: str, t: Any, dest: Any) -> None:
        dev = t.device
        if dev == dest:
            self.skipped.append((name, f"already on {self.dstr(dest)}"))
            return
        if dev.type == "meta":
            self._check_meta_source(name, dev, dest, "this tensor")
        snb = self.add_plain(t, name, dest)
        self.writes.append((self.ns, NAMESPACE, name, t))
        self.items.append(Item(name, "tensor", t, (self.dstr(dev),), snb, self.dstr(dest), dev))

    def _add_parameter(self, name: str, p: Any, dest: Any) -> None:
        devs = {p.device}
        grad = p.grad
        if grad is not None:
            devs.add(grad.device)
        if devs == {dest}:
            self.skipped.append((name, f"already on {self.dstr(dest)}"))
            return
        for d in devs:
            self._check_meta_source(name, d, dest, "this Parameter")
        self._move_param_in_place(name, p, dest)
        snb = storage(p)[1]
        item = Item(name, "parameter", p, device_names(devs), snb, self.dstr(dest), p.device)
        self.items.append(item)

    def _move_param_in_place(self, name: str, p: Any, dest: Any) -> None:
        """A Parameter outside any module moved in this call: move it in place, through a
        holder module so it goes through exactly what ``module.to`` does."""
        if id(p) in self.param_dest:  # moves with its module, or was named twice
            return
        holder = self.torch.nn.Module()
        holder._parameters["p"] = p
        job = ModuleJob(name, holder, dest, None)
        self._record_module(job, holder)
        self.modules[id(holder)] = job

    def add_module(
        self, name: str, m: Any, dest: Any, layout: Any, listed: bool = True
    ) -> Item | None:
        reason_ = accelerate_reason(self.T, name, m)
        if reason_ is not None:
            raise Refused(reason_)
        dest_of: dict[int, Any] | None = None
        if dest is None:  # undo of a module that spanned devices: targets by qualified name
            dest_of = {}
            for qual, p in m.named_parameters():
                d = layout.get(qual)
                if d is not None:
                    dest_of[id(p)] = d
                    if p.grad is not None:
                        dest_of[id(p.grad)] = d
            for qual, b in m.named_buffers():
                d = layout.get(qual)
                if d is not None:
                    dest_of[id(b)] = d
        devices: set[Any] = set()
        pending = False
        for t in module_tensors(m):
            dev = t.device
            devices.add(dev)
            want = dest if dest_of is None else dest_of.get(id(t), dev)
            if dev == want:
                continue
            if dev.type == "meta":
                raise Refused(f"{name}: {META_ADVICE}")
            pending = True
        packed = objects.module_parts(self.T, m).extra
        if packed and any(str(dest_) != "cpu" for dest_ in ([dest] if dest_of is None else [])):
            raise Refused(
                f"{name} holds dynamic-quantized layers: their packed weights live in C++ "
                "objects that only run on the cpu; quantize the float model again after moving it"
            )
        if not pending:
            if listed:
                self.skipped.append((name, self._nothing_to_move(m, devices, dest)))
            return None
        wants = {dest} if dest_of is None else set(dest_of.values())
        if any(not ModuleJob.in_place_ok(a, b) for a in devices for b in wants if a != b):
            script = _script_reason(name, m, self.T)
            if script is not None:
                raise Refused(script)
        to_device = self.dstr(dest) if dest is not None else ", ".join(device_names(wants))
        item = Item(
            name,
            "module",
            m,
            device_names(devices),
            module_bytes(m),
            to_device,
            module_layout(m),
            listed,
        )
        if id(m) not in self.module_ids:  # else a submodule of a module moved in this call
            job = ModuleJob(name, m, dest, dest_of)
            self._record_module(job, m)
            self.modules[id(m)] = job
        self.items.append(item)
        return item

    def _nothing_to_move(self, m: Any, devices: set[Any], dest: Any) -> str:
        """Why a module with nothing to move is skipped, in words that are true: a module
        with no parameters or buffers (dynamic-quantized layers keep packed weights in C++
        objects) is not "already on" anything."""
        if not devices:
            return "has no parameters or buffers to move"
        where = self.dstr(dest) if dest is not None else "its original devices"
        return f"already on {where}"

    def _record_module(self, job: ModuleJob, m: Any) -> None:
        """Record every submodule's parameters and buffers as they are now, for rollback.

        Everything is read first and entered into the plan at the end, so a module that raises
        while being read leaves the plan as it was (it is then skipped or refused)."""
        subs: list[tuple[Any, list[tuple[str, Any]], list[tuple[str, Any]]]] = []
        records: list[ParamRecord] = []
        buffers: list[tuple[Any, Any, Any, str]] = []
        seen_subs: set[int] = set()
        seen_params: set[int] = set()
        for sub in m.modules():
            sid = id(sub)
            if sid in self.module_ids or sid in seen_subs:
                continue
            seen_subs.add(sid)
            sub_params = list(sub._parameters.items())
            sub_buffers = list(sub._buffers.items())
            subs.append((sub, sub_params, sub_buffers))
            for _k, p in sub_params:
                if p is None or id(p) in self.param_records or id(p) in seen_params:
                    continue
                seen_params.add(id(p))
                records.append(ParamRecord(p))
            for k, b in sub_buffers:
                if b is not None:
                    buffers.append((storage(b)[0], b, sub, k))
        targets = [job.target_of(r.param) for r in records]
        self.module_ids.update(seen_subs)
        job.subs.extend(subs)
        job.params.extend(records)
        job.buffers.extend(buffers)
        for record, target in zip(records, targets, strict=True):
            self.param_records[id(record.param)] = record
            self.param_dest[id(record.param)] = target

    def add_optimizer(self, name: str, opt: Any, layout: Any, listed: bool = True) -> None:
        """Queue the optimizer's state to follow its parameters.

        ``layout`` (undo): ``{(param index, *path): device}`` of the state as it was before
        the move; state the optimizer created since (a step after the move) has no entry and
        follows its parameter back like the rest."""
        if id(opt) in self.optimizers:
            return
        state = getattr(opt, "state", None)
        groups = getattr(opt, "param_groups", None)
        if not isinstance(state, dict) or not isinstance(groups, list):
            raise Refused(f"{name}: this optimizer keeps no state dict that can be moved")
        self.optimizers.add(id(opt))
        devices: set[Any] = set()
        wants: set[Any] = set()
        original: dict[tuple[Any, ...], Any] = {}
        planned: list[tuple[Any, Any, Any]] = []  # (chain, tensor, want)
        index = 0
        for group in groups:
            # Like Optimizer.load_state_dict: step counters stay where they are (the CPU)
            # unless the group is capturable or fused, where they live with the parameters.
            step_follows = bool(group.get("capturable", False) or group.get("fused", False))
            for p in group.get("params", []):
                entry = state.get(p)
                if isinstance(entry, dict):
                    follow = self.param_dest.get(id(p))
                    if follow is None:
                        follow = p.device
                    for path, chain, value in self._state_tensors(entry):
                        dev = value.device
                        original[(index,) + tuple(path)] = dev
                        want = None if layout is None else layout.get((index,) + tuple(path))
                        if want is None:
                            if path == ("step",) and not step_follows:
                                continue
                            want = follow
                        if dev == want:
                            continue
                        self._check_meta_source(name, dev, want, "its state")
                        devices.add(dev)
                        wants.add(want)
                        planned.append((chain, value, want))
                index += 1
        if not planned:
            if listed:
                self.skipped.append((name, "optimizer state is already with its parameters"))
            return
        nbytes = 0
        for chain, value, want in planned:
            nbytes += self.add_plain(value, name, want)
            self.put_back_chain(chain, value)
        self.items.append(
            Item(
                name,
                "optimizer",
                opt,
                device_names(devices),
                nbytes,
                ", ".join(device_names(wants)),
                original,
                listed,
            )
        )

    def _skip_part(self, name: str, error: Refused) -> None:
        """A part of ``name`` that cannot move (meta data, an accelerate-dispatched model):
        "Move all" leaves that part where it is and moves the rest, as the table marks only
        that part unmovable; named explicitly, the whole move is refused."""
        if self.explicit:
            raise MoveError(str(error))
        self.skipped.append((name, str(error)))

    def _state_tensors(self, entry: dict[Any, Any]) -> Iterable[tuple[Any, Any, Any]]:
        """(path, chain, tensor) of one parameter's optimizer state: tensors, and tensors in
        lists and other containers (LBFGS keeps ``old_dirs``, ``old_stps``, ``ro``, ``al``)."""
        T = self.T
        for key, value in list(dict.items(entry)):
            kind = objects.kind_of(T, value)
            if kind == Kind.TENSOR:
                yield (key,), ((entry, Kind.MAPPING, key),), value
            elif kind in objects.CONTAINERS:
                holder = {key: value}  # the state entry seen as a namespace of one name
                found, _walked = reach(T, holder, key, value)
                for r in found:
                    if r.kind == Kind.TENSOR:
                        chain = (*r.chain[:-1], (entry, Kind.MAPPING, key))
                        yield (key, *r.path), chain, r.value

    def _add_container(self, name: str, obj: Any, dest: Any, layout: Any) -> None:
        """A container or an object holding tensors: its tensors are copied and put back where
        they were found (mutable holders changed in place, immutable ones rebuilt); modules
        and optimizers inside move in place with it.

        ``layout`` (undo): ``{path: (id of the tensor the move put there, device before)}``."""
        if layout is None:
            whole = dest

            def target(path: tuple[Any, ...], t: Any) -> Any:
                return whole
        else:

            def target(path: tuple[Any, ...], t: Any) -> Any:
                was = layout.get(path)
                return was[1] if was is not None and was[0] == id(t) else None

        found, walked = self.reach(name, obj)
        if walked.truncated:
            self.skip_or_refuse(
                name,
                f"{name} holds more than {walked.cap:,} elements: name the tensors in it directly",
            )
            return
        devices: set[Any] = set()
        wants: set[Any] = set()
        leaves: list[tuple[tuple[Any, ...], Any, Any]] = []
        planned: list[tuple[Reached, Any]] = []
        skipped_before = len(self.skipped)
        modules: list[Reached] = []
        optimizers: list[Reached] = []
        tensors = 0
        aliases: list[Reached] = []
        for r in found:
            if r.kind == Kind.MODULE:
                modules.append(r)
                continue
            if r.kind == ALIAS:
                aliases.append(r)
                continue
            if r.kind == Kind.OPTIMIZER:
                optimizers.append(r)
                continue
            tensors += 1
            t = r.value
            dev = t.device
            devices.add(dev)
            want = target(r.path, t)
            if want is None or dev == want:
                continue
            try:
                self._check_meta_source(name, dev, want, r.label)
            except Refused as e:
                self._skip_part(name, e)  # (named explicitly: the whole move is refused)
                continue
            planned.append((r, want))
            leaves.append((r.path, t, dev))
        nested: list[Item] = []
        if dest is not None:  # undo finds nested modules and optimizers on its own
            for r in modules:
                try:
                    item = self.add_module(r.label, r.value, dest, None, listed=False)
                except Refused as e:
                    self._skip_part(name, e)
                    continue
                if item is not None:
                    nested.append(item)
                    devices.update(self.torch.device(d) for d in item.from_devices)
            for r in optimizers:
                before = len(self.items)
                try:
                    self.add_optimizer(r.label, r.value, None, listed=False)
                except Refused as e:
                    self._skip_part(name, e)
                nested.extend(self.items[before:])
        wants.update(w for _r, w in planned)
        for item in nested:
            wants.update(self.torch.device(d) for d in item.to_device.split(", "))
        if not planned and not nested:
            if not found:
                self.skip_or_refuse(name, f"{name} holds no tensors")
            elif len(self.skipped) > skipped_before:
                pass  # what stays was said (a part that cannot move); the rest is there
            else:
                where = self.dstr(dest) if dest is not None else "its original devices"
                self.skipped.append((name, f"already on {where}"))
            return
        for r, want in planned:
            if r.kind == Kind.PARAMETER or is_parameter(self.torch, r.value):
                self._move_param_in_place(r.label, r.value, want)
            else:
                self.add_plain(r.value, name, want)
                self.put_back_chain(r.chain, r.value)
        for r in aliases:  # (put back only if it was rebuilt: see transaction._resolve)
            self.put_back_chain(r.chain, r.value)
        seen: set[Any] = set()
        nbytes = 0
        for r in found:
            if r.kind == Kind.TENSOR or r.kind == Kind.PARAMETER:
                key, snb, _s = storage(r.value)
                if key not in seen:
                    seen.add(key)
                    nbytes += snb
        nbytes += sum(item.nbytes for item in nested)
        kind = "container" if objects.kind_of(self.T, obj) in objects.CONTAINERS else "object"
        item = Item(
            name, kind, obj, device_names(devices), nbytes, ", ".join(device_names(wants)), None
        )
        item.leaves = leaves
        self.items.append(item)

    def add_followers(self, extra: Iterable[tuple[str, Any]] = ()) -> None:
        """Optimizers bound to top-level names (and ``extra`` ones) whose parameters move in
        this call move along, so ``opt.step()`` keeps working."""
        if not self.param_dest:
            return
        optim_type = self.types[2]
        candidates = []
        for name, value in list(self.ns.items()):
            if not isinstance(name, str) or is_ipython_bookkeeping(name):
                continue
            if issubclass(type(value), optim_type):
                candidates.append((name, value))
            elif objects.kind_of(self.T, value) in objects.COMPOSITES:
                # an optimizer kept in an attribute or a container (trainer.optimizer)
                found, _walked = self.reach(name, value)
                candidates.extend((r.label, r.value) for r in found if r.kind == Kind.OPTIMIZER)
        candidates.extend(extra)
        for name, value in candidates:
            if id(value) in self.optimizers:
                continue
            state = getattr(value, "state", None)
            if isinstance(state, dict) and any(id(p) in self.param_dest for p in list(state)):
                try:
                    self.add_optimizer(name, value, None)
                except Refused as e:
                    self.skip_or_refuse(name, str(e))

    def add_fast(self, name: str, t: Any, dest: Any) -> None:
        """A plain ``torch.Tensor`` bound to a name: checked and planned in bulk by ``finalize``."""
        bucket = self.fast.get(dest)
        if bucket is None:
            bucket = self.fast[dest] = ([], [])
        bucket[0].append(name)
        bucket[1].append(t)

    def finalize(self) -> None:
        """Check the bulk tensors; those that need care (sharing a storage with anything else
        in the move, autograd leaves with grads, views, storage-less tensors, meta sources)
        go through the general path, the rest form fast sets copied with one C-level map."""
        if not self.fast:
            return
        torch = self.torch
        taken = {key for key, _dest in self.groups} | self._module_storage_keys()
        buckets, self.fast = self.fast, {}
        cpu = torch.device("cpu")
        for dest, (names, tensors) in buckets.items():
            label = self.dstr(dest)
            if all(map(_IS_CPU, tensors)):  # the common case, without a device object each
                devices = [cpu] * len(tensors)
                distinct = {cpu}
            else:
                devices = list(map(_DEVICE, tensors))
                distinct = set(devices)
            if dest in distinct or (
                dest.type != "meta" and any(d.type == "meta" for d in distinct)
            ):
                keep_names, keep_tensors, keep_devices = [], [], []
                for name, t, dev in zip(names, tensors, devices, strict=True):
                    if dev == dest:
                        self.skipped.append((name, f"already on {label}"))
                    elif dev.type == "meta":
                        self.add(name, t, dest)  # refused (named) or skipped, with the reason
                    else:
                        keep_names.append(name)
                        keep_tensors.append(t)
                        keep_devices.append(dev)
                names, tensors, devices = keep_names, keep_tensors, keep_devices
                distinct = set(devices)
            if not names:
                continue
            try:
                storages = list(map(torch.Tensor.untyped_storage, tensors))
            except Exception:  # sparse and other storage-less tensors: one by one
                for name, t in zip(names, tensors, strict=True):
                    self.add(name, t, dest)
                continue
            keys = list(map(_CDATA, storages))
            n = len(names)
            special: set[int] = set()
            flags = list(map(_REQUIRES_GRAD, tensors))
            if True in flags:  # autograd tensors: leaves with grads, graphs; never .grad of those
                special.update(i for i, f in enumerate(flags) if f)
                plain = [t for t, f in zip(tensors, flags, strict=True) if not f]
            else:
                plain = tensors
            if list(map(_GRAD, plain)).count(None) != len(plain):
                special.update(
                    i for i, t in enumerate(tensors) if i not in special and t.grad is not None
                )
            # (A view whose base is not in the move is fine here: .to() copies just the view.
            # A view whose base, or another view of it, is in the move shares its key.)
            if len(set(keys)) != n or not taken.isdisjoint(keys):
                seen: dict[Any, int] = {}
                for i, key in enumerate(keys):
                    if key in taken:
                        special.add(i)
                    elif key in seen:
                        special.update((i, seen[key]))
                    else:
                        seen[key] = i
            if special:
                for i in sorted(special):
                    self.add(names[i], tensors[i], dest)
                keep = [i for i in range(n) if i not in special]
                names = [names[i] for i in keep]
                tensors = [tensors[i] for i in keep]
                devices = [devices[i] for i in keep]
                storages = [storages[i] for i in keep]
                keys = [keys[i] for i in keep]
            if names:
                nbytes = list(map(_NBYTES, tensors))  # what .to() allocates for each
                fs = FastSet(dest, names, tensors, devices, storages, keys, nbytes)
                fs.distinct = distinct if not special else set(devices)
                self.fast_sets.append(fs)

    def _module_storage_keys(self) -> set[Any]:
        keys: set[Any] = set()
        for job in self.modules.values():
            for record in job.params:
                for t in (record.data, record.grad_data):
                    if t is not None:
                        keys.add(storage(t)[0])
            keys.update(key for key, _b, _sub, _k in job.buffers)
        return keys

    # -- memory -----------------------------------------------------------------------------------

    def needed_bytes(self) -> dict[Any, int]:
        """Bytes that will be allocated on each target: each storage once, nothing already
        there; on CUDA rounded up to the caching allocator's 512-byte blocks, so the figure is
        what ``torch.cuda.memory_allocated`` will grow by."""
        need: dict[Any, int] = {}
        counted: set[tuple[Any, Any]] = set()
        data = 0  # the same without the rounding: the bytes of data the move copies

        def add(want: Any, snb: int) -> int:
            nonlocal data
            data += snb
            if want.type == "cuda":
                need[want] = need.get(want, 0) + -(-snb // 512) * 512
            else:
                need[want] = need.get(want, 0) + snb
            return snb

        for job in self.modules.values():
            total = 0
            for record in job.params:
                want = job.target_of(record.param)
                for t in (record.data, record.grad_data):
                    if t is None or t.device == want:
                        continue
                    key, snb, _s = storage(t)
                    if (key, want) not in counted:
                        counted.add((key, want))
                        total += add(want, snb)
            for key, b, _sub, _k in job.buffers:
                want = job.target_of(b)
                if b.device == want or (key, want) in counted:
                    continue
                counted.add((key, want))
                total += add(want, storage(b)[1])
            job.nbytes = total
        for gkey, members in self.groups.items():
            if gkey in counted:  # aliases a module's tensor: lands in the same storage
                continue
            if len(members) == 1:
                t = members[0][0]
                snb = members[0][2] if t._base is None else tensor_nbytes(t)
            else:
                snb = members[0][2]
            add(gkey[1], snb)
        for fs in self.fast_sets:
            size = sum(fs.nbytes)
            data += size
            if fs.dest.type == "cuda":
                size = sum(-(-n // 512) * 512 for n in fs.nbytes)
            need[fs.dest] = need.get(fs.dest, 0) + size
        self.data_bytes = data
        return need


_DEVICE = attrgetter("device")
_IS_CPU = attrgetter("is_cpu")
_REQUIRES_GRAD = attrgetter("requires_grad")
_GRAD = attrgetter("grad")
_NBYTES = attrgetter("nbytes")
_CDATA = attrgetter("_cdata")


def is_history_name(name: str) -> bool:
    return name in _BOOKKEEPING or _HISTORY_NAME.fullmatch(name) is not None


def plan_move(namespace: MutableMapping[str, Any], dest: Any, names: Iterable[str] | None) -> Plan:
    """The plan for moving ``names`` (all movable names when None) of ``namespace`` to ``dest``."""
    plan = Plan(namespace, str(dest), explicit=names is not None)
    plan.dest = dest
    tensor_type, module_type, optim_type = plan.types
    selected: list[tuple[str, Any]] = []
    if names is not None:
        if isinstance(names, str):
            names = [names]
        wanted: list[str] = []
        for name in names:
            if not isinstance(name, str):
                raise MoveError(f"names must be strings, got {type(name).__name__}")
            if name not in namespace:
                if "." in name or "[" in name:
                    top = name.split(".")[0].split("[")[0]
                    raise MoveError(
                        f"{name!r} is not a top-level name: move() takes variable names "
                        f"such as {top!r}"
                    )
                raise MoveError(f"no variable named {name!r} in this namespace")
            if name not in wanted:
                wanted.append(name)
        for name in wanted:
            if is_history_name(name):
                plan.skipped.append((name, f"{name} is IPython's history, not a variable"))
            else:
                selected.append((name, namespace[name]))
    else:
        items = namespace.items()
        # Plain tensors are the bulk of a big namespace: picked out with comprehensions.
        fast_names = [n for n, v in items if type(v) is tensor_type and type(n) is str]
        # (IPython's names start with "_" or are a few fixed ones: checked only for those)
        odd = [n for n in fast_names if n[:1] == "_" or n in IPYTHON_NAMES]
        if odd:
            hidden = {n for n in odd if is_ipython_bookkeeping(n)}
            fast_names = [n for n in fast_names if n not in hidden]
        if fast_names:
            plan.fast[dest] = (fast_names, list(map(namespace.__getitem__, fast_names)))
        for name, value in [(n, v) for n, v in items if type(v) is not tensor_type]:
            if not isinstance(name, str) or is_ipython_bookkeeping(name):
                continue
            kind = objects.kind_of(plan.T, value)
            # what the scan lists as movable: tensors, modules, optimizers, and composites
            # the one walker finds any of them in
            if kind in objects.LEAVES or (
                kind in objects.COMPOSITES and plan.reach(name, value)[0]
            ):
                selected.append((name, value))
    # Modules first (Parameters named on their own then see they move with them), then the
    # rest; optimizers last, because their state follows wherever their parameters end up.
    for name, value in selected:
        if issubclass(type(value), module_type):
            plan.add(name, value, dest)
    for name, value in selected:
        tp = type(value)
        if tp is tensor_type:
            plan.add_fast(name, value, dest)
        elif not issubclass(tp, (module_type, optim_type)):
            plan.add(name, value, dest)
    for name, value in selected:
        if issubclass(type(value), optim_type):
            plan.add(name, value, dest)
    plan.add_followers()
    return plan
