"""A DataLoader's data stays where it is when what holds it moves: every row and button that
shows it (small or aggregated, on its own or inside a trainer) says what the move then does."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset
from trainers import Trainer

from torchdevice_magic import objects, scan
from torchdevice_magic import viewmodel as vm
from torchdevice_magic.moves import MoveError, move
from torchdevice_magic.viewmodel import Target, WindowSpec

CPU_AND_META = (Target("cpu", True, ""), Target("meta", True, ""))
#: more tensors than one row shows one by one (scan.AGGREGATE_ABOVE is 16)
MANY = 20


class ListDataset(Dataset):  # type: ignore[type-arg]
    """A dataset class holding its samples in a list of tensors."""

    def __init__(self, count: int) -> None:
        self.items = [torch.randn(3) for _ in range(count)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.items[index]


def rows_of(ns: dict[str, object], target: str = "meta") -> dict[str, vm.Row]:
    return {row.name: row for row in vm.window(scan(ns).records, WindowSpec(), target).rows}


def test_a_big_loaders_data_is_one_row_that_says_it_stays_as_move_all_does() -> None:
    ns = {
        "dl": DataLoader(TensorDataset(*(torch.randn(8) for _ in range(MANY))), batch_size=4),
        "listed": DataLoader(ListDataset(MANY), batch_size=4),
        "trainer": Trainer(MANY),
        "x": torch.ones(2),
    }
    rows = rows_of(ns)
    assert set(rows) == {
        "dl",
        "listed",
        "trainer.model",
        "trainer.optimizer",
        "trainer.loader",
        "x",
    }
    for name in ("dl", "listed", "trainer.loader"):
        row = rows[name]
        assert row.shape == f"{MANY} items" and row.status == objects.LOADER_DATA_STAYS
        assert not row.selectable
        assert row.action == vm.Action(
            False, "→ meta", f"{name} cannot be moved: {objects.LOADER_DATA_STAYS}"
        )
    assert rows["trainer.model"].action.enabled and rows["x"].action.enabled
    result = move(ns, "meta")
    assert result.ok, result.failed
    assert {item.name for item in result.moved} == {"trainer", "x"}
    assert sorted(result.skipped) == [
        (name, objects.LOADER_DATA_STAYS) for name in ("dl", "listed", "trainer.loader")
    ]
    assert ns["trainer"].model.weight.device.type == "meta"  # type: ignore[attr-defined]
    kept = [*ns["dl"].dataset.tensors, *ns["listed"].dataset.items]  # type: ignore[attr-defined]
    kept += ns["trainer"].loader.dataset.tensors  # type: ignore[attr-defined]
    assert all(t.device.type == "cpu" for t in kept)


def test_move_all_is_off_when_only_a_big_loaders_data_is_left() -> None:
    ns = {"dl": DataLoader(TensorDataset(*(torch.randn(8) for _ in range(MANY))), batch_size=4)}
    header = vm.header(scan(ns), CPU_AND_META, target="meta")
    assert not header.move_all.enabled
    assert header.move_all.reason.startswith("nothing to move")
    result = move(ns, "meta")
    assert result.ok and not result.moved
    assert result.skipped == [("dl", objects.LOADER_DATA_STAYS)]


def test_a_trainers_rows_say_its_loaders_data_stays_as_the_move_leaves_it() -> None:
    """The model's and the optimizer's rows move the whole trainer: their button says what
    that does with the trainer's DataLoader (small or big), before the move and after it."""
    for samples in (2, MANY):
        ns = {"trainer": Trainer(samples)}
        stays = "trainer.loader's data, which stays on cpu"
        model = rows_of(ns)["trainer.model"]
        assert model.action == vm.Action(
            True, "→ meta", f"Move trainer (all of it but {stays}; not just trainer.model) to meta"
        )
        assert "all of it," not in model.action.reason
        result = move(ns, "meta", ["trainer"])
        assert result.ok and result.skipped == [("trainer.loader", objects.LOADER_DATA_STAYS)]
        trainer = ns["trainer"]
        assert trainer.model.weight.device.type == "meta"
        assert all(t.device.type == "cpu" for t in trainer.loader.dataset.tensors)


def test_a_trainer_whose_loaders_data_alone_is_elsewhere_is_already_there() -> None:
    """Only the loader's data is off the target: nothing would move, so the button is off
    (and says why), as the mover refuses."""
    trainer = Trainer(2)
    meta = tuple(t.to("meta") for t in trainer.loader.dataset.tensors)
    trainer.loader = DataLoader(TensorDataset(*meta), batch_size=4)
    ns = {"trainer": trainer}
    action = rows_of(ns, "cpu")["trainer.model"].action
    stays = "trainer.loader's data, which stays on meta"
    assert action == vm.Action(False, "→ cpu", f"trainer is already on cpu (all of it but {stays})")
    with pytest.raises(MoveError, match="a DataLoader's data stays where it is"):
        move(ns, "cpu", ["trainer"])


def test_the_words_name_every_loader_and_where_its_data_is() -> None:
    words = vm.rows.loader_data_words
    assert words(()) == ""
    assert words((("t.loader", ("cpu",)),)) == "t.loader's data, which stays on cpu"
    two = (("t.train", ("cpu",)), ("t.val", ("cpu", "meta")))
    assert words(two) == "the data of t.train and t.val, which stays on cpu, meta"


def test_a_walk_cut_short_is_a_row_that_cannot_move_for_the_movers_reason() -> None:
    """A DataLoader over a dataset of more samples than a walk visits, and an object holding
    a model and that many tensors: the mover leaves both (it does not move what it could not
    walk to the end), and each row's button is off with the reason the move gives."""

    class Holder:
        def __init__(self) -> None:
            self.model = nn.Linear(2, 2)
            self.samples = [torch.randn(3) for _ in range(objects.OBJECT_CAP + 10)]

    ns = {"dl": DataLoader(ListDataset(objects.OBJECT_CAP + 10)), "holder": Holder()}
    rows = rows_of(ns)
    result = move(ns, "meta")
    assert result.ok and not result.moved
    reasons = dict(result.skipped)
    assert reasons["dl"] == objects.LOADER_DATA_STAYS
    assert reasons["holder"].startswith("holder holds more than 10,000 elements")
    for name, reason in reasons.items():
        assert not rows[name].action.enabled and not rows[name].selectable
        assert reason in rows[name].action.reason
    assert ns["holder"].model.weight.device.type == "cpu"  # type: ignore[attr-defined]
