"""A namespace grown cell by cell ends with its plain tensors in the columns, as if made in one
go: what a view reads costs no record per tensor, and the facts are those of a fresh scan."""

from __future__ import annotations

import torch
from test_book import facts

import torchdevice_magic as tdm
from torchdevice_magic.scan import Scanner


def _grow(namespace: dict, scanner: Scanner, start: int, stop: int) -> tdm.Inventory:
    for i in range(start, stop):
        namespace[f"t{i}"] = torch.zeros(i % 7 + 1)
    return scanner.scan(namespace, changed=[f"t{i}" for i in range(start, stop)])


def test_tensors_made_by_later_cells_end_in_the_columns_with_the_same_facts():
    namespace: dict = {"first": torch.ones(2)}
    scanner = Scanner()
    scanner.scan(namespace, full=True)
    namespace["model"] = torch.nn.Linear(2, 2)
    namespace["alias"] = namespace["first"][1:]  # shares a storage: still counted once
    namespace["grad"] = torch.ones(3, requires_grad=True)  # stays an entry (volatile)
    namespace["meta"] = torch.ones(3, device="meta")  # no data pointer: stays an entry
    reached = 0
    for stop in (600, 1_500, 3_000, 6_000, 6_500):  # cells of growth, as a notebook grows
        inventory = _grow(namespace, scanner, reached, stop)
        reached = stop
        assert facts(inventory) == facts(tdm.scan(namespace))
    assert len(inventory._state.entries) >= 500  # the last 500 tensors: entries, not folded
    # a view reads every plain tensor as a column row, those made since the last fold too:
    # records only for the rest (no record per tensor however the namespace grew)
    columns = inventory.view_columns()
    assert sorted(columns.names) == sorted([*(f"t{i}" for i in range(6_500)), "first", "alias"])
    assert {r.root for r in inventory.other_records()} == {"model", "grad", "meta"}
    # a later cell rebinding a folded name, deleting one: still a fresh scan's facts
    namespace["t10"] = torch.zeros(100)
    del namespace["t11"]
    later = scanner.scan(namespace, changed=["t10", "t11"])
    assert facts(later) == facts(tdm.scan(namespace))
    assert set(later.view_changes(inventory) or {}) >= {"t10", "t11"}


def test_a_namespace_made_in_one_cell_is_folded_at_once():
    namespace: dict = {"first": torch.ones(2)}
    scanner = Scanner()
    scanner.scan(namespace, full=True)
    inventory = _grow(namespace, scanner, 0, 5_000)
    assert len(inventory.view_columns().names) == 5_001
    assert inventory.other_records() == []
    assert facts(inventory) == facts(tdm.scan(namespace))


def test_records_a_view_asked_for_do_not_outlive_the_fold():
    """After each cell a view asks what changed (the records of the new names); once those
    tensors are folded into the columns, their records are not kept (each would be one more
    object for the garbage collector to walk, for as long as the session lasts)."""
    namespace: dict = {"first": torch.ones(2)}
    scanner = Scanner()
    shown = scanner.scan(namespace, full=True)
    shown.view_columns()  # a view opened: it follows the changes from here
    folds = 0
    for stop in range(500, 6_001, 500):
        inventory = _grow(namespace, scanner, stop - 500, stop)
        folds += inventory._state.columns is not shown._state.columns
        if inventory.view_changes(shown) is None:  # after a fold: the view reads it all again
            inventory.view_columns()
        shown = inventory
    assert folds >= 2
    unfolded = {name for name in inventory._state.entries if name.startswith("t")}
    assert 0 < len(unfolded) < 6_000
    assert set(inventory._record_cache) == unfolded
