"""``notebooks/05_memory.ipynb`` runs top to bottom in a real kernel and says what it claims.

Six patterns (output history, traceback, list of losses, optimizer of a deleted model, forward
hook stash, second name): in each, the cell's growth shows in the timeline, ``%devices
--holders`` names the holder, ``%devices --release 0`` frees exactly the bytes it added; the
out-of-memory section explains a real allocation failure on the notebook's device. The sizes
the markdown states are asserted against the outputs. Runs once, from a temporary copy, on cpu
(or cuda where there is one, ``./dev gpu-check``: the sizes are the same).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.kernel

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "05_memory.ipynb"
FAILING = {"traceback-error", "oom"}


@pytest.fixture(scope="module")
def nb(tmp_path_factory):
    folder = tmp_path_factory.mktemp("memory")
    copy = folder / NOTEBOOK.name
    shutil.copy(NOTEBOOK, copy)
    notebook = nbformat.read(copy, as_version=4)
    NotebookClient(
        notebook,
        timeout=180,
        kernel_name="python3",
        allow_errors=False,  # only the cells tagged raises-exception may fail
        resources={"metadata": {"path": str(folder)}},
    ).execute()
    return notebook


def cell(nb, cell_id: str):
    for c in nb.cells:
        if c.get("id") == cell_id:
            return c
    raise AssertionError(f"no cell {cell_id!r}")


def text(nb, cell_id: str, name: str | None = None) -> str:
    parts = []
    for output in cell(nb, cell_id).outputs:
        if output.output_type == "stream" and name in (None, output.name):
            parts.append(output.text)
        elif name is None and "data" in output:
            parts.append(output.data.get("text/plain", ""))
        elif name is None and output.output_type == "error":
            parts.append(f"{output.ename}: {output.evalue}")
    return "\n".join(parts)


def markdown(nb, cell_id: str) -> str:
    return " ".join(cell(nb, cell_id).source.split())


def device(nb) -> str:
    chosen = re.search(r"DEVICE = (\w+)", text(nb, "setup")).group(1)
    return "cuda:0" if chosen == "cuda" else "cpu"


def test_committed_clean_with_the_failing_cells_tagged():
    committed = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(committed)
    assert committed.metadata["kernelspec"]["name"] == "python3"
    for c in committed.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, c.id
    tagged = {c.id for c in committed.cells if "raises-exception" in c.metadata.get("tags", [])}
    assert tagged == FAILING


def test_output_history(nb):
    dev = device(nb)
    assert "+4.0 MiB through `Out[N]`" in markdown(nb, "history-md")
    row = text(nb, "history-timeline").splitlines()[-1]
    assert re.search(
        rf"{dev}\s+4\.0 MiB\s+\+4\.0 MiB .*Out\[\d+\] \(also _\d+, _\) \+4\.0 MiB", row
    )
    assert re.search(
        rf"\[0\] Out\[\d+\] \(also _\d+, _\): 4\.0 MiB on {dev}", text(nb, "history-holders")
    )
    assert "freed 4.0 MiB" in text(nb, "history-release")
    assert "frees all 4.0 MiB" in markdown(nb, "history-holders-md")


def test_traceback(nb):
    dev = device(nb)
    assert "shapes cannot be multiplied" in text(nb, "traceback-error")
    where = "last error (RuntimeError): train() local 'batch', train() local 'hidden'"
    assert f"{where} +8.0 MiB" in text(nb, "traceback-timeline")
    assert f"[0] {where}: 8.0 MiB on {dev}" in text(nb, "traceback-holders")
    assert "freed 8.0 MiB" in text(nb, "traceback-release")
    claim = markdown(nb, "traceback-holders-md")
    assert "`train() local 'batch'` and `train() local 'hidden'`, 8.0 MiB together" in claim


def test_list_of_losses_and_its_leak_warning(nb):
    dev = device(nb)
    assert "+8.0 MiB" in markdown(nb, "losses-md")
    assert "torchdevice_magic" not in text(nb, "losses-train")
    warning = text(nb, "losses-train-again", "stderr")
    assert (
        f"losses keeps 16 autograd graphs alive, 16.0 MiB on {dev}, more after every run: "
        "append loss.item() or loss.detach()"
    ) in warning
    assert "losses keeps 16 autograd graphs alive, 16.0 MiB" in markdown(nb, "losses-again-md")
    rows = text(nb, "losses-timeline").splitlines()[-2:]
    assert "losses: 8 autograd graphs +8.0 MiB" in rows[0]
    assert "losses: 16 autograd graphs +8.0 MiB" in rows[1]
    assert f"[0] losses: 16 autograd graphs: 16.0 MiB on {dev}" in text(nb, "losses-holders")
    released = text(nb, "losses-release")
    assert "freed 16.0 MiB" in released
    assert "16 losses kept; the first still has a graph: False" in released


def test_optimizer_of_a_deleted_model(nb):
    dev = device(nb)
    rows = text(nb, "optimizer-timeline").splitlines()[-2:]
    assert "+16.0 MiB" in rows[0]
    # del big_model changes nothing on the device: the bytes move to the holder
    # (on cuda a peak column stands between the change and what grew)
    assert re.search(
        r"\+0 B\s+(\S+ \S+\s+)?opt: state of parameters no variable holds \+16\.0 MiB", rows[1]
    )
    assert "big_model -8.0 MiB" in rows[1]
    assert "changed nothing on the device" in markdown(nb, "optimizer-holders-md")
    listed = text(nb, "optimizer-holders")
    assert f"[0] opt: state of parameters no variable holds: 16.0 MiB on {dev}" in listed
    assert "freed 16.0 MiB" in text(nb, "optimizer-release")


def test_forward_hook_stash(nb):
    dev = device(nb)
    assert "+4.0 MiB" in markdown(nb, "hook-md")
    rows = text(nb, "hook-timeline").splitlines()[-2:]
    assert all("net.0 forward hook closure +4.0 MiB" in row for row in rows)
    assert f"net.0 forward hook closure keeps 8 tensors alive, 8.0 MiB on {dev}" in text(
        nb, "hook-run-again", "stderr"
    )
    assert f"[0] net.0 forward hook closure: 8.0 MiB on {dev}" in text(nb, "hook-holders")
    released = text(nb, "hook-release")
    assert "freed 8.0 MiB" in released and "torch.Size([1, 512])" in released


def test_second_name(nb):
    dev = device(nb)
    row = text(nb, "second-timeline").splitlines()[-1]
    # nothing came or went on the device: no name grew or shrank, the note says why
    assert re.search(rf"{dev}\s+\S+ \S+\s+\+0 B\s+(\S+ \S+\s+)?\(del features freed", row), row
    assert "del features freed nothing of 4.0 MiB: another name still holds it" in row
    assert "-4.0 MiB" not in row
    listed = text(nb, "second-holders")
    assert (
        f"[0] cache['features'] (second name: still holds deleted features): 4.0 MiB on {dev}"
        in (listed)
    )
    released = text(nb, "second-release")
    assert "deleted cache['features']; freed 4.0 MiB" in released
    assert "{'note': 'kept for later'}" in released


def test_out_of_memory_explained(nb):
    """The allocation fails on the notebook's device (CUDA's caching allocator on a GPU, the
    CPU allocator here) and the explanation speaks of that device."""
    on = device(nb)
    explained = text(nb, "oom")
    if on == "cpu":
        assert "DefaultCPUAllocator: can't allocate memory" in explained
    else:
        assert "OutOfMemoryError: CUDA out of memory. Tried to allocate 1024.00 GiB" in explained
        assert re.search(rf"  {on} has [\d.]+ [GT]iB in all", explained)
    assert f"Out of memory on {on}: the request was 1.0 TiB." in explained
    biggest = explained.split(f"Biggest named objects on {on}:\n")[1].splitlines()[0]
    assert biggest.strip() == "weights: 4.0 MiB"
    assert re.search(r"\[0\] Out\[\d+\].*: 4\.0 MiB -> %devices --release 0", explained)
    assert "freeing memory cannot help" in explained
    claim = markdown(nb, "oom-md")
    assert "names `weights` as the biggest named object on that device" in claim
    assert "lists `Out[N]` with `%devices --release 0`" in claim
    assert "asks `DEVICE` for 1.0 TiB" in claim


def test_offloaded_weights_are_shown_where_they_are(nb):
    assert "parameters on meta ; output (1, 256)" in text(nb, "offload")
    (row,) = [line for line in text(nb, "offload-devices").splitlines() if "offloaded" in line]
    assert row.split()[:3] == ["offloaded", "Sequential", "cpu"]
    assert "514.0 KiB" in row and "meta" not in row
    assert "offloaded: cpu 514.0 KiB; accelerate's hooks own its placement" in row
    assert "`offloaded: cpu 514.0 KiB`" in markdown(nb, "offload-md")


def test_the_whole_timeline_and_what_is_left(nb):
    timeline = text(nb, "timeline")
    for freed in ("-4.0 MiB", "-8.0 MiB", "-16.0 MiB"):
        assert freed in timeline
    left = text(nb, "end-holders")
    assert re.search(r"\[0\] Out\[\d+\]", left) and "[1]" not in left
