"""On an ipyparallel engine a device error is explained as in a plain cell (culprits, fix, the
engine named), with no widget in the engine's output; the diagnosis travels back with the
error reply, and the client's extension shows it once for all engines that made it."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from IPython.utils.capture import capture_output

from torchdevice_magic.diagnose import engine_diagnoses

ipp = pytest.importorskip("ipyparallel")
pytestmark = pytest.mark.engines

CELL = (
    'engine_model = torch.nn.Linear(8, 4).to("simdev:0")\n'
    "engine_x = torch.randn(2, 8)\n"
    "engine_y = engine_model(engine_x)\n"
)
CULPRITS = (
    "engine_x (Tensor, 64 B) is on cpu; engine_model (Linear, 144 B) is on simdev:0.\n"
    'Fix: engine_x = engine_x.to("simdev:0")'
)
CLEANUP = "for _n in ('engine_model', 'engine_x', 'engine_y', '_n'): globals().pop(_n, None)"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


@ipp.interactive  # sent by value, as a function a notebook defines is
def failing_function() -> Any:
    import torch

    weights = torch.nn.Linear(8, 4).to("simdev:0")
    batch = torch.randn(2, 8)
    return weights(batch)


@ipp.interactive
def failing_step(size: int) -> Any:
    import torch

    layer = torch.nn.Linear(size, 4).to("simdev:0")
    inputs = torch.randn(2, size)
    return layer(inputs)


def engine_outputs(result: Any) -> list[dict[str, Any]]:
    """The display data each engine sent, in engine order."""
    return [out.get("data", {}) for outputs in result.outputs for out in outputs]


def error_of(result: Any) -> Any:
    with pytest.raises(Exception) as caught:
        result.get(timeout=60)
    return caught.value


@pytest.fixture
def cleanup(engines: Any) -> Any:
    yield
    engines.execute(CLEANUP)


def test_execute_names_the_culprits_and_the_engine_with_no_widget(engines, cleanup) -> None:
    # dv.execute runs a cell silently: no pre_run_cell hook sees it. The names come from an
    # earlier cell, so the fix is a move a button could make (where widgets render)
    setup, failing = CELL.rsplit("\n", 2)[:2]
    engines.execute(setup)
    result = engines.execute(failing, block=False)
    error = error_of(result)
    outputs = engine_outputs(result)
    assert [data["text/plain"].split("\nFix")[0] for data in outputs] == [
        f"Device mismatch on engine {engine}: {CULPRITS.split(chr(10))[0]}" for engine in (0, 1)
    ]
    assert all(CULPRITS in data["text/plain"] for data in outputs)
    assert not any(WIDGET_MIME in data or "HBox" in data["text/plain"] for data in outputs)
    found = engine_diagnoses(error)
    assert found is not None and len(found.findings) == 1  # both engines found the same
    (finding,) = found.findings
    assert finding.engines == (0, 1)
    assert finding.diagnosis.origin == "engines 0, 1"
    assert [c.name for c in finding.diagnosis.culprits] == ["engine_x", "engine_model"]
    assert finding.line == {**finding.line, "line": 1, "function": None}
    assert finding.px_line() == '%px engine_x = engine_x.to("simdev:0")'


def test_a_function_run_by_apply_is_explained_from_its_own_frames(engines) -> None:
    error = error_of(engines.apply_async(failing_function))
    assert type(error).__name__ == "CompositeError"
    found = engine_diagnoses(error)
    assert found is not None, str(error)
    (finding,) = found.findings
    text = finding.text()
    assert text.startswith(
        "Device mismatch on engines 0, 1: batch (Tensor, 64 B, in failing_function()) is on "
        "cpu; weights (Linear, 144 B, in failing_function()) is on simdev:0."
    )
    assert 'Fix (inside failing_function()): batch = batch.to("simdev:0")' in text
    lines, first = inspect.getsourcelines(failing_function)
    failing = first + next(i for i, line in enumerate(lines) if "return" in line)
    where = f"At line {failing} in failing_function() (test_engine_diagnosis.py)"
    assert f"{where}: return weights(batch)" in text
    assert finding.method == "apply" and finding.px_line() == ""


def test_a_function_run_by_map_is_explained_on_every_engine(engines) -> None:
    error = error_of(engines.map_async(failing_step, [8, 8]))
    found = engine_diagnoses(error)
    assert found is not None, str(error)
    (finding,) = found.findings
    assert finding.engines == (0, 1) and finding.method == "apply"
    assert [c.name for c in finding.diagnosis.culprits] == ["inputs", "layer"]
    assert finding.line is not None and finding.line["function"] == "failing_step"


def test_one_engine_s_remote_error_carries_its_diagnosis(cluster) -> None:
    view = cluster[1]
    error = error_of(view.apply_async(failing_function))
    found = engine_diagnoses(error)
    assert found is not None and found.findings[0].engines == (1,)
    assert found.findings[0].diagnosis.origin == "engine 1"


def test_devices_on_an_engine_is_text_and_html_and_no_comm_is_opened(engines) -> None:
    engines.execute("tdm_devices_probe = torch.ones(3)")
    result = engines.execute("%devices", silent=False, block=False)
    result.get(timeout=60)
    tables = engine_outputs(result)
    assert len(tables) == 2
    assert all(set(data) == {"text/plain", "text/html"} for data in tables)
    assert all("tdm_devices_probe" in data["text/plain"] for data in tables)
    # neither the sidebar's announcement nor any widget opened a comm to the client
    engines.execute("tdm_comms = len(__import__('comm').get_comm_manager().comms)")
    assert engines.pull("tdm_comms") == [0, 0]
    engines.execute("del tdm_devices_probe, tdm_comms")


def run_px(shell: Any, cell: str) -> tuple[Any, list[str]]:
    with capture_output() as captured:
        result = shell.run_cell(cell)
    return result, [out.data.get("text/plain", "") for out in captured.outputs]


@pytest.fixture
def client_shell(ip, cluster) -> Any:
    """The in-process test shell (the extension loaded) with ipyparallel's %px magics."""
    view = cluster[:]
    view.activate()
    yield ip
    view.execute(CLEANUP, block=True)


def test_px_cell_shows_each_engine_s_diagnosis_and_one_for_all_in_the_client(
    client_shell,
) -> None:
    result, shown = run_px(client_shell, "%%px --block --progress-after -1\n" + CELL)
    assert type(result.error_in_exec).__name__ in {"CompositeError", "AlreadyDisplayedError"}
    for engine in (0, 1):
        assert any(text.startswith(f"Device mismatch on engine {engine}: ") for text in shown)
    client = [text for text in shown if text.startswith("Device mismatch on engines 0, 1")]
    assert len(client) == 1 and CULPRITS in client[0]
    assert "At line 3 of the cell: engine_y = engine_model(engine_x)" in client[0]
    assert not any("HBox" in text for text in shown)


def test_a_noblock_px_result_is_explained_when_it_is_read(client_shell) -> None:
    started, _ = run_px(client_shell, "%%px --noblock\n" + CELL)
    assert started.error_in_exec is None
    result, shown = run_px(client_shell, "%pxresult")
    assert type(result.error_in_exec).__name__ == "CompositeError"
    client = [text for text in shown if text.startswith("Device mismatch on engines 0, 1")]
    assert len(client) == 1 and CULPRITS in client[0]


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def process_group(cluster: Any, engines: Any) -> Any:
    """A gloo process group across the two engines (rank = engine id), destroyed afterwards;
    one another test left up is used as it is."""
    engines.execute("import torch.distributed as tdm_dist\ntdm_up = tdm_dist.is_initialized()")
    if all(engines.pull("tdm_up")):
        yield
        return
    for engine in cluster.ids:
        cluster[engine].push({"tdm_rank": engine}, block=True)
    init = (
        f"tdm_dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', "
        "rank=tdm_rank, world_size=2)"
    )
    engines.execute(init, block=False).get(timeout=60)  # both ranks must join at once
    yield
    engines.execute("tdm_dist.destroy_process_group(); del tdm_rank, tdm_up, tdm_dist")


def test_with_a_process_group_up_the_rank_and_host_are_named(engines, process_group) -> None:
    import socket

    setup, failing = CELL.rsplit("\n", 2)[:2]
    engines.execute(setup)
    result = engines.execute(failing, block=False)
    error = error_of(result)
    engines.execute(CLEANUP)
    host = socket.gethostname()  # the engines run on this machine
    heads = [data["text/plain"].split(":")[0] for data in engine_outputs(result)]
    assert heads == [f"Device mismatch on engine {r} (rank {r} of 2 on {host})" for r in (0, 1)]
    found = engine_diagnoses(error)
    assert found is not None
    assert [f.diagnosis.origin for f in found.findings] == [
        f"engines 0, 1 (ranks 0, 1 of 2 on {host})"
    ]


WRAPPED = (
    "tdm_wrapped = sorted(set(vars(get_ipython().kernel)) & {'init_metadata', 'finish_metadata'})"
)


def test_unload_gives_the_engine_kernel_its_own_methods_back(engines) -> None:
    engines.execute(WRAPPED)
    assert engines.pull("tdm_wrapped") == [["finish_metadata", "init_metadata"]] * 2
    try:
        engines.execute("%unload_ext torchdevice_magic")
        engines.execute(WRAPPED)
        assert engines.pull("tdm_wrapped") == [[], []]
    finally:
        engines.execute("%load_ext torchdevice_magic\ndel tdm_wrapped")
