"""Ranks on real engines: a gloo process group across the session's two ipyparallel engines
(rank = the engine's place in the client's ids), each engine with two simulated devices.
Each rank moves to its own device, rank 1 is warned about a tensor on device 0, and DTensor and
FSDP2 rows say which shard each rank holds; moves refuse what the group shards. The group is destroyed at the end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from parallel_ranks import TIMEOUT, on_every_rank

pytestmark = pytest.mark.engines

NAMES = (
    "_tdm_ranks_x",
    "_tdm_ranks_stray",
    "_tdm_ranks_mesh",
    "_tdm_ranks_d",
    "_tdm_ranks_model",
    "_tdm_ranks_sharded",
    "_tdm_ranks_refusals",
)


@pytest.fixture(scope="module", autouse=True)
def forget_names(ranks: Any) -> Iterator[None]:
    """This module's names leave the engines with the module's process group."""
    yield
    cleanup = "\n".join(f"globals().pop({name!r}, None)" for name in NAMES)
    on_every_rank(ranks, cleanup)


def test_each_rank_moves_to_its_own_device_not_all_to_device_zero(ranks: Any) -> None:
    view = ranks[:]
    view.block = True
    view.execute(
        "from torchdevice_magic import devices\n"
        "from torchdevice_magic.shell.extension import get_session\n"
        "import torchdevice_magic as tdm\n"
        "_tdm_ranks_x = torch.ones(4)\n"
        "_tdm_ranks_y = torch.ones(4)\n"
        # what the table's "Move all" button does: the engine's controller, its default target
        "_tdm_ranks_app = get_session(get_ipython()).app\n"
        "_tdm_ranks_label = _tdm_ranks_app.header().move_all.label\n"
        "_tdm_ranks_app.move(_tdm_ranks_app.default_target(), ['_tdm_ranks_x'])\n"
        # the accelerator typed without an index
        "tdm.move(globals(), 'simdev', ['_tdm_ranks_y'])\n"
        "_tdm_ranks_seen = (dist.get_rank(), devices.best_device(), _tdm_ranks_label,"
        " str(_tdm_ranks_x.device), str(_tdm_ranks_y.device))\n"
        "del _tdm_ranks_app, _tdm_ranks_label, _tdm_ranks_x, _tdm_ranks_y\n"
    )
    assert view.pull("_tdm_ranks_seen") == [
        (0, "simdev:0", "Move all to simdev:0", "simdev:0", "simdev:0"),
        (1, "simdev:1", "Move all to simdev:1", "simdev:1", "simdev:1"),
    ]
    view.execute("del _tdm_ranks_seen")


def test_rank_one_holding_a_tensor_on_device_zero_is_warned(ranks: Any) -> None:
    # not silent, as %%px runs a cell: the extension's post-cell hook runs
    stray = "_tdm_ranks_stray = torch.ones(2, device='simdev:0')"
    results = [ranks[engine].execute(stray, block=False, silent=False) for engine in ranks.ids]
    for result in results:
        result.get(timeout=TIMEOUT)
        result.wait_for_output(timeout=10)
    rank_zero, rank_one = (result.stderr for result in results)
    assert (
        "⚠ torchdevice_magic: _tdm_ranks_stray (Tensor) is on simdev:0, but this process is "
        "rank 1 of 2, whose device is simdev:1: move it with .to('simdev:1')"
    ) in rank_one
    assert "_tdm_ranks_stray" not in rank_zero  # rank 0's own device
    # the header (widget, %devices, the sidebar) says it too, every time it is drawn
    view = ranks[:]
    view.block = True
    view.execute(
        "from torchdevice_magic.shell.extension import get_session\n"
        "_tdm_ranks_notes = list(get_session(get_ipython()).app.header().device_notes)\n"
    )
    notes_zero, notes_one = view.pull("_tdm_ranks_notes")
    view.execute("del _tdm_ranks_notes")
    assert not any("_tdm_ranks_stray" in note for note in notes_zero)
    assert (
        "_tdm_ranks_stray (Tensor) is on simdev:0, but this process is rank 1 of 2, whose device "
        "is simdev:1: move it with .to('simdev:1')"
    ) in notes_one


def test_dtensor_rows_say_which_shard_each_rank_holds(ranks: Any) -> None:
    on_every_rank(
        ranks,
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "from torch.distributed.tensor import Shard, distribute_tensor\n"
        "import torchdevice_magic as tdm\n"
        "from torchdevice_magic.viewmodel import make_row\n"
        "_tdm_ranks_mesh = init_device_mesh('cpu', (2,))\n"
        "_tdm_ranks_d = distribute_tensor(torch.ones(8, 4), _tdm_ranks_mesh, [Shard(0)])\n"
        # the table's row: its size is this rank's piece, its status the shard and the whole
        "_tdm_ranks_rows = [(make_row(r, None).status, make_row(r, None).size, r.shape)"
        " for r in tdm.scan({'d': _tdm_ranks_d}).records]\n",
    )
    view = ranks[:]
    view.block = True
    assert view.pull("_tdm_ranks_rows") == [
        [("DTensor shard 0 of 2 (Shard(0)); global 8×4, 128 B", "64 B", (8, 4))],
        [("DTensor shard 1 of 2 (Shard(0)); global 8×4, 128 B", "64 B", (8, 4))],
    ]
    view.execute("del _tdm_ranks_rows")


def test_fsdp2_modules_and_parameters_show_their_shards(ranks: Any) -> None:
    # FSDP2 (fully_shard) runs on CPU with gloo: a forward and backward on both ranks
    on_every_rank(
        ranks,
        "from torch.distributed.fsdp import fully_shard\n"
        "import torchdevice_magic as tdm\n"
        "torch.manual_seed(0)\n"
        "_tdm_ranks_model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))\n"
        "for _tdm_layer in _tdm_ranks_model:\n"
        "    fully_shard(_tdm_layer, mesh=_tdm_ranks_mesh)\n"
        "fully_shard(_tdm_ranks_model, mesh=_tdm_ranks_mesh)\n"
        "_tdm_ranks_model(torch.ones(3, 8)).sum().backward()\n"
        "_tdm_ranks_rows = {r.name: r.note for r in tdm.scan("
        "{'model': _tdm_ranks_model, 'weight': _tdm_ranks_model[0].weight}).records}\n"
        "del _tdm_layer\n",
    )
    view = ranks[:]
    view.block = True
    rows = view.pull("_tdm_ranks_rows")
    for rank, notes in enumerate(rows):
        # 8×4 + 4 + 4×2 + 2 float32 parameters: 184 B in all, half on each rank
        assert notes["model"] == (
            f"4 sharded parameters (DTensor), this rank's shard {rank} of 2 (Shard(0)); "
            "global 184 B"
        )
        assert notes["weight"] == f"DTensor shard {rank} of 2 (Shard(0)); global 4×8, 128 B"
    view.execute("del _tdm_ranks_rows")


def test_moving_a_sharded_module_by_hand_is_refused_with_the_reason(ranks: Any) -> None:
    # FSDP2's shards are placed by the device mesh: one rank moving its shard alone would
    # break the next collective, so a named move refuses and "Move all" skips it, untouched
    on_every_rank(
        ranks,
        "from torch.distributed.device_mesh import init_device_mesh\n"
        "from torch.distributed.fsdp import fully_shard\n"
        "from torchdevice_magic.moves import MoveError, move\n"
        "from torchdevice_magic.shell.extension import get_session\n"
        "_tdm_ranks_sharded = fully_shard(torch.nn.Linear(8, 4),"
        " mesh=init_device_mesh('cpu', (2,)))\n"
        "_tdm_ranks_app = get_session(get_ipython()).app\n"
        "try:\n"
        "    _tdm_ranks_app.move('simdev', ['_tdm_ranks_sharded'])\n"
        "    _tdm_ranks_refusals = ['moved']\n"
        "except MoveError as _tdm_error:\n"
        "    _tdm_ranks_refusals = [str(_tdm_error)]\n"
        # "Move all" over a namespace of its own: the engines' namespace is shared by the session
        "_tdm_ranks_all = move({'_tdm_ranks_sharded': _tdm_ranks_sharded, 'x': torch.ones(2)},"
        " _tdm_ranks_app.default_target())\n"
        "_tdm_ranks_refusals.append([item.name for item in _tdm_ranks_all.moved])\n"
        "_tdm_ranks_refusals.append(dict(_tdm_ranks_all.skipped).get('_tdm_ranks_sharded'))\n"
        "_tdm_ranks_refusals.append(str(_tdm_ranks_sharded.weight.device))\n"
        # the table's row says the same and offers no Move
        "import torchdevice_magic as tdm\n"
        "_tdm_ranks_refusals.extend((r.movable, r.movable_reason) for r in"
        " tdm.scan({'_tdm_ranks_sharded': _tdm_ranks_sharded}).records)\n"
        "del _tdm_ranks_app, _tdm_ranks_all\n",
    )
    view = ranks[:]
    view.block = True
    reason = (
        "_tdm_ranks_sharded is sharded over the process group (DTensor): its device mesh places "
        "each rank's shard, and moving one rank's shard by hand breaks the next collective; "
        "build the mesh on the device you want (init_device_mesh) and shard the model there"
    )
    assert view.pull("_tdm_ranks_refusals") == [[reason, ["x"], reason, "cpu", (False, reason)]] * 2
