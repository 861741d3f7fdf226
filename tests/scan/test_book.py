"""An inventory of a rescan updates the previous inventory's records and totals by the names
that changed (the book handed from one inventory to the next): it must give exactly what a fresh scan of the same namespace
gives, whatever the edits, and leave the earlier inventories as they were."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchdevice_magic as tdm
from torchdevice_magic.scan import Scanner


def facts(inventory: tdm.Inventory) -> dict:
    # named_storages() is storages_of() over names(), summed (the memory timeline's count)
    by_name: dict = {}
    counts: dict = {}
    for name in inventory.names():
        for key, value in inventory.storages_of(name).items():
            by_name[key] = value
            counts[key] = counts.get(key, 0) + 1
    assert inventory.named_storages() == (by_name, counts)
    return {
        "records": list(inventory.records),
        "totals": inventory.totals(),
        "storages": inventory.storages(),
        "would_need": inventory.would_need(),
        "device_totals": inventory.device_totals(),
        "warnings": inventory.mixed_warnings(),
        "names": inventory.names(),
    }


def _mixed_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).to("meta"))


def _apply(namespace: dict, op: tuple, counter: list[int]) -> list[str]:
    """One cell's edit; returns the names it assigned (what the hook passes as ``changed``)."""
    kind, pick, size = op
    names = [n for n in namespace if not n.startswith("_")]
    target = names[pick % len(names)] if names else "t0"
    other = names[(pick * 7 + 3) % len(names)] if names else None
    if kind in ("new", "alias_new", "list", "module", "mixed", "grad_new"):
        counter[0] += 1
        target = f"n{counter[0]}"
    if kind in ("rebind", "new"):
        namespace[target] = torch.zeros(size)
    elif kind == "meta":
        namespace[target] = torch.zeros(size, device="meta")
    elif kind in ("alias", "alias_new"):
        value = namespace.get(other) if other else None
        namespace[target] = value[:1] if isinstance(value, torch.Tensor) else torch.ones(size)
    elif kind == "same":  # the very same object under another name
        value = namespace.get(other) if other else None
        namespace[target] = value if value is not None else torch.ones(size)
    elif kind == "int":
        namespace[target] = size
    elif kind == "delete":
        namespace.pop(target, None)
    elif kind == "list":
        namespace[target] = [torch.zeros(size), torch.ones(size)]
    elif kind == "module":
        namespace[target] = torch.nn.Linear(size, 2)
    elif kind == "mixed":
        namespace[target] = _mixed_model()
    elif kind == "grad_new":
        tensor = torch.ones(size, requires_grad=True)
        tensor.sum().backward()
        namespace[target] = tensor
    return [target]


OPS = st.tuples(
    st.sampled_from(
        [
            "rebind",
            "rebind",
            "rebind",
            "new",
            "meta",
            "alias",
            "alias_new",
            "same",
            "int",
            "delete",
            "list",
            "module",
            "mixed",
            "grad_new",
        ]  # fmt: skip
    ),
    st.integers(0, 1000),
    st.integers(1, 6),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    start=st.integers(0, 12),
    cells=st.lists(
        st.tuples(OPS, st.sampled_from(["all", "records", "totals", "none"])), max_size=12
    ),
)
def test_incremental_inventories_equal_fresh_scans(start: int, cells: list) -> None:
    namespace: dict = {f"t{i}": torch.zeros(i % 4 + 1) for i in range(start)}
    namespace["_"] = namespace.get("t0")  # IPython's bookkeeping is never listed
    scanner = Scanner()
    first = scanner.scan(namespace, full=True)
    kept = [(first, facts(first))]
    counter = [0]
    for op, ask in cells:
        changed = _apply(namespace, op, counter)
        inventory = scanner.scan(namespace, changed=changed)
        if ask == "records":
            inventory.records  # noqa: B018 - the book is brought up to date here
        elif ask == "totals":
            inventory.totals()
        if ask != "none":
            fresh = tdm.scan(namespace)
            assert facts(inventory) == facts(fresh)
            kept.append((inventory, facts(inventory)))
    fresh = tdm.scan(namespace)
    assert facts(scanner.last) == facts(fresh)
    for inventory, before in kept:  # earlier inventories did not change
        assert facts(inventory) == before


def test_a_rescan_reuses_the_records_of_names_that_did_not_change():
    namespace = {f"t{i}": torch.zeros(4) for i in range(50)}
    scanner = Scanner()
    first = scanner.scan(namespace, full=True)
    before = list(first.records)
    namespace["t10"] = torch.zeros(8)
    namespace["late"] = torch.ones(3)
    second = scanner.scan(namespace, changed=["t10", "late"])
    records = second.records
    # the bookkeeping was updated by the two names, not rebuilt: it knows what changed
    assert set(second.view_changes(first) or {}) == {"t10", "late"}
    assert [r.name for r in records] == [f"t{i}" for i in range(50)] + ["late"]
    assert all(records[i] is before[i] for i in range(50) if i != 10)
    assert records[10].bytes == 32 and records[10] is not before[10]
    assert second.totals() == {"cpu": 49 * 16 + 32 + 12}
    assert first.records == before and first.totals() == {"cpu": 50 * 16}
    assert facts(second) == facts(tdm.scan(namespace))


def test_sharing_between_a_changed_and_an_unchanged_name_is_marked_and_unmarked():
    namespace = {f"t{i}": torch.zeros(4) for i in range(20)}
    scanner = Scanner()
    scanner.scan(namespace, full=True).records  # noqa: B018
    namespace["view"] = namespace["t3"][1:]
    second = scanner.scan(namespace, changed=["view"])
    by_name = {r.name: r for r in second.records}
    assert by_name["t3"].shares_with == ("view",) and by_name["view"].shares_with == ("t3",)
    assert second.totals() == {"cpu": 20 * 16}
    namespace["view"] = torch.ones(2)
    third = scanner.scan(namespace, changed=["view"])
    by_name = {r.name: r for r in third.records}
    assert by_name["t3"].shares_with == () and by_name["view"].shares_with == ()
    assert third.totals() == {"cpu": 20 * 16 + 8}
    assert facts(third) == facts(tdm.scan(namespace))


@pytest.mark.parametrize("ask_first", ["records", "totals", "warnings"])
def test_mixed_warnings_keep_the_namespace_order(ask_first: str):
    namespace = {"a": _mixed_model(), "x": torch.zeros(2), "b": _mixed_model()}
    scanner = Scanner()
    scanner.scan(namespace, full=True).records  # noqa: B018
    namespace["x"] = torch.zeros(3)
    namespace["c"] = _mixed_model()
    inventory = scanner.scan(namespace, changed=["x", "c"])
    if ask_first == "records":
        inventory.records  # noqa: B018
    elif ask_first == "totals":
        inventory.totals()
    warnings = inventory.mixed_warnings()
    assert [w.split(" ")[0] for w in warnings] == ["a", "b", "c"]
    assert facts(inventory) == facts(tdm.scan(namespace))


def test_records_built_together_equal_records_built_one_by_one():
    import gc

    dtypes = [torch.float32, torch.float16, torch.int64, torch.bool]
    namespace = {
        f"t{i}": torch.zeros((i % 3 + 1, i % 5 + 1), dtype=dtypes[i % 4]) for i in range(200)
    }
    namespace["x"] = torch.zeros(0)  # no data pointer: not a column
    # 200 plain tensors: every record at once is built field by field over the columns, one
    # name's record (records_of, on an inventory that never built them all) one at a time
    inventory = Scanner().scan(namespace, full=True)
    one_at_a_time = Scanner().scan(namespace, full=True)
    listed = [r for r in inventory.records if r.name != "x"]
    assert listed == [one_at_a_time.records_of(f"t{i}")[0] for i in range(200)]
    first = inventory.records[0]
    assert first.bytes_by_device == {"cpu": 4} and first.param_bytes == {}
    assert first.param_bytes is not inventory.records[1].param_bytes  # each record owns its dicts
    assert gc.isenabled()  # the collector paused while building is back on
    gc.disable()
    try:
        Scanner().scan(namespace, full=True).records  # noqa: B018
        assert not gc.isenabled()  # ...and left off when the user had turned it off
    finally:
        gc.enable()


def test_a_module_that_comes_to_span_devices_in_a_later_cell_is_warned_about():
    namespace: dict = {f"t{i}": torch.zeros(2) for i in range(100)}
    scanner = Scanner()
    scanner.scan(namespace, full=True)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    namespace["model"] = model
    assert scanner.scan(namespace, changed=["model"]).mixed_warnings() == []
    model[1].to("meta")
    warnings = scanner.scan(namespace).mixed_warnings()
    assert [w.split(" ")[0] for w in warnings] == ["model"]
    assert warnings == tdm.scan(namespace).mixed_warnings()
    model[1].to_empty(device="cpu")
    assert scanner.scan(namespace).mixed_warnings() == []
    del namespace["model"]
    model = None
    assert scanner.scan(namespace).mixed_warnings() == []


def test_the_bookkeeping_keeps_no_earlier_scan_state_alive():
    """The book remembers the last updates to answer a view that missed some; it must not
    keep their scan states (each holds every name and every id of the namespace) alive."""
    import gc
    import importlib

    state_type = importlib.import_module("torchdevice_magic.scan.book")._State
    gc.collect()
    # states other tests left alive (a widget table an earlier test showed keeps its session)
    earlier = [o for o in gc.get_objects() if type(o) is state_type]
    namespace: dict = {f"t{i}": torch.zeros(2) for i in range(100)}
    scanner = Scanner()
    shown = scanner.scan(namespace, full=True)
    shown.view_columns()  # a view opened: the bookkeeping starts and follows each cell
    for cell in range(40):
        namespace["t7"] = torch.zeros(2 + cell % 2)
        inventory = scanner.scan(namespace, changed=["t7"])
        assert list(inventory.view_changes(shown) or {}) == ["t7"]
        shown = inventory
    gc.collect()
    alive = [
        o for o in gc.get_objects() if type(o) is state_type and all(o is not e for e in earlier)
    ]
    assert len(alive) <= 3  # the scanner's latest, the view's, and what the book is at
