"""Which tensors are fake (``objects.is_fake``), the one predicate the scan's note, its storage
keys and the memory views' graph keys share; and what the scan then counts for each.

Real fake tensors come from ``FakeTensorMode``; the ones that are not fake are a
``FunctionalTensor`` over real data, ``torch.func.functionalize``'s wrapper, and a wrapper
subclass whose class name says "Fake".
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

import torchdevice_magic as tdm
from torchdevice_magic.objects import TorchTypes, add_storages, is_fake


class FakeBatch(torch.Tensor):
    """A user's wrapper subclass: its name says Fake, its data is real (in ``elem``)."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> FakeBatch:
        made = torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)
        made.elem = elem
        return made

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        unwrap = torch.utils._pytree.tree_map_only(cls, lambda t: t.elem, (args, kwargs or {}))
        return func(*unwrap[0], **unwrap[1])


def functional(tensor: torch.Tensor, *modes: Any) -> torch.Tensor:
    with FunctionalTensorMode():
        for mode in modes:
            mode.__enter__()
        try:
            return FunctionalTensor.to_functional(tensor)
        finally:
            for mode in reversed(modes):
                mode.__exit__(None, None, None)


def functionalized(tensor: torch.Tensor) -> torch.Tensor:
    """The wrapper ``torch.func.functionalize`` runs a function on (a plain ``torch.Tensor``)."""
    seen = []
    torch.func.functionalize(lambda x: seen.append(x) or x * 2)(tensor)
    return seen[0]


@pytest.fixture
def T() -> TorchTypes:
    types = TorchTypes.current()
    assert types is not None
    return types


def test_fake_tensors_and_their_functional_wrappers_are_fake(T: TorchTypes) -> None:
    mode = FakeTensorMode()
    with mode:
        fake = torch.empty(10, 4)
        view = fake[2:]
        parameter = torch.nn.Linear(4, 4).weight
    assert all(is_fake(T, t) for t in (fake, view, parameter))
    assert is_fake(T, functional(fake, mode))


def test_real_tensors_are_not_fake_whatever_their_class_is_called(T: TorchTypes) -> None:
    data = torch.ones(3)
    for tensor in [
        data,
        torch.nn.Parameter(torch.ones(2)),
        torch.empty(3, device="meta"),  # no data either, but no fake: meta is a device
        functional(data),
        functionalized(data),
        FakeBatch(data),
    ]:
        assert not is_fake(T, tensor), type(tensor).__name__


def test_the_scan_counts_real_wrappers_by_the_data_they_hold_and_fakes_by_what_they_need() -> None:
    data = torch.ones(3)
    mode = FakeTensorMode()
    with mode:
        fake = torch.empty(1000)
    namespace = {
        "data": data,
        "batch": FakeBatch(data),
        "functional": functional(data),
        "fake": fake,
        "functional_fake": functional(fake, mode),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns when a fake's storage is looked at
        inventory = tdm.scan(namespace)
    records = {r.name: r for r in inventory.records}
    for name in ("batch", "functional"):
        assert records[name].note == "" and records[name].bytes == 12
        assert records[name].shares_with == tuple(sorted({"data", "batch", "functional"} - {name}))
    for name in ("fake", "functional_fake"):
        assert records[name].note == "fake tensor (no data)" and records[name].bytes == 0
        assert records[name].would_need_bytes == 4000


def test_a_fake_holds_no_memory_on_its_device_in_the_totals_or_its_row() -> None:
    """The header's per-device figure is memory in use: a fake cpu tensor of 4 MiB adds
    nothing there, and its row says it holds no data (it is not on meta)."""
    from torchdevice_magic.viewmodel.rows import size_text

    with FakeTensorMode():
        fake = torch.empty(1024, 1024)
    namespace = {"real": torch.ones(4), "fake": fake, "view": fake[:2]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inventory = tdm.scan(namespace)
    assert inventory.totals() == {"cpu": 16}
    records = {r.name: r for r in inventory.records}
    assert size_text(records["fake"]) == "0 B (no data; needs 4.0 MiB)"
    assert records["view"].shares_with == ("fake",)


def test_a_functionalized_tensor_is_keyed_by_the_storage_it_stands_for(T: TorchTypes) -> None:
    data = torch.ones(3)
    theirs: dict[Any, Any] = {}
    add_storages(T, data, "cpu", theirs)
    for wrapper in (functionalized(data), functional(data)):
        found: dict[Any, Any] = {}
        assert add_storages(T, wrapper, "cpu", found) == 12
        assert found == theirs


def test_a_lazy_tensor_is_real_and_its_functional_wrapper_is_left_alone(lazy_backend: str) -> None:
    """torch's lazy (LTC) backend wraps every tensor for functionalization; the inner tensor has
    no storage to read (reading it crashed the process), so the wrapper is the tensor."""
    x = torch.ones(3).to(lazy_backend)
    T = TorchTypes.current()
    assert torch._is_functional_tensor(x)
    assert not is_fake(T, x)
    inventory = tdm.scan({"x": x})
    (record,) = inventory.records
    assert record.device.startswith("lazy") and record.bytes == 12
