"""Storage identity: the key each storage of a tensor is counted under, once (plain,
data_ptr-0 wrapper subclasses such as the simulated accelerator's, meta, sparse, nested,
quantized and fake tensors).
"""

from __future__ import annotations

from typing import Any

from .kinds import TorchTypes, _class_attr, _mro_of, instance_dict

StorageKey = tuple[Any, ...]


#: storage key -> (device, nbytes the storage holds, or would need on meta)
Storages = dict[StorageKey, tuple[str, int]]


def add_storages(T: TorchTypes, tensor: Any, device: str, into: Storages) -> int:
    """Add ``{storage key: (device, nbytes)}`` for the tensor's storage(s) to ``into``;
    return the bytes they would need (what meta storages would take)."""
    try:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        nbytes = storage.nbytes()
    except Exception:
        return _unusual_storages(T, tensor, device, into)
    if pointer:
        into[(device, pointer)] = (device, nbytes)
        return nbytes
    if device != "meta":  # a wrapper subclass (out-of-tree device): key by its wrapped data
        inner = inner_tensors(T, tensor)
        if inner:
            return sum(add_storages(T, part, device, into) for part in inner)
    # no data pointer (meta, empty): the StorageImpl address identifies the storage
    into[(device, "impl", storage._cdata)] = (device, nbytes)
    return nbytes


def inner_tensors(T: TorchTypes, tensor: Any) -> list[Any]:
    """The tensors a wrapper subclass holds (``__tensor_flatten__`` names, else tensors in its
    instance ``__dict__``): where the data of a data_ptr-0 tensor really lives."""
    found: list[Any] = []
    try:
        flatten = _class_attr(_mro_of(type(tensor)), "__tensor_flatten__")
        if flatten is not None:
            names, _ = tensor.__tensor_flatten__()
            found = [getattr(tensor, name) for name in names]
        else:
            own = instance_dict(tensor)
            if own:
                found = [v for v in own.values() if isinstance(v, T.Tensor)]
    except Exception:
        return []
    return [t for t in found if isinstance(t, T.Tensor) and t is not tensor]


def _unusual_storages(T: TorchTypes, tensor: Any, device: str, into: Storages) -> int:
    """Sparse, nested, wrapper-subclass and fake tensors have no plain storage."""
    inner: list[Any] = []
    try:
        layout = str(tensor.layout)
    except Exception:
        layout = ""
    try:
        if layout == "torch.sparse_coo":
            inner = [tensor._indices(), tensor._values()]
        elif layout in ("torch.sparse_csr", "torch.sparse_bsr"):
            inner = [tensor.crow_indices(), tensor.col_indices(), tensor.values()]
        elif layout in ("torch.sparse_csc", "torch.sparse_bsc"):
            inner = [tensor.ccol_indices(), tensor.row_indices(), tensor.values()]
        elif getattr(tensor, "is_nested", False) is True:
            inner = [tensor.values()]
        else:
            inner = inner_tensors(T, tensor)
    except Exception:
        inner = []
    total = 0
    for part in inner:
        if part is not tensor:
            total += add_storages(T, part, device, into)
    if inner:
        return total
    # Fake and other storage-less tensors: count what they would need, under a private key.
    try:
        nbytes = int(tensor.numel()) * int(tensor.element_size())
    except Exception:
        nbytes = 0
    into[(device, "object", id(tensor))] = (device, nbytes)
    return nbytes
