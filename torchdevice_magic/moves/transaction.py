"""The transaction: apply a :class:`~.plan.Plan` all or nothing.

1. **Check memory** (nothing touched yet): the bytes that will land on each target fit in its
   free memory, else :class:`MoveError` with the numbers.
2. **Move in place / copy** (no name is rebound yet). Modules move with ``module.to`` semantics
   (``Module._apply``) and Parameters stay the same objects; every parameter's data and
   gradient and every buffer was recorded by the plan so it can be put back. Plain tensors
   are copied but not put anywhere yet. Copies from the CPU to CUDA are staged through pinned
   memory and issued with ``non_blocking=True``.
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
from typing import TYPE_CHECKING, Any

from ..devices import free_bytes as device_free_bytes
from ..units import format_bytes
from .result import MovedItem, MoveError, MoveResult, ProgressCallback, one_line, reason

if TYPE_CHECKING:
    from .plan import Plan


def tensor_nbytes(t: Any) -> int:
    """Bytes of a tensor without storage access (sparse, nested, some subclasses)."""
    try:
        if t.is_sparse:
            return int(t._values().nbytes + t._indices().nbytes)
        return int(t.numel() * t.element_size())
    except Exception:
        return 0


def storage(t: Any) -> tuple[Any, int, Any]:
    """(key, nbytes, storage object) of a tensor's storage; a per-tensor key when it has none."""
    try:
        s = t.untyped_storage()
        n = s.nbytes()
        if n == 0 and t.numel() and t.device.type != "meta":
            # a storage-less wrapper (an out-of-tree device such as the simulated one): its
            # data, and the sharing between its views, live in the tensor it wraps
            inner = _inner(t)
            if inner is t:
                return ("tensor", id(t)), tensor_nbytes(t), None
            s = inner.untyped_storage()
            return ("inner", s._cdata), s.nbytes(), s
        return s._cdata, n, s
    except Exception:
        return ("tensor", id(t)), tensor_nbytes(t), None


def _inner(t: Any) -> Any:
    """The one tensor a storage-less wrapper keeps its data in (``__tensor_flatten__``, read
    through objects/storage.py), or ``t`` itself."""
    from .. import objects

    try:
        if t.untyped_storage().nbytes() == 0 and t.numel() and t.device.type != "meta":
            T = objects.TorchTypes.current()
            inner = objects.inner_tensors(T, t) if T is not None else []
            if len(inner) == 1:
                return inner[0]
    except Exception:
        pass
    return t


def _geometry(t: Any) -> tuple[Any, Any, int]:
    """(size, stride, storage offset) of ``t`` in its storage; a wrapper's own geometry is
    always contiguous, the real one is its inner tensor's."""
    g = _inner(t)
    return g.size(), g.stride(), g.storage_offset()


def _covers(t: Any, snb: int) -> bool:
    """Whether ``t`` spans its whole storage (so the copy of ``t`` can own the moved one)."""
    g = _inner(t)
    return g.storage_offset() == 0 and g.is_contiguous() and g.nbytes == snb


# --------------------------------------------------------------------------------------------
# In-place moves (modules, Parameters) and how to put them back


class ParamRecord:
    """What a Parameter held before the move: enough to put it back exactly."""

    __slots__ = ("param", "data", "cls", "requires_grad", "grad", "grad_data")

    def __init__(self, param: Any) -> None:
        self.param = param
        self.data = param.data  # a plain alias of the old storage: keeps it alive until commit
        self.cls = type(param)
        self.requires_grad = param.requires_grad
        grad = param.grad
        self.grad = grad
        self.grad_data = grad.data if grad is not None else None

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


_IN_PLACE_OK: dict[tuple[str, str], bool] = {}


def _in_place_ok(src: Any, dst: Any) -> bool:
    """Whether ``param.data = tensor_on_dst`` works for a parameter on ``src`` (cached)."""
    import torch

    key = (src.type, dst.type)
    ok = _IN_PLACE_OK.get(key)
    if ok is None:
        a = torch.empty(0, device=src)
        b = torch.empty(0, device=dst)
        ok = _IN_PLACE_OK[key] = bool(torch._has_compatible_shallow_copy_type(a, b))
    return ok


class ModuleJob:
    """One module (or a holder of one standalone Parameter) moved in place, and its records."""

    __slots__ = ("name", "module", "dest", "dest_of", "subs", "params", "buffers", "nbytes")

    def __init__(self, name: str, module: Any, dest: Any, dest_of: dict[int, Any] | None) -> None:
        self.name = name
        self.module = module
        self.dest = dest  # one device for everything, or None and ``dest_of`` (undo)
        self.dest_of = dest_of
        self.subs: list[tuple[Any, list[tuple[str, Any]], list[tuple[str, Any]]]] = []
        self.params: list[ParamRecord] = []
        self.buffers: list[tuple[Any, Any, Any, str]] = []  # (storage key, buffer, owner, key)
        self.nbytes = 0  # bytes it will copy (for progress)

    def target_of(self, t: Any) -> Any:
        if self.dest is not None:
            return self.dest
        return (self.dest_of or {}).get(id(t), t.device)

    def apply(self, copier: Copier | None = None) -> None:
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
                to = copier.to if copier is not None else _plain_to

                def convert(t: Any) -> Any:
                    d = dest if dest is not None else dest_of.get(id(t), t.device)
                    return t if t.device == d else to(t, d)

                self.module._apply(convert)
        finally:
            if swap:
                future.set_swap_module_params_on_conversion(False)
        for sub, params, _buffers in self.subs:
            for key, p in params:
                if _slot(sub._parameters, key) is not p:
                    raise RuntimeError(
                        f"{type(sub).__name__}.{key} was replaced by a new Parameter "
                        "(optimizers would lose it)"
                    )

    in_place_ok = staticmethod(lambda a, b: _in_place_ok(a, b))

    def _needs_swap(self) -> bool:
        """Some devices' tensors cannot take another device's data in place (cpu and meta:
        different TensorImpl types), so ``module.to`` would put new Parameter objects in the
        module; swapping keeps the objects, and the optimizers that hold them, valid."""
        import torch

        if torch.__future__.get_overwrite_module_params_on_conversion():
            return True
        targets = {self.dest} if self.dest is not None else set((self.dest_of or {}).values())
        sources = {r.data.device for r in self.params}
        return any(not _in_place_ok(a, b) for a in sources for b in targets if a != b)

    def restore(self) -> None:
        for sub, params, buffers in self.subs:
            for key, p in params:
                if _slot(sub._parameters, key) is not p:
                    sub._parameters[key] = p
            for key, b in buffers:
                if _slot(sub._buffers, key) is not b:
                    sub._buffers[key] = b
        for record in self.params:
            record.restore()


def _slot(table: Any, key: str) -> Any:
    """``module._parameters[key]`` or None; TorchScript modules' tables (OrderedDictWrapper
    over the C++ module) have no ``get``."""
    try:
        return table[key]
    except (KeyError, RuntimeError):
        return None


def _plain_to(t: Any, dest: Any) -> Any:
    return t.to(dest, non_blocking=True) if dest.type == "cuda" else t.to(dest)


class FastSet:
    """Plain tensors, each alone in its storage, going to one device with no extra care."""

    __slots__ = (
        "dest",
        "names",
        "tensors",
        "devices",
        "distinct",
        "storages",
        "keys",
        "nbytes",
        "news",
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
        self.devices = devices
        self.storages = storages
        self.keys = keys
        self.nbytes = nbytes
        self.news: list[Any] = []
        self.distinct: set[Any] = set()


class _RunState:
    """What the run did so far: what rollback undoes, and what failed."""

    __slots__ = ("current", "applied", "new_of", "committed", "fast_done")

    def __init__(self) -> None:
        self.current = ""
        self.fast_done: list[tuple[FastSet, int]] = []
        self.applied: list[ModuleJob] = []
        self.new_of: dict[int, Any] = {}
        self.committed: list[tuple[Any, str, Any, Any]] = []


def _anchor(anchors: dict[Any, Any], old: Any, new: Any, base_obj: Any) -> None:
    """Record that ``old``'s storage now lives in ``new`` when both cover a whole storage."""
    try:
        key, snb, _s = storage(old)
        if not _covers(old, snb):
            return  # covers part of its storage: aliases of the rest are copied on their own
        if _geometry(new)[2] != 0 or storage(new)[1] != snb:
            return
        anchors.setdefault((key, new.device), (new, base_obj, 0))
    except Exception:
        return


def _copy_one(t: Any, dest: Any, new_of: dict[int, Any], copier: Copier) -> Any:
    """``t`` on ``dest`` as users expect: a leaf stays a leaf with requires_grad and its grad;
    a tensor inside an autograd graph keeps its graph (like ``t.to``)."""
    if t.requires_grad:
        if not t.is_leaf:
            return _plain_to(t, dest)  # keeps its graph, like t.to
        new = copier.to(t.detach(), dest).requires_grad_(True)
    else:
        new = copier.to(t, dest)
    g = t.grad
    if g is not None:
        new.grad = _grad_on(g, dest, new_of, copier)
    return new


def _grad_on(g: Any, dest: Any, new_of: dict[int, Any], copier: Copier) -> Any:
    ng = new_of.get(id(g))
    if ng is None:
        ng = new_of[id(g)] = _copy_one(g, dest, new_of, copier) if g.device != dest else g
    return ng


def _copy_shared(
    torch: Any,
    members: list[Any],
    dest: Any,
    anchor: Any,
    new_of: dict[int, Any],
    copier: Copier,
) -> None:
    """Tensors sharing one storage: copy the storage once and rebuild each over it, views as
    views of their (moved) base so ``v._base is b`` still holds."""
    if anchor is not None:
        anchor_new, base_obj, base_offset = anchor
    else:
        anchor_new = base_obj = None
        base_offset = 0
        first, _name, snb, storage = members[0]
        roots: dict[int, Any] = {}
        for t, *_rest in members:
            root = t._base if t._base is not None else t
            roots.setdefault(id(root), root)
        for root in roots.values():  # the first root that spans the storage owns it
            try:
                covers = _covers(root, snb)
            except Exception:
                covers = False
            if covers:
                anchor_new = new_of.get(id(root))
                if anchor_new is None:
                    anchor_new = new_of[id(root)] = _copy_one(root, dest, new_of, copier)
                base_obj = root
                break
        if anchor_new is None:
            if storage is None:  # no storage to share (sparse, some subclasses): copy each
                for t, *_rest in members:
                    if id(t) not in new_of:
                        new_of[id(t)] = _copy_one(t, dest, new_of, copier)
                return
            # No single owner: move the raw bytes once and lay every tensor over them.
            flat = torch.empty(0, dtype=torch.uint8, device=storage.device)
            flat.set_(storage, 0, (snb,), (1,))
            anchor_new = copier.to(flat, dest)
            if anchor_new is flat:  # a wrapper's data already lives on the target's kind
                anchor_new = flat.clone()
    storage_new = None
    for t, *_rest in members:
        if id(t) in new_of:
            continue
        if base_obj is not None and t._base is base_obj and t.dtype == anchor_new.dtype:
            size, stride, t_offset = _geometry(t)
            offset = t_offset - base_offset + _geometry(anchor_new)[2]
            with torch.set_grad_enabled(t.requires_grad):
                v = anchor_new.as_strided(size, stride, offset)
            if t.requires_grad and not v.requires_grad:
                v.requires_grad_(True)
        else:
            if storage_new is None:
                storage_new = anchor_new.untyped_storage()
            v = _alias(torch, t, anchor_new, storage_new, base_offset)
            if t.requires_grad:
                v.requires_grad_(True)
        if t.is_leaf and v.is_leaf:
            g = t.grad
            if g is not None:
                v.grad = _grad_on(g, dest, new_of, copier)
        new_of[id(t)] = v


def _alias(torch: Any, t: Any, anchor_new: Any, storage_new: Any, base_offset: int) -> Any:
    """A tensor with ``t``'s shape, strides and offset over the moved storage."""
    size, stride, t_offset = _geometry(t)
    try:
        v = torch.empty((0,), dtype=t.dtype, device=anchor_new.device)
        return v.set_(storage_new, t_offset, size, stride)
    except RuntimeError:
        if t.dtype != anchor_new.dtype:
            raise
        # Devices whose tensors cannot be re-pointed at a storage: a detached view.
        offset = t_offset - base_offset + _geometry(anchor_new)[2]
        return anchor_new.detach().as_strided(size, stride, offset)


def _still_held(
    held: list[tuple[Any, Any, int]], fast_held: list[tuple[list[Any], list[Any]]]
) -> int:
    """Bytes of old storages that something other than this move still holds.

    Called once the move dropped every tensor it held, keeping only the storages (``held``
    triples of storage, key, bytes; for bulk tensors ``fast_held`` pairs of storage and key
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
        total = sum(n for _s, key, n in held if use_count(key) > 1)
        for storages, keys in fast_held:
            shared = map((1).__lt__, map(use_count, keys))
            total += sum(map(torch.UntypedStorage.nbytes, compress(storages, shared)))
        return total
    except Exception:
        return 0
    finally:
        held.clear()
        fast_held.clear()


class _Progress:
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


# --------------------------------------------------------------------------------------------
# Copies to CUDA through pinned memory


class _Stager:
    """CPU -> one CUDA device through a ring of pinned staging buffers.

    Each tensor is copied (host memcpy) into pinned memory and from there to a new device
    tensor with ``non_blocking=True``: the copies overlap, and the transaction synchronises
    once at the end. A buffer is reused only after an event says its copies are done, so a
    move bigger than the ring waits per buffer (every 64 MiB), never per tensor. Pinned
    buffers come from torch's caching host allocator and are reused by the next move.
    """

    CHUNK = 64 << 20
    RING = 2

    def __init__(self, torch: Any, dest: Any) -> None:
        self.torch = torch
        self.dest = dest
        self.bufs: list[Any] = []
        self.events: list[Any] = []
        self.cur = -1
        self.off = self.CHUNK  # forces a buffer on first use
        self.usable = True  # False once pinned memory could not be had: plain copies then

    def eligible(self, t: Any) -> bool:
        torch = self.torch
        try:
            return (
                self.usable
                and t.device.type == "cpu"
                and t.layout == torch.strided
                and not t.is_quantized
                and type(t) in (torch.Tensor, torch.nn.Parameter)
                and t.is_contiguous()
                and 0 < t.nbytes <= self.CHUNK
            )
        except Exception:
            return False

    def _next_buffer(self) -> None:
        torch = self.torch
        if self.cur >= 0:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.dest))
            self.events[self.cur] = event
        self.cur = (self.cur + 1) % self.RING
        if self.cur >= len(self.bufs):
            try:
                buffer = torch.empty(self.CHUNK, dtype=torch.uint8, pin_memory=True)
            except RuntimeError:  # no pinned memory here (limits, containers): plain copies
                self.usable = False
                raise _NoPinnedMemory from None
            self.bufs.append(buffer)
            self.events.append(None)
        elif self.events[self.cur] is not None:
            self.events[self.cur].synchronize()  # its copies are done: the buffer is free
        self.off = 0

    def to(self, t: Any) -> Any:
        torch = self.torch
        nb = t.nbytes
        off = -(-self.off // 64) * 64
        if off + nb > self.CHUNK:
            self._next_buffer()
            off = 0
        staged = self.bufs[self.cur][off : off + nb].view(t.dtype).view(t.shape)
        staged.copy_(t)
        new = torch.empty(t.shape, dtype=t.dtype, device=self.dest)
        new.copy_(staged, non_blocking=True)
        self.off = off + nb
        return new


class Copier:
    """How the transaction copies one tensor to a device: staged through pinned memory for
    CPU -> CUDA, ``t.to(dest)`` otherwise (``non_blocking`` towards CUDA)."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.stagers: dict[Any, _Stager] = {}
        self.stage = True

    def to(self, t: Any, dest: Any) -> Any:
        if dest.type != "cuda":
            return t.to(dest)
        # (Module._apply hands over Parameters under no_grad: their copies carry no graph)
        if self.stage and (not t.requires_grad or not self.torch.is_grad_enabled()):
            stager = self.stagers.get(dest)
            if stager is None:
                stager = self.stagers[dest] = _Stager(self.torch, dest)
            if stager.eligible(t):
                try:
                    return stager.to(t)
                except _NoPinnedMemory:
                    pass
        return t.to(dest, non_blocking=True)


class _NoPinnedMemory(Exception):
    """Pinned staging memory could not be allocated (the copy goes the plain way)."""


# --------------------------------------------------------------------------------------------
# Running a plan


def check_memory(plan: Plan, need: dict[Any, int], free_bytes: int | None) -> None:
    for target, nbytes in need.items():
        if nbytes <= 0:
            continue
        if free_bytes is not None:
            free: int | None = int(free_bytes)
        elif target.type == "meta":
            free = None  # meta stores nothing
        else:
            free = device_free_bytes(target)
        if free is not None and nbytes > free:
            raise MoveError(
                f"needs {format_bytes(nbytes)}, {format_bytes(max(free, 0))} free on "
                f"{target} — nothing was moved"
            )


def execute(
    plan: Plan,
    progress: ProgressCallback | None,
    started: float,
    free_bytes: int | None,
    to_meta: bool,
) -> MoveResult:
    """Apply ``plan``: all of it, or nothing (the result's ``failed`` then says why)."""
    from .undo import UndoRecord

    plan.finalize()
    need = plan.needed_bytes()
    check_memory(plan, need, free_bytes)  # raises MoveError: nothing touched yet
    total = plan.data_bytes
    state = _RunState()
    try:
        _run(plan, state, _Progress(progress, total) if progress is not None else None, need)
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
    moved.extend(item for fs in plan.fast_sets for item in _fast_items(plan, fs))
    record = UndoRecord(plan.ns, to_meta, items, plan.fast_sets, state.new_of) if moved else None
    held = _old_storages(plan)
    # Drop every reference the plan holds to the old tensors, then see which storages live on.
    del items, state
    plan.items = []
    plan.groups = {}
    plan.modules = {}
    plan.param_records = {}
    plan.writes = []
    plan.rebuilds = {}
    plan.clear_walks()
    fast_held = [(fs.storages, fs.keys) for fs in plan.fast_sets]
    plan.fast_sets = []
    still_held = _still_held(held, fast_held)
    return MoveResult(
        device=plan.label,
        moved=moved,
        skipped=list(plan.skipped),
        seconds=time.perf_counter() - started,
        bytes_moved=total,
        predicted_bytes=sum(need.values()),
        still_held_bytes=still_held,
        _undo=record,
    )


def _fast_items(plan: Plan, fs: FastSet) -> Iterable[MovedItem]:
    froms = {d: (plan.dstr(d),) for d in fs.distinct}
    if len(froms) == 1:
        sources: Iterable[tuple[str, ...]] = repeat(next(iter(froms.values())))
    else:
        sources = map(froms.__getitem__, fs.devices)
    fields = zip(
        fs.names,
        repeat("tensor"),
        fs.nbytes,
        sources,
        repeat(plan.dstr(fs.dest)),
        strict=False,  # repeat() is endless
    )
    return map(tuple.__new__, repeat(MovedItem), fields)


def _resolve(plan: Plan, old: Any, new_of: dict[int, Any], memo: dict[int, Any]) -> Any:
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
        from .. import objects

        container, kind, parts = entry
        changes = {key: _resolve(plan, child, new_of, memo) for key, child in parts}
        new = memo[id(old)] = objects.rebuilt(container, kind, changes)
    return new


def _run(plan: Plan, state: _RunState, report: _Progress | None, need: dict[Any, int]) -> None:
    from .plan import NAMESPACE, put_back

    torch = plan.torch
    copier = Copier(torch)
    # 1. Modules and Parameters, in place.
    for job in plan.modules.values():
        state.current = job.name
        state.applied.append(job)
        job.apply(copier)
        if report is not None:
            report.add(job.nbytes)
    # 2. Plain tensors: copies, not yet visible.
    new_of = state.new_of
    anchors = _anchors(plan, new_of) if plan.modules and plan.groups else {}
    state.current = ""
    for gkey, members in plan.groups.items():
        if len(members) == 1 and gkey not in anchors:
            t = members[0][0]
            if id(t) not in new_of:
                state.current = members[0][1]
                new_of[id(t)] = _copy_one(t, gkey[1], new_of, copier)
        else:
            state.current = members[0][1]
            _copy_shared(torch, members, gkey[1], anchors.get(gkey), new_of, copier)
        if report is not None:
            report.add(members[0][2])
    to = torch.Tensor.to  # looked up now: tests replace it to inject faults
    for fs in plan.fast_sets:
        news = fs.news = []
        try:
            if fs.dest.type == "cuda":
                news.extend(map(copier.to, fs.tensors, repeat(fs.dest)))
            elif report is None:
                news.extend(map(to, fs.tensors, repeat(fs.dest)))
            else:
                step = max(len(fs.tensors) // 100, 1)
                for i in range(0, len(fs.tensors), step):
                    news.extend(map(to, fs.tensors[i : i + step], repeat(fs.dest)))
                    report.add(sum(fs.nbytes[i : i + step]))
        except BaseException:
            state.current = fs.names[len(news)] if len(news) < len(fs.names) else ""
            raise
    # 3. One synchronisation: CUDA copies were issued with non_blocking=True.
    state.current = ""
    cuda = {d for d in need if d.type == "cuda"}
    cuda.update(d for d in _source_devices(plan) if d.type == "cuda")
    for fs in plan.fast_sets:
        cuda.update(d for d in fs.distinct if d.type == "cuda")
    for d in cuda:
        torch.cuda.synchronize(d)
    # 4. Commit: new immutable containers first, then every write; rebinding names, items,
    # attributes and optimizer state cannot run out of device memory.
    memo: dict[int, Any] = {}
    resolved: list[tuple[Any, str, Any, Any, Any]] = []
    for holder, kind, key, old in plan.writes:
        new = _resolve(plan, old, new_of, memo)
        if new is not old:
            resolved.append((holder, kind, key, old, new))
    committed = state.committed
    for holder, kind, key, old, new in resolved:
        state.current = key if kind == NAMESPACE and isinstance(key, str) else ""
        committed.append((holder, kind, key, old))
        put_back(holder, kind, key, new)
    state.current = ""
    ns = plan.ns
    plain_dict = type(ns) is dict
    for fs in plan.fast_sets:
        if plain_dict:
            state.fast_done.append((fs, len(fs.names)))
            ns.update(zip(fs.names, fs.news, strict=True))
        else:
            state.fast_done.append((fs, 0))
            for count, (name, new) in enumerate(zip(fs.names, fs.news, strict=True), 1):
                state.current = name
                ns[name] = new
                state.fast_done[-1] = (fs, count)
    state.current = ""
    if report is not None:
        report.finish()


def _source_devices(plan: Plan) -> set[Any]:
    devices: set[Any] = set()
    for item in plan.items:
        for name in item.from_devices:
            if name.startswith("cuda"):
                devices.add(plan.torch.device(name))
    return devices


def _anchors(plan: Plan, new_of: dict[int, Any]) -> dict[tuple[Any, Any], tuple[Any, Any, int]]:
    """Old storage -> (the tensor that now owns the moved storage, the old object views
    hang from, its old offset) for storages moved in place by modules and Parameters.
    Buffers that ``module.to`` rebound are also mapped by id, so a name bound to a buffer
    follows it."""
    anchors: dict[tuple[Any, Any], tuple[Any, Any, int]] = {}
    for job in plan.modules.values():
        for record in job.params:
            p = record.param
            _anchor(anchors, record.data, p, p)
        for _key, b, sub, k in job.buffers:
            nb = _slot(sub._buffers, k)
            if nb is not None and nb is not b:
                new_of.setdefault(id(b), nb)
                _anchor(anchors, b, nb, b)
    return anchors


def _rollback(plan: Plan, state: _RunState) -> list[str]:
    from .plan import NAMESPACE, put_back

    problems: list[str] = []
    for fs, count in reversed(state.fast_done):
        try:
            plan.ns.update(zip(fs.names[:count], fs.tensors[:count], strict=True))
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
        s = members[0][3]
        if s is not None:
            out[key] = s
    for job in plan.modules.values():
        for record in job.params:
            want = job.target_of(record.param)
            for t in (record.data, record.grad_data):
                if t is not None and t.device != want:  # (what was already there stayed)
                    key, _n, s = storage(t)
                    if s is not None:
                        out.setdefault(key, s)
        for key, b, _sub, _k in job.buffers:
            if b.device != job.target_of(b):
                s = storage(b)[2]
                if s is not None:
                    out.setdefault(key, s)
    return [(s, key, int(s.nbytes())) for key, s in out.items()]
