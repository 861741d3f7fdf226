"""Storage identity: the key each storage of a tensor is counted under, once (plain,
data_ptr-0 wrapper subclasses such as the simulated accelerator's, meta, sparse, nested,
quantized and fake tensors).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any, NamedTuple

from .kinds import TorchTypes, _class_attr, _mro_of, instance_dict

StorageKey = tuple[Any, ...]


class StorageIdentity(NamedTuple):
    """The one storage a tensor's data lives in, as the scan counts it."""

    key: StorageKey
    nbytes: int  # what the whole storage holds
    storage: Any  # the UntypedStorage, None when the data is in no single storage


def storage_key(device: str, storage: Any) -> StorageKey:
    """THE key of an untyped storage on ``device``: ``(device, data pointer)``; a storage
    without one (meta, empty) by its StorageImpl address."""
    pointer = storage.data_ptr()
    return (device, pointer) if pointer else (device, "impl", storage._cdata)


def tensor_bytes(tensor: Any) -> int:
    """Bytes of a tensor's data without storage access (sparse: values and indices)."""
    try:
        if tensor.is_sparse:
            return int(tensor._values().nbytes + tensor._indices().nbytes)
        return int(tensor.numel() * tensor.element_size())
    except Exception:
        return 0


def storage_identity(T: TorchTypes | None, tensor: Any) -> StorageIdentity:
    """The key :func:`add_storages` counts ``tensor``'s storage under, with its bytes and the
    storage itself: a data_ptr-0 wrapper holding one tensor is that tensor's storage; a tensor
    whose data is in no single storage (sparse, nested, a wrapper of several, fake) is keyed as
    itself, ``(device, "object", id)``."""
    try:
        device = str(tensor.device)
        storage = tensor.untyped_storage()
        nbytes = storage.nbytes()
        pointer = storage.data_ptr()
    except Exception:
        return StorageIdentity(
            (_device_of(tensor), "object", id(tensor)), tensor_bytes(tensor), None
        )
    if not pointer and nbytes == 0 and device != "meta" and tensor.numel():
        inner = inner_tensors(T, tensor) if T is not None else []
        if len(inner) != 1:
            return StorageIdentity((device, "object", id(tensor)), tensor_bytes(tensor), None)
        storage = inner[0].untyped_storage()
        nbytes = storage.nbytes()
    return StorageIdentity(storage_key(device, storage), nbytes, storage)


def _device_of(tensor: Any) -> str:
    try:
        return str(tensor.device)
    except Exception:
        return "?"


#: storage key -> (device, nbytes the storage holds, or would need on meta; a fake holds 0)
Storages = dict[StorageKey, tuple[str, int]]


def add_storages(T: TorchTypes, tensor: Any, device: str, into: Storages) -> int:
    """Add ``{storage key: (device, nbytes)}`` for the tensor's storage(s) to ``into``;
    return the bytes they would need (what meta storages would take)."""
    try:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        nbytes = storage.nbytes()
    except Exception:
        return unusual_storages(T, tensor, device, into)
    if pointer:
        into[storage_key(device, storage)] = (device, nbytes)
        return nbytes
    if device != "meta":  # a wrapper subclass (out-of-tree device): key by its wrapped data
        inner = inner_tensors(T, tensor)
        if inner:
            return sum(add_storages(T, part, device, into) for part in inner)
    # no data pointer (meta, empty, fake): the StorageImpl address identifies the storage; a
    # fake on a real device holds nothing there (it only would need its bytes)
    held = 0 if device != "meta" and nbytes and is_fake(T, tensor) else nbytes
    into[storage_key(device, storage)] = (device, held)
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
    found = [_unwrapped(T, t) for t in found if isinstance(t, T.Tensor)]
    return [t for t in found if t is not tensor]


#: device types whose backend wraps every tensor for functionalization (torch/_lazy, torch_xla)
BACKEND_FUNCTIONALIZED = frozenset({"lazy", "xla"})


def functional_inner(T: TorchTypes, tensor: Any) -> Any:
    """The tensor a functionalization wrapper stands for (the wrapper ``torch.func.functionalize``
    makes, and the one a ``FunctionalTensor`` holds as ``elem``), or None for any other. Lazy
    (LTC) and XLA tensors are functionalization wrappers too, made by their backend: their inner
    tensor has no storage to read (reading it crashes the process), so they stay as they are."""
    try:
        if tensor.device.type in BACKEND_FUNCTIONALIZED:
            return None
        if T.torch._is_functional_tensor(tensor):
            return T.torch._from_functional_tensor(tensor)
    except Exception:  # a torch without functionalization, or a tensor it refuses
        pass
    return None


def _unwrapped(T: TorchTypes, tensor: Any) -> Any:
    inner = functional_inner(T, tensor)
    return tensor if inner is None else inner


def is_fake(T: TorchTypes, tensor: Any) -> bool:
    """Whether ``tensor`` is one of torch's fake tensors (``FakeTensorMode``: torch.compile,
    export, the dry run), which have a device, shape and dtype but no data; or a wrapper of fake
    tensors only (a ``FunctionalTensor`` over a fake), as torch's own ``is_fake`` counts them.
    The class comes from torch's module, there once anything made a fake tensor; a tensor's
    ``__class__`` is never read, nor is its type's name trusted (a user's ``FakeBatch`` is real).
    """
    fake_type = getattr(sys.modules.get("torch._subclasses.fake_tensor"), "FakeTensor", None)
    if fake_type is None:
        return False
    tp = type(tensor)
    if issubclass(tp, fake_type):
        return True
    if tp is T.Tensor or tp is T.Parameter:
        inner = functional_inner(T, tensor)
        return inner is not None and is_fake(T, inner)
    inner = inner_tensors(T, tensor)
    return bool(inner) and all(is_fake(T, part) for part in inner)


def unusual_storages(T: TorchTypes, tensor: Any, device: str, into: Storages) -> int:
    """Add the storages of a tensor with no plain storage of its own (sparse, nested,
    wrapper-subclass and fake tensors) to ``into``; the bytes they hold."""
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
            unwrapped = functional_inner(T, tensor)
            inner = inner_tensors(T, tensor) if unwrapped is None else [unwrapped]
    except Exception:
        inner = []
    total = 0
    for part in inner:
        if part is not tensor:
            total += add_storages(T, part, device, into)
    if inner:
        return total
    # Fake and other storage-less tensors: count what they would need. A fake tensor's
    # storage is a real object that its views share (its data pointer is 0): keyed by it, a
    # view of a fake shares with its base, as a view of a real tensor does (the dry run tells
    # a library's view of the cell's tensor from a culprit of its own so). Anything else: a
    # private key.
    try:
        nbytes = int(tensor.numel()) * int(tensor.element_size())
    except Exception:
        nbytes = 0
    key: StorageKey = (device, "object", id(tensor))
    fake = is_fake(T, tensor)
    if fake:
        try:
            with warnings.catch_warnings():  # torch warns that a fake's storage holds no data
                warnings.simplefilter("ignore")
                storage = tensor.untyped_storage()
                key, nbytes = (device, "impl", storage._cdata), int(storage.nbytes())
        except Exception:
            pass
    # a fake holds nothing on its device (meta's bytes are what it would need: kept)
    into[key] = (device, 0 if fake and device != "meta" else nbytes)
    return nbytes
