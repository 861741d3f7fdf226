"""scan() against a namespace full of hostile objects: it never raises, never consumes an
iterator, never hangs (pytest-timeout bounds each test), and still finds the real tensors."""

from __future__ import annotations

import inspect
import itertools
import types

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchdevice_magic as tdm


class RaisingProperty:
    @property
    def device(self):
        raise RuntimeError("property raised")

    @property
    def shape(self):
        raise RuntimeError("property raised")


class RaisingGetattr:
    def __getattr__(self, name):
        raise RuntimeError(f"no {name} for you")


class RaisingClass:
    @property
    def __class__(self):
        raise RuntimeError("__class__ raised")


class LyingList(list):
    def __len__(self):
        return 10**12

    def __iter__(self):
        return itertools.count()  # never ends


class RaisingDict(dict):
    def items(self):
        raise RuntimeError("items raised")

    def values(self):
        raise RuntimeError("values raised")

    def __iter__(self):
        raise RuntimeError("iter raised")


class EndlessSequence:
    def __len__(self):
        raise RuntimeError("len raised")

    def __getitem__(self, index):
        return torch.ones(1)  # would never end if iterated


class HostileTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError("torch function raised")


class HostileModule(torch.nn.Module):
    """Builds normally, then refuses every private attribute (``_modules``, ...)."""

    def __init__(self):
        super().__init__()
        self.armed = True

    def __getattribute__(self, name):
        if name.startswith("_") and object.__getattribute__(self, "__dict__").get("armed"):
            raise RuntimeError("attribute raised")
        return super().__getattribute__(name)


class HostileEqualityModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def __eq__(self, other):
        raise RuntimeError("eq raised")

    __hash__ = torch.nn.Module.__hash__


def self_referencing_list():
    items: list = [torch.ones(2)]
    items.append(items)
    return items


def self_referencing_dict():
    items: dict = {"t": torch.ones(3)}
    items["me"] = items
    return items


def generator():
    yield torch.ones(1)


HOSTILE_FACTORIES = [
    RaisingProperty,
    RaisingGetattr,
    RaisingClass,
    lambda: LyingList([torch.ones(1)]),
    lambda: RaisingDict(a=torch.ones(1)),
    EndlessSequence,
    lambda: torch.ones(2).as_subclass(HostileTensor),
    HostileModule,
    HostileEqualityModule,
    self_referencing_list,
    self_referencing_dict,
    generator,
    lambda: iter([torch.ones(1)]),
    lambda: (torch.ones(1) for _ in itertools.count()),
    lambda: map(lambda x: x, [torch.ones(1)]),
]

# Hypothesis draws recipes (factory indices and how to nest them); the test builds the
# objects, so hypothesis itself never has to hash, compare or print a hostile object.
factory_index = st.integers(0, len(HOSTILE_FACTORIES) - 1)
recipe = st.one_of(
    st.tuples(st.just("one"), factory_index),
    st.tuples(st.just("list"), st.lists(factory_index, max_size=4)),
    st.tuples(st.just("dict"), st.dictionaries(st.text(max_size=3), factory_index, max_size=4)),
    st.tuples(st.just("tuple"), st.tuples(factory_index, factory_index)),
)


def build(shape):
    kind, content = shape
    if kind == "one":
        return HOSTILE_FACTORIES[content]()
    if kind == "list":
        return [HOSTILE_FACTORIES[i]() for i in content]
    if kind == "dict":
        return {key: HOSTILE_FACTORIES[i]() for key, i in content.items()}
    return tuple(HOSTILE_FACTORIES[i]() for i in content)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.dictionaries(st.from_regex(r"[a-z]{1,6}", fullmatch=True), recipe, max_size=8))
@pytest.mark.timeout(300)
def test_scan_survives_hostile_namespaces(recipes):
    real = torch.ones(4)
    namespace = {name: build(shape) for name, shape in recipes.items()}
    namespace["real_tensor"] = real
    generators = [v for v in _all_values(namespace) if type(v) is types.GeneratorType]

    inventory = tdm.scan(namespace, include_hidden=True)
    records = inventory.records
    repr(inventory)
    inventory._repr_html_()
    inventory.to_json()
    inventory.to_frame()
    inventory.totals()

    assert any(r.name == "real_tensor" and r.bytes == 16 for r in records)
    assert all(inspect.getgeneratorstate(g) == inspect.GEN_CREATED for g in generators)

    # a rescan of the same hostile namespace, and after rebinding a name, survives too
    namespace["real_tensor"] = torch.ones(8)
    again = tdm.scan(namespace, previous=inventory, changed=list(namespace))
    assert any(r.name == "real_tensor" and r.bytes == 32 for r in again.records)


def _all_values(value, depth=0):
    if depth > 3:
        return
    yield value
    if type(value) in (list, tuple):
        for item in value:
            yield from _all_values(item, depth + 1)
    elif type(value) is dict:
        for item in value.values():
            yield from _all_values(item, depth + 1)


@pytest.mark.timeout(60)
def test_each_hostile_object_alone_is_skipped_or_marked_unreadable():
    for factory in HOSTILE_FACTORIES:
        inventory = tdm.scan({"obj": factory()})
        for record in inventory.records:
            assert record.name.startswith("obj")
            assert record.kind in {"tensor", "container", "module", "unreadable"}


def test_hostile_module_becomes_an_unreadable_record():
    (record,) = tdm.scan({"bad": HostileModule()}).records
    assert record.kind == "unreadable" and "could not inspect" in record.note
    assert not record.movable


def test_lying_and_self_referencing_containers_are_walked_safely():
    records = {r.name: r for r in tdm.scan({"lying": LyingList([torch.ones(1)])}).records}
    assert records["lying[0]"].bytes == 4  # list.__iter__ is used, not the endless override
    records = {r.name: r for r in tdm.scan({"loop": self_referencing_list()}).records}
    assert set(records) == {"loop[0]"}
