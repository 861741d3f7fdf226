"""The shared cluster fixture gives engines with the simulated accelerator and the extension."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.engines


def test_every_engine_has_the_simulated_accelerator_and_the_extension(engines: Any) -> None:
    engines.execute(
        "import sys\n"
        "_tdm_check = (torch.ones(1).to('simdev:0').device.type,"
        " 'torchdevice_magic' in get_ipython().extension_manager.loaded)"
    )
    assert engines.pull("_tdm_check") == [("simdev", True), ("simdev", True)]
    engines.execute("del _tdm_check")
