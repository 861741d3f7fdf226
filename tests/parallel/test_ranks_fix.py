"""A device-mismatch fix on a rank moves to the rank's own device: with a gloo process group
across the session's two engines, rank 1 has its model on simdev:0 (the cell sends it there, as
every rank sending its model to ``cuda:0`` does) and its batch on simdev:1, its own. The
diagnosis rank 1 shows moves the model to simdev:1 and says that simdev:1 is this rank's."""

from __future__ import annotations

from typing import Any

import pytest
from parallel_ranks import TIMEOUT

pytestmark = pytest.mark.engines

CELL = (
    "from torchdevice_magic import devices\n"
    "_tdm_fix_model = torch.nn.Linear(8, 4).to('simdev:0')\n"
    "_tdm_fix_x = torch.randn(2, 8, device=devices.best_device())\n"
    "_tdm_fix_y = _tdm_fix_model(_tdm_fix_x)\n"
)
CLEANUP = "for _n in ('_tdm_fix_model', '_tdm_fix_x', '_tdm_fix_y', '_n'): globals().pop(_n, None)"


def test_rank_one_is_told_to_move_its_model_to_its_own_device(ranks: Any) -> None:
    # not silent, as %%px runs a cell: the extension's hooks run and show the diagnosis
    results = [ranks[engine].execute(CELL, block=False, silent=False) for engine in ranks.ids]
    try:
        for result in results:
            result.wait(timeout=TIMEOUT)
            result.wait_for_output(timeout=10)
        rank_zero, rank_one = results
        assert rank_zero.successful()  # both on simdev:0, rank 0's own device
        assert not rank_one.successful()
        shown = [out.get("data", {}).get("text/plain", "") for out in rank_one.outputs]
        (diagnosis,) = [text for text in shown if "Device mismatch" in text]
        assert (
            "_tdm_fix_model (Linear, 144 B) is on simdev:0; _tdm_fix_x (Tensor, 64 B) is on "
            "simdev:1."
        ) in diagnosis
        assert (
            'Fix: _tdm_fix_model.to("simdev:1")   # this process is rank 1 of 2, whose own '
            "device is simdev:1: what is on simdev:0 joins it"
        ) in diagnosis
        # the fix, applied as the user would, makes the cell run
        fixed = ranks[ranks.ids[1]].execute(
            '_tdm_fix_model.to("simdev:1")\n'
            "_tdm_fix_seen = str(_tdm_fix_model(_tdm_fix_x).device)\n",
            block=True,
        )
        assert fixed.successful()
        assert ranks[ranks.ids[1]].pull("_tdm_fix_seen", block=True) == "simdev:1"
    finally:
        ranks[:].execute(f"{CLEANUP}\nglobals().pop('_tdm_fix_seen', None)", block=True)
