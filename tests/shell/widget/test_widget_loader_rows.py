"""The widget table's rows of a trainer holding a DataLoader: each button says what its move
does with the loader's data, and the move does that."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from tablereading import status_text
from trainers import Trainer

from torchdevice_magic import objects
from torchdevice_magic.shell.widget import DeviceTable


def test_a_trainers_row_button_says_its_loaders_data_stays_and_the_move_leaves_it(
    ip: Any, session: Any, make_table: Callable[..., DeviceTable]
) -> None:
    session.config.allow_meta_target = True
    ip.user_ns["trainer"] = Trainer(20)  # a big loader: its data is one aggregated row
    table = make_table()
    table.target_dropdown.value = "meta"
    stays = "trainer.loader's data, which stays on cpu"
    model_button = table.row_buttons["trainer.model"]
    assert model_button.tooltip == (
        f"Move trainer (all of it but {stays}; not just trainer.model) to meta"
    )
    loader_button = table.row_buttons["trainer.loader"]
    assert loader_button.disabled
    assert loader_button.tooltip == f"trainer.loader cannot be moved: {objects.LOADER_DATA_STAYS}"

    model_button.click()

    trainer = ip.user_ns["trainer"]
    assert trainer.model.weight.device.type == "meta"
    assert all(t.device.type == "cpu" for t in trainer.loader.dataset.tensors)
    said = html.unescape(status_text(table))
    assert f"skipped trainer.loader ({objects.LOADER_DATA_STAYS})" in said
