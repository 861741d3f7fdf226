"""The story notebooks in ``notebooks/`` run top to bottom in a real kernel, and say what they
claim: the diagnosis names the right variables and devices, moves land on the target device,
the checkpoint split is shown and then gone, undo from meta is refused (or round-trips on a
GPU), hidden rows appear with ``--hidden``, and two real reports are diagnosed as their threads
resolved them and the typed fix computes the right values.

Each notebook is executed once, from a copy in a temporary folder (outputs are never written
back), with ``allow_errors=False``: only cells tagged ``raises-exception`` may fail. The
assertions read the device the notebook chose (``DEVICE = meta`` without CUDA, ``cuda`` with
it) from its own output, so they hold on a CPU-only machine and on a GPU machine.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.kernel

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
#: notebook -> the ids of the cells that are meant to fail (tagged "raises-exception")
FAILING_CELLS = {
    "01_the_error.ipynb": {"error"},
    "02_data_pipeline.ipynb": {"error"},
    "03_checkpoint.ipynb": {"error"},
    "04_tour.ipynb": set(),
    "06_real_reports.ipynb": {"loss-error", "scale-error"},
    "07_meta.ipynb": set(),
    "08_engines.ipynb": {"error"},
    "09_dry_run.ipynb": set(),
}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


# -- running --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_notebook(tmp_path_factory):
    """Execute a notebook (once per module) from a temporary copy; return the executed node."""
    done: dict[str, nbformat.NotebookNode] = {}

    def run(name: str) -> nbformat.NotebookNode:
        if name not in done:
            folder = tmp_path_factory.mktemp(Path(name).stem)
            copy = folder / name
            shutil.copy(NOTEBOOKS / name, copy)
            nb = nbformat.read(copy, as_version=4)
            NotebookClient(
                nb,
                timeout=120,
                kernel_name="python3",
                allow_errors=False,
                resources={"metadata": {"path": str(folder)}},
            ).execute()
            done[name] = nb
        return done[name]

    return run


# -- reading outputs --------------------------------------------------------------------------------


def cell(nb: nbformat.NotebookNode, cell_id: str) -> nbformat.NotebookNode:
    for c in nb.cells:
        if c.get("id") == cell_id:
            return c
    raise AssertionError(f"no cell with id {cell_id!r}")


def stream(c: nbformat.NotebookNode, name: str = "stdout") -> str:
    return "".join(o["text"] for o in c.outputs if o.output_type == "stream" and o.name == name)


def shown(c: nbformat.NotebookNode) -> str:
    """The text/plain of everything a cell displayed or returned."""
    return "\n".join(
        o["data"].get("text/plain", "")
        for o in c.outputs
        if o.output_type in ("display_data", "execute_result")
    )


def errors(c: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [o for o in c.outputs if o.output_type == "error"]


def device_of(nb: nbformat.NotebookNode) -> str:
    match = re.search(r"DEVICE = (\w+)", stream(cell(nb, "setup")))
    assert match, "the setup cell prints DEVICE"
    assert match.group(1) in ("cuda", "simdev")
    return match.group(1)


def widget_lines(nb: nbformat.NotebookNode, c: nbformat.NotebookNode) -> list[str]:
    """The visible text of the widget a cell displayed, as the kernel left it (the table is
    live: this is its state after the last cell), one line per HTML widget / button."""
    views = [o["data"][WIDGET_VIEW] for o in c.outputs if WIDGET_VIEW in o.get("data", {})]
    assert views, f"cell {c.get('id')!r} displays no widget"
    state = nb.metadata["widgets"][WIDGET_STATE]["state"]
    lines: list[str] = []

    def model(ref: str) -> dict:
        return state[ref.removeprefix("IPY_MODEL_")]

    def walk(entry: dict) -> None:
        values = entry["state"]
        layout = values.get("layout")
        if isinstance(layout, str) and model(layout)["state"].get("display") == "none":
            return
        if entry["model_name"] == "HTMLModel":
            text = html.unescape(re.sub(r"<[^>]+>", " ", values.get("value", "")))
            if text.split():
                lines.append(" ".join(text.split()))
        elif entry["model_name"] == "ButtonModel":
            lines.append(f"[{values.get('description', '')}]")
        elif entry["model_name"] == "DropdownModel" and values.get("index") is not None:
            lines.append(f"{values['description']}: {values['_options_labels'][values['index']]}")
        for child in values.get("children", []):
            walk(model(child))

    walk(model(views[-1]["model_id"]))
    return lines


def displays_widget(c: nbformat.NotebookNode) -> None:
    """The cell ran and displayed a widget (the live DeviceTable of ``%devices``)."""
    assert not errors(c)
    assert [o for o in c.outputs if WIDGET_VIEW in o.get("data", {})], c.outputs


def row(lines: list[str], name: str) -> str:
    """The table row whose first cell is ``name``."""
    found = [line for line in lines if line.split(" ", 1)[0] == name]
    assert found, f"no row {name!r} in {lines}"
    return found[0]


# -- the notebooks as committed ---------------------------------------------------------------------


def test_the_notebooks_are_the_stories():
    # 05_memory.ipynb is the memory story, run and checked by tests/integration/test_notebook_memory.py
    stories = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb") if p.name != "05_memory.ipynb")
    assert stories == sorted(FAILING_CELLS)


@pytest.mark.parametrize("name", sorted(FAILING_CELLS))
def test_notebook_is_committed_clean(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    assert nb.metadata["kernelspec"]["name"] == "python3"
    for c in nb.cells:
        if c.cell_type == "code":
            assert c.outputs == [] and c.execution_count is None, f"{name}: {c.id} has outputs"
    tagged = {c.id for c in nb.cells if "raises-exception" in c.metadata.get("tags", [])}
    assert tagged == FAILING_CELLS[name]
    # the stand-in is explained up front, and the setup cell picks the device: cuda, or the
    # simulated accelerator (a device that keeps data, not meta)
    assert "*simulated accelerator* stands in" in nb.cells[0].source
    setup = cell(nb, "setup").source
    assert "DEVICE = simulated_accelerator()" in setup and 'DEVICE = "cuda"' in setup
    assert "meta" not in setup


# -- 01: a CPU tensor meets a model on the device ----------------------------------------------------


def test_01_the_error(run_notebook):
    nb = run_notebook("01_the_error.ipynb")
    device = device_of(nb)

    failing = cell(nb, "error")
    [error] = errors(failing)
    assert error.ename == "RuntimeError"
    diagnosis = shown(failing)
    # the model's size on the simulated device is the diagnosis tests' business; here, the
    # device the story is about
    assert re.search(rf"model \(Sequential, [^)]*\) is on {device}", diagnosis), diagnosis
    assert "x (Tensor, 160 B) is on cpu" in diagnosis
    assert f'Fix: x = x.to("{device}' in diagnosis
    kinds = [o.output_type for o in failing.outputs]
    assert kinds.index("display_data") < kinds.index("error"), "the diagnosis before the traceback"

    displays_widget(cell(nb, "table"))
    # the table is a record of its moment: after Run All it still shows x on the cpu, as the
    # text beside it says, although x was moved two cells later
    before = widget_lines(nb, cell(nb, "table"))
    assert before[0].startswith("as of ["), before
    assert " cpu " in row(before, "x") + " ", before

    click = cell(nb, "click")
    assert f"x is on {device}" in stream(click)
    lines = widget_lines(nb, click)
    assert any(line.startswith(f"target: {device}") for line in lines), lines
    assert any(re.match(rf"Moved 1 object \(160 B\) to {device}", line) for line in lines), lines

    check = cell(nb, "devicecheck")
    assert not errors(check)
    assert re.search(rf"Moved 1 object \(160 B\) to {device}", stream(check))
    report = shown(check)
    assert re.search(rf"^x\s+\w*Tensor\s+{device}", report, re.M), report

    works = stream(cell(nb, "works"))
    assert f"DEVICE: {device}\n" in works
    for name in ("model", "x", "y"):
        assert re.search(rf"^{name}: {device}", works, re.M), works


# -- 02: DataLoader batches left on the CPU ---------------------------------------------------------


def test_02_data_pipeline(run_notebook):
    nb = run_notebook("02_data_pipeline.ipynb")
    device = device_of(nb)

    failing = cell(nb, "error")
    [error] = errors(failing)
    assert error.ename == "RuntimeError"
    diagnosis = shown(failing)
    # the culprits are locals of train(), found in the failing frame
    assert re.search(r"batch_X \(Tensor, [\d.]+ \w*B, in train\(\)\) is on cpu", diagnosis)
    assert re.search(r"batch_y \(Tensor, [\d.]+ \w*B, in train\(\)\) is on cpu", diagnosis)
    assert re.search(rf"model \(Sequential, [\d.]+ \w*B\) is on {device}", diagnosis)
    assert f'Fix (inside train()): batch_X = batch_X.to("{device}' in diagnosis

    works = stream(cell(nb, "works"))
    assert f"DEVICE: {device}\n" in works
    assert re.search(rf"^model: {device}", works, re.M)
    assert re.search(rf"^loss: {device}", works, re.M), "the fixed loop computed on the device"
    assert "dataset X: cpu" in works


# -- 03: optimizer state left behind after loading a checkpoint -------------------------------------


def test_03_checkpoint(run_notebook):
    nb = run_notebook("03_checkpoint.ipynb")
    device = device_of(nb)

    # the split: the hook's one-line warning under the cell that made it
    warning = stream(cell(nb, "resume"), "stderr")
    assert f"⚠ torchdevice_magic: opt: state on cpu but parameters on {device}" in warning
    displays_widget(cell(nb, "table-before"))

    failing = cell(nb, "error")
    assert [e.ename for e in errors(failing)] == ["RuntimeError"]
    diagnosis = shown(failing)
    assert "Device mismatch" in diagnosis and "opt (AdamW" in diagnosis, diagnosis

    moved = stream(cell(nb, "move"))
    assert re.search(rf"^Moved 1 object \([\d.]+ KiB\) to {device}\S* in .*; skipped \w+ \(", moved)

    # the live table after the move: no warning, the optimizer's state is with the model
    lines = widget_lines(nb, cell(nb, "table-after"))
    assert not [line for line in lines if "state on cpu but parameters on" in line], lines
    assert "Net" in row(lines, "model") and f" {device}" in row(lines, "model")
    assert device in row(lines, "opt").split(" 4 states")[0]

    works = stream(cell(nb, "works"))
    assert f"DEVICE: {device}\n" in works
    params = re.search(r"^parameters: (.*)$", works, re.M).group(1)
    state = re.search(r"^optimizer state: (.*)$", works, re.M).group(1)
    assert params == state and re.fullmatch(rf"\['{device}[:\d]*'\]", params), works
    assert re.search(rf"^loss: {device}", works, re.M)


# -- 04: the tour ------------------------------------------------------------------------------------


def test_04_tour(run_notebook):
    nb = run_notebook("04_tour.ipynb")
    device = device_of(nb)
    displays_widget(cell(nb, "table"))

    moved = stream(cell(nb, "move"))
    assert re.search(rf"^Moved 5 objects \(598\.5 KiB\) to {device}", moved), moved
    assert re.search(rf"model: {device}\S* \| images: {device}", moved)

    # the second device keeps data (cuda, or the simulated accelerator): undo round-trips
    undo = cell(nb, "undo")
    assert not errors(undo)
    assert "model: cpu | images: cpu" in stream(undo)
    where = "cpu"

    frame = shown(cell(nb, "frame"))
    assert "shares_with" in frame and "(batch['images'], first)" in frame
    pandas = cell(nb, "pandas")
    assert re.search(rf"^{where}: model, images, labels, batch\['images'\]", stream(pandas), re.M)
    assert "images" in shown(pandas)

    # a view keeps its whole base: 1,000 numbers holding 4,000,000 bytes, until .clone()
    view = stream(cell(nb, "view")).splitlines()
    assert view[1].split() == ["row", "(1000,)", "1000", "4000000"], view
    assert view[3].split() == ["row", "(1000,)", "1000", "4000"], view

    hidden = shown(cell(nb, "hidden"))
    hidden_rows = [line for line in hidden.splitlines() if line.endswith("held by output history")]
    assert len(hidden_rows) == 1, hidden
    assert re.match(
        r"Out\[\d+\]\s+Tensor\s+cpu\s+float32\s+\(1000, 1000\)\s+3\.8 MiB", hidden_rows[0]
    )
    assert "held by output history (listed, not in the totals)" in hidden

    reset = cell(nb, "reset")
    assert "Flushing output cache" in stream(reset)
    assert "held by output history" not in shown(reset) and "row " in shown(reset)

    config = stream(cell(nb, "config"))
    for option in ("auto_diagnose", "warn_on_mixed", "default_device", "allow_meta_target"):
        assert f"TorchDeviceMagic.{option}=" in config


# -- 06: two real reports (pytorch/pytorch#122757, Lightning-AI/pytorch-lightning#1978) --------------


def test_06_real_reports(run_notebook):
    nb = run_notebook("06_real_reports.ipynb")
    device = device_of(nb)
    for link in ("pytorch/pytorch/issues/122757", "pytorch-lightning/issues/1978"):
        assert any(link in c.source for c in nb.cells if c.cell_type == "markdown"), link

    # the class weights live in loss_fn: it is named on the cpu, listed first, and moved
    failing = cell(nb, "loss-error")
    assert [e.ename for e in errors(failing)] == ["RuntimeError"]
    diagnosis = shown(failing)
    assert diagnosis.startswith("Device mismatch: loss_fn (CrossEntropyLoss, 20 B) is on cpu;")
    assert re.search(rf"model_output \(Tensor, 200 B\) is on {device}", diagnosis), diagnosis
    assert re.search(rf"labels \(Tensor, 80 B\) is on {device}", diagnosis), diagnosis
    assert f'Fix: loss_fn.to("{device}' in diagnosis, diagnosis
    assert "loss_fn.to(DEVICE)" in cell(nb, "loss-fix").source
    works = stream(cell(nb, "loss-works"))
    assert f"DEVICE: {device}\n" in works
    assert re.search(rf"^loss_fn.weight: {device}", works, re.M), works
    assert re.search(rf"^loss: {device}", works, re.M), works
    assert "same value as on the CPU: True" in works

    # the tensor made in __init__ is named by its attribute path, the fix is a buffer there
    failing = cell(nb, "scale-error")
    assert [e.ename for e in errors(failing)] == ["RuntimeError"]
    diagnosis = shown(failing)
    assert diagnosis.startswith(
        "Device mismatch: model.scale (Tensor, 16 B, a plain tensor attribute of LitModel) is on cpu;"
    ), diagnosis
    assert re.search(rf"model \(LitModel, [\d.]+ \w*B\) is on {device}", diagnosis), diagnosis
    fix = 'Fix (in LitModel.__init__): self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))'
    assert fix in diagnosis, diagnosis
    # the table says it without a forward: model spans two devices, the row names the attribute
    table = "\n".join(widget_lines(nb, cell(nb, "scale-table")))
    left = rf"model spans cpu, {device}(:0)? — model\.scale on cpu is a plain tensor attribute"
    assert re.search(left, table), table
    assert (
        'self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))' in cell(nb, "scale-fix").source
    )
    works = stream(cell(nb, "scale-works"))
    assert f"DEVICE: {device}\n" in works
    assert re.search(rf"^model.scale: {device}", works, re.M), works
    assert re.search(rf"^out: {device}", works, re.M), works
    assert "same value as on the CPU: True" in works
    assert "saved with the model: True" in works


# -- 07: a bias-free Linear built on meta gives numbers, and is caught ----------------------------


def test_07_meta(run_notebook):
    nb = run_notebook("07_meta.ipynb")
    silent = cell(nb, "silent")
    assert stream(silent).strip() == "cpu (3, 2)"  # numbers, no error
    warned = stream(silent, "stderr")
    assert "model (Linear) was called with a tensor on cpu while its weight is on meta" in warned
    assert 'model.to_empty(device="cpu") and load the weights' in warned

    check = cell(nb, "check")
    assert "Meta mixed with real data" in stream(check)
    assert "line 1: mm mixed x (3×4) on cpu, model.weight (a view) (4×2) on meta" in stream(check)
    assert "Device mismatch: model (Linear, 32 B) is on meta; x (Tensor, 48 B) is on cpu" in (
        shown(check)
    )
    assert 'Fix: model.to_empty(device="cpu")' in shown(check)
    traced = shown(cell(nb, "trace"))
    assert traced.index("Meta mixed with real data") < traced.index("Device mismatch")

    assert stream(cell(nb, "fix")).strip() == "cpu True"
    clean = cell(nb, "clean")
    assert "Meta mixed" not in stream(clean) and "Device mismatch" not in shown(clean)
    offload = cell(nb, "offload")
    assert "was called" not in stream(offload, "stderr")
    if "accelerate is not installed" not in stream(offload):
        assert "parameters on meta: True" in stream(offload)
        assert "same output: True" in stream(offload)
    assert stream(cell(nb, "device")).strip() == "True"


# -- 08: two ipyparallel engines, one view of their devices -----------------------------------------


def test_08_engines(run_notebook):
    nb = run_notebook("08_engines.ipynb")
    assert "engines: [0, 1]" in stream(cell(nb, "cluster"))
    # %%px shows each engine's stdout as display data ("[stdout:0] DEVICE = simdev")
    found = re.findall(r"DEVICE = (\w+)", shown(cell(nb, "setup")))
    assert len(found) == 2 and len(set(found)) == 1 and found[0] in ("cuda", "simdev"), found
    device = f"{found[0]}:0"
    failing = cell(nb, "error")
    assert errors(failing), "the mistake fails on the engines"
    diagnosis = shown(failing)
    assert (
        f"Device mismatch on engines 0, 1: x (Tensor, 160 B) is on cpu; model (Sequential, "
        f"1.6 KiB) is on {device}." in diagnosis
    ), diagnosis
    assert "HBox(" not in diagnosis  # no widget where no frontend can draw one

    # one row per engine and device, from the engines' summaries
    table = shown(cell(nb, "gathered"))
    for engine in (0, 1):
        assert re.search(rf"^{engine} .* {device} +1 +1\.6 KiB", table, re.M), table
        assert re.search(rf"^{engine} .* cpu +1 +160 B", table, re.M), table
    # an expanded engine lists its objects, only that one
    objects = shown(cell(nb, "objects"))
    assert "engine 1:" in objects and "engine 0:" not in objects
    assert re.search(rf"^  model  Sequential  {device}  1\.6 KiB$", objects, re.M), objects
    assert re.search(r"^  x  Tensor  cpu  160 B$", objects, re.M), objects
    frame = "\n".join(o["data"]["text/plain"] for o in cell(nb, "frame").outputs)
    assert re.search(r"^cpu +320$", frame, re.M), frame

    # the busy engine is named, the other answers, and the user's own result is still theirs
    busy = shown(cell(nb, "busy-view"))
    assert "engine 0 is not in the table: no answer within 0.5 s (busy: 1 of your requests" in busy
    assert re.search(rf"^1 .* {device} ", busy, re.M), busy
    assert not re.search(r"^0 ", busy, re.M), busy
    assert "engine 0 finished its long cell" in stream(cell(nb, "pxresult"))

    # fixed on both engines: nothing is left on the cpu
    assert shown(cell(nb, "fix")).count(f"y is on {device}") == 2
    after = shown(cell(nb, "after"))
    assert re.search(rf"^0 .* {device} +3 ", after, re.M), after
    assert " cpu " not in after, after
    assert "stopped" in stream(cell(nb, "stop"))


# -- 09: a device error and an out-of-memory error predicted before anything runs ---------------------


def test_09_dry_run(run_notebook):
    nb = run_notebook("09_dry_run.ipynb")
    device = f"{device_of(nb)}:0"
    error = shown(cell(nb, "dry-error"))
    assert "The cell would raise a device error on line 1" in error
    assert "x (Tensor, 1.0 MiB) is on cpu" in error and f"is on {device}" in error
    assert f'x = x.to("{device}")' in error
    oom = shown(cell(nb, "dry-oom"))
    assert "✓ No device error up to where the prediction stopped." in oom
    assert f"Would run out of memory: would need 320.8 MiB on {device}, 256.0 MiB free" in oom
    assert "Stopped at line 4: reads a tensor's value" in oom
    sgd = shown(cell(nb, "dry-sgd"))
    assert "✓ No device error." in sgd and "Would run out of memory" not in sgd
    assert f"✓ Fits: would need 85.2 MiB on {device}, 256.0 MiB free." in sgd
    assert stream(cell(nb, "untouched")).split() == ["False", "True", "0"]
