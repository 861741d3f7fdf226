"""Copies that keep what users rely on: a leaf stays a leaf with ``requires_grad`` and its
``.grad``; a tensor inside an autograd graph keeps its graph; tensors sharing one storage (two
names for one tensor, a view and its base, a ``state_dict()`` alias of a parameter) share one
storage on the target too, which is copied once.

A copy is not visible until the commit: what is made here is kept in ``new_of`` (id of the old
tensor -> its copy).
"""

from __future__ import annotations

from typing import Any

from .jobs import Plan, QueuedTensor, TensorCopier, inner_of, plain_to, storage_of, table_entry

#: (the tensor that owns a moved storage, the old object views hang from, its old offset)
Anchor = tuple[Any, Any, int]


def geometry(t: Any) -> tuple[Any, Any, int]:
    """(size, stride, storage offset) of ``t`` in its storage; a wrapper's own geometry is
    always contiguous, the real one is its inner tensor's."""
    g = inner_of(t)
    return g.size(), g.stride(), g.storage_offset()


def spans_storage(t: Any, storage_bytes: int) -> bool:
    """Whether ``t`` spans its whole storage of ``storage_bytes`` (so the copy of ``t`` can
    own the moved one)."""
    g = inner_of(t)
    return g.storage_offset() == 0 and g.is_contiguous() and g.nbytes == storage_bytes


def copy_one(t: Any, dest: Any, new_of: dict[int, Any], copier: TensorCopier) -> Any:
    """``t`` on ``dest`` as users expect: a leaf stays a leaf with requires_grad and its grad;
    a tensor inside an autograd graph keeps its graph (like ``t.to``)."""
    if t.requires_grad:
        if not t.is_leaf:
            return plain_to(t, dest)  # keeps its graph, like t.to
        new = copier.to(t.detach(), dest).requires_grad_(True)
    else:
        new = copier.to(t, dest)
    g = t.grad
    if g is not None:
        new.grad = grad_on(g, dest, new_of, copier)
    return new


def grad_on(g: Any, dest: Any, new_of: dict[int, Any], copier: TensorCopier) -> Any:
    """The gradient ``g`` on ``dest``, copied once however many tensors it belongs to."""
    ng = new_of.get(id(g))
    if ng is None:
        ng = new_of[id(g)] = copy_one(g, dest, new_of, copier) if g.device != dest else g
    return ng


def _owner(
    torch: Any,
    members: list[QueuedTensor],
    dest: Any,
    new_of: dict[int, Any],
    copier: TensorCopier,
) -> Anchor | None:
    """The copy that owns the moved storage: the copy of the first tensor (or view base)
    spanning the whole storage, else the raw bytes moved once; None when there is no storage
    to share (each member was then copied on its own)."""
    snb, storage = members[0].storage_bytes, members[0].storage
    roots: dict[int, Any] = {}
    for queued in members:
        t = queued.tensor
        root = t._base if t._base is not None else t
        roots.setdefault(id(root), root)
    for root in roots.values():
        try:
            spans = spans_storage(root, snb)
        except Exception:
            spans = False
        if spans:
            owner = new_of.get(id(root))
            if owner is None:
                owner = new_of[id(root)] = copy_one(root, dest, new_of, copier)
            return owner, root, 0
    if storage is None:  # no storage to share (sparse, some subclasses): copy each
        for queued in members:
            if id(queued.tensor) not in new_of:
                new_of[id(queued.tensor)] = copy_one(queued.tensor, dest, new_of, copier)
        return None
    # No single owner: move the raw bytes once and lay every tensor over them.
    flat = torch.empty(0, dtype=torch.uint8, device=storage.device)
    flat.set_(storage, 0, (snb,), (1,))
    owner = copier.to(flat, dest)
    if owner is flat:  # a wrapper's data already lives on the target's kind
        owner = flat.clone()
    return owner, None, 0


def copy_shared(
    torch: Any,
    members: list[QueuedTensor],
    dest: Any,
    anchor: Anchor | None,
    new_of: dict[int, Any],
    copier: TensorCopier,
) -> None:
    """Tensors sharing one storage: copy the storage once and rebuild each over it, views as
    views of their (moved) base so ``v._base is b`` still holds. ``anchor``: where a module
    moved in place already put this storage."""
    if anchor is None:
        anchor = _owner(torch, members, dest, new_of, copier)
        if anchor is None:
            return
    owner, base_obj, base_offset = anchor
    owner_storage = None
    for queued in members:
        t = queued.tensor
        if id(t) in new_of:
            continue
        if base_obj is not None and t._base is base_obj and t.dtype == owner.dtype:
            size, stride, t_offset = geometry(t)
            offset = t_offset - base_offset + geometry(owner)[2]
            with torch.set_grad_enabled(t.requires_grad):
                v = owner.as_strided(size, stride, offset)
            if t.requires_grad and not v.requires_grad:
                v.requires_grad_(True)
        else:
            if owner_storage is None:
                owner_storage = owner.untyped_storage()
            v = alias_over(torch, t, owner, owner_storage, base_offset)
            if t.requires_grad:
                v.requires_grad_(True)
        if t.is_leaf and v.is_leaf:
            g = t.grad
            if g is not None:
                v.grad = grad_on(g, dest, new_of, copier)
        new_of[id(t)] = v


def alias_over(torch: Any, t: Any, owner: Any, owner_storage: Any, base_offset: int) -> Any:
    """A tensor with ``t``'s shape, strides and offset over the moved storage."""
    size, stride, t_offset = geometry(t)
    try:
        v = torch.empty((0,), dtype=t.dtype, device=owner.device)
        return v.set_(owner_storage, t_offset, size, stride)
    except RuntimeError:
        if t.dtype != owner.dtype:
            raise
        # Devices whose tensors cannot be re-pointed at a storage: a detached view.
        offset = t_offset - base_offset + geometry(owner)[2]
        return owner.detach().as_strided(size, stride, offset)


def _anchor(anchors: dict[Any, Anchor], old: Any, new: Any, base_obj: Any) -> None:
    """Record that ``old``'s storage now lives in ``new`` when both cover a whole storage."""
    try:
        key, snb, _s = storage_of(old)
        if not spans_storage(old, snb):
            return  # covers part of its storage: aliases of the rest are copied on their own
        if geometry(new)[2] != 0 or storage_of(new)[1] != snb:
            return
        anchors.setdefault((key, new.device), (new, base_obj, 0))
    except Exception:
        return


def moved_in_place(plan: Plan, new_of: dict[int, Any]) -> dict[tuple[Any, Any], Anchor]:
    """Old storage -> (the tensor that now owns the moved storage, the old object views
    hang from, its old offset) for storages moved in place by modules and Parameters.
    Buffers that ``module.to`` rebound are also mapped by id, so a name bound to a buffer
    follows it."""
    anchors: dict[tuple[Any, Any], Anchor] = {}
    for job in plan.modules.values():
        for record in job.params:
            p = record.param
            _anchor(anchors, record.data, p, p)
        for buffer in job.buffers:
            b = buffer.buffer
            nb = table_entry(buffer.owner._buffers, buffer.key)
            if nb is not None and nb is not b:
                new_of.setdefault(id(b), nb)
                _anchor(anchors, b, nb, b)
    return anchors
