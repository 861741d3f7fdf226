"""A real ipyparallel cluster for the engine tests: two engines started once per test session
(``ipp.Cluster(n=2)``, as ipyparallel's own docs start one), each with the simulated
accelerator registered (two devices, simdev:0 and simdev:1) and the extension loaded, stopped at
the end of the session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from parallel_ranks import TIMEOUT, free_port, on_every_rank

ENGINES = 2
SIMULATED_DEVICES = 2
# engines are separate processes: the simulated accelerator is registered there by this cell
ENGINE_SETUP = (
    "from torchdevice_magic.testing import simulated_accelerator\n"
    "simulated_accelerator()\n"
    "import torch\n"
    "get_ipython().run_line_magic('load_ext', 'torchdevice_magic')\n"
)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    """The connected ``ipyparallel.Client`` of a 2-engine cluster with the extension loaded on
    every engine. Tests must leave the engines' namespaces as they found them (or use names of
    their own): the cluster is shared by the whole session to keep its start-up (about 7 s) once."""
    ipp = pytest.importorskip("ipyparallel")
    # the engines import the package from this checkout, not from wherever the venv points
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    # two simulated devices on every engine (read when the setup cell registers it), so that
    # ranks have a device each; only the engines' environment, not this process's
    from traitlets.config import Config

    from torchdevice_magic.testing import DEVICES_VARIABLE

    environment = {DEVICES_VARIABLE: str(SIMULATED_DEVICES)}
    config = Config({"LocalEngineSetLauncher": {"environment": environment}})
    running = ipp.Cluster(n=ENGINES, log_level=40, config=config)
    client = running.start_and_connect_sync()
    try:
        client.wait_for_engines(ENGINES, timeout=60)
        client[:].execute(ENGINE_SETUP, block=True)
        yield client
    finally:
        client.close()
        running.stop_cluster_sync()


@pytest.fixture
def engines(cluster: Any) -> Any:
    """A blocking DirectView on every engine of the session's cluster."""
    view = cluster[:]
    view.block = True
    return view


@pytest.fixture(scope="module")
def ranks(cluster: Any) -> Iterator[Any]:
    """The cluster's engines joined in one gloo process group (rank = the engine's place in the
    client's ids), for one test module; the group is destroyed at the module's end."""
    port = free_port()
    pending = [
        cluster[engine].execute(
            "import torch.distributed as dist\n"
            f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{port}',"
            f" rank={rank}, world_size={len(cluster.ids)})\n",
            block=False,
        )
        for rank, engine in enumerate(cluster.ids)
    ]
    for result in pending:
        result.get(timeout=TIMEOUT)
    try:
        yield cluster
    finally:
        on_every_rank(cluster, "dist.destroy_process_group()\n")
