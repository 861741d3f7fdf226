"""One top-level name, for the scan (:mod:`.scanner`): :func:`_inspect` turns a value into
its entry (:class:`.facts._TensorFacts` for a plain tensor or Parameter, an
:class:`.entries._Entry` otherwise, None for nothing of ours) and never raises: a hostile or
broken object becomes an "unreadable" record. :func:`_still_same` says whether a name that
still holds the same object still has the same facts (cheap signatures), so that a rescan can
reuse its entry.

Pure core: no IPython, no ipywidgets, never imports torch.
"""

from __future__ import annotations

from typing import Any

from .. import objects
from ..objects import Kind, Storages, TorchTypes
from .composites import _composite_entry
from .entries import (
    _Entry,
    _live_submodules,
    _module_entry,
    _module_signature,
    _optimizer_entry,
    _optimizer_signature,
    _unreadable,
)
from .facts import _plain_tensor_facts, _tensor_record, _TensorFacts

# --------------------------------------------------------------------------------------------
# One name


def _inspect(T: TorchTypes, name: str, value: Any) -> _Entry | _TensorFacts | None:
    """One top-level name -> its entry (None: nothing of ours). Never raises."""
    try:
        tp = type(value)
        if tp is T.Tensor or tp is T.Parameter:
            facts = _plain_tensor_facts(T, value, tp)
            if facts is not None:
                return facts
        kind = objects.kind_of(T, value)
        if kind == Kind.TENSOR or kind == Kind.PARAMETER:
            storages: Storages = {}
            record = _tensor_record(T, value, tp, name, name, storages)
            # A Parameter can't be weakly referenced (swap-based Module._apply refuses such
            # tensors) and a tensor's grad can appear in any cell: re-check both next time.
            volatile = record.requires_grad or kind == Kind.PARAMETER
            entry = _Entry(id(value), [record], storages, None, None, volatile)
            # a device's tensor subclass an optimizer updates is reached by its name, like a
            # plain tensor (orphaned_optimizers looks the optimizer's tensors up by id)
            entry.tensor_ids = (id(value),)
            return entry
        if kind == Kind.MODULE:
            return _module_entry(T, value, name)
        if kind == Kind.OPTIMIZER:
            return _optimizer_entry(T, value, name)
        if kind in objects.COMPOSITES:
            return _composite_entry(T, value, name, kind)
    except Exception as error:  # a hostile or broken object: say so, don't fail the scan
        return _Entry(id(value), [_unreadable(name, value, error)], {})
    return None


def _still_same(T: TorchTypes, entry: _Entry | _TensorFacts, value: Any) -> bool:
    """Whether a name that still holds the same object id still has the same facts."""
    if not isinstance(entry, _Entry):
        return False  # a grad-carrying tensor or a Parameter: cheap enough to look again
    try:
        kind = entry.kind
        if kind == Kind.MODULE:
            submodules = _live_submodules(entry.ref)
            return (
                submodules is not None
                and _module_signature(T, submodules) == entry.signature
                and loose_unchanged(entry)
            )
        if kind == Kind.OPTIMIZER:
            return entry.ref() is value and _optimizer_signature(T, value) == entry.signature
        if entry.structure is not None:
            # a container or object: the same shape, and the modules/optimizers it holds
            # unchanged (grad-carrying tensors inside: always looked at again)
            if entry.volatile and entry.ref is None:
                return False
            if objects.signature(T, value, entry.structure) != entry.signature:
                return False
            for held_kind, ref, signature in entry.ref or ():
                if held_kind == Kind.MODULE:
                    submodules = _live_submodules(ref)
                    if submodules is None or _module_signature(T, submodules) != signature:
                        return False
                else:
                    optimizer = ref()
                    if optimizer is None or _optimizer_signature(T, optimizer) != signature:
                        return False
            return True
    except Exception:
        return False
    return False  # tensors with requires_grad / Parameters / composites holding modules


def loose_unchanged(entry: _Entry) -> bool:
    """Whether a module's plain tensor attributes are the tensors its entry was made from."""
    for owner_ref, key, tensor_id in entry.loose:
        owner = owner_ref()
        own = objects.instance_dict(owner) if owner is not None else None
        if own is None or id(own.get(key)) != tensor_id:
            return False
    return True
