"""dry_run() on the simulated accelerator: the device error a cell would raise, named as the
real run names it; memory per device and what would not fit; where the prediction stops
(a value read, a shape that depends on values, a file written) and what it leaves alone."""

from __future__ import annotations

import os

import pytest
import torch

import torchdevice_magic as tdm
from torchdevice_magic.diagnose import diagnose
from torchdevice_magic.dryrun import dry_run, parse_free

pytestmark = pytest.mark.simulated

SETUP = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(DEV)
opt = torch.optim.Adam(model.parameters())
x = torch.randn(16, 8)
y = torch.randint(0, 4, (16,))
losses = []
def step(inputs, targets):
    out = model(inputs)
    return torch.nn.functional.cross_entropy(out, targets)
"""


def namespace(device: str) -> dict:
    ns: dict = {"DEV": device}
    exec(SETUP, ns)
    return ns


def real_diagnosis(cell: str, ns: dict):
    try:
        exec(cell, ns)
    except RuntimeError as error:
        return diagnose(error, ns, cell)
    return None


def names(diagnosis) -> list[str]:
    return [c.alias or c.name for c in diagnosis.culprits]


def test_a_device_error_is_predicted_with_the_culprits_the_real_run_names(simulated_device):
    cell = "loss = step(x, y)\nloss.backward()"
    ns = namespace(simulated_device)
    report = tdm.dry_run(cell, ns)
    assert report.device_error and report.error_line == 1 and report.stopped is None
    real = real_diagnosis(cell, namespace(simulated_device))
    assert real is not None
    assert names(report.diagnosis) == names(real) == ["x", "y"]
    assert report.diagnosis.culprits[0].devices == ("cpu",)
    assert report.diagnosis.culprits[0].bytes == 16 * 8 * 4  # the real tensor's size
    assert report.diagnosis.fix_text_lines() == real.fix_text_lines()
    assert "The cell would raise a device error on line 1" in report.text()
    # the diagnosis drawn as the real run's, inside the report: the same headline (operator
    # and argument), culprits, fix and message
    assert real._repr_html_() in report._repr_html_()


def test_a_batch_dict_culprit_has_the_real_batch_s_size(simulated_device):
    """``model(**batch)`` with the batch a dict of CPU tensors (a tokenizer's output): the
    culprit is the dict, with the bytes its real tensors take, as the real run says."""
    ns = namespace(simulated_device)
    ns["batch"] = {"inputs": ns.pop("x"), "targets": ns.pop("y")}
    cell = "loss = step(**batch)"
    report = tdm.dry_run(cell, ns)
    real = real_diagnosis(cell, dict(ns))
    assert real is not None and report.device_error
    assert names(report.diagnosis)[0] == names(real)[0] == "batch"
    assert report.diagnosis.culprits[0].bytes == real.culprits[0].bytes == 16 * 8 * 4 + 16 * 8


def test_a_convolution_mixing_devices_is_predicted_though_fakes_let_it_by(simulated_device):
    ns = {"conv": torch.nn.Conv1d(1, 1, 1), "s": torch.ones(1, 1, 4).to(simulated_device)}
    report = dry_run("out = conv(s)", ns)
    assert report.device_error and names(report.diagnosis) == names(
        real_diagnosis("out = conv(s)", dict(ns))
    )


def test_a_right_training_step_predicts_no_error_and_its_memory(simulated_device):
    ns = namespace(simulated_device)
    cell = "loss = step(x.to(DEV), y.to(DEV))\nloss.backward()\nopt.step()"
    report = dry_run(cell, ns)
    assert not report.device_error and report.completed
    memory = report.memory
    params = sum(p.numel() * 4 for p in ns["model"].parameters())
    assert memory.start[simulated_device] == params
    # gradients and Adam's two moments stay after the cell; activations were freed
    assert memory.left[simulated_device] >= 4 * params
    assert memory.peak[simulated_device] >= memory.left[simulated_device]
    # at the peak (the backward), the biggest are the cell's activations and gradients
    assert {a.line for a in memory.biggest} & {1, 2}
    assert "✓ No device error." in report.text()


def test_the_users_model_still_moves_after_a_dry_run_of_its_move(simulated_device):
    ns = {"DEV": simulated_device, "net": torch.nn.Linear(3, 3)}
    ns["net"](torch.randn(2, 3)).sum().backward()  # a gradient: Module.to() swaps it too
    assert dry_run("net.to(DEV)", ns).completed
    ns["net"].to(simulated_device)  # raised "Couldn't swap Linear.weight.grad" while the
    assert ns["net"].weight.grad.device.type == "simdev"  # run's converter held weak refs


def test_a_cell_that_would_not_fit_is_refused_and_one_that_fits_says_so(simulated_device):
    ns = {"torch": torch}
    cell = f"big = torch.empty(256, 1024, 1024, device='{simulated_device}')"
    report = dry_run(cell, ns, free={"simdev": 512 * 2**20})
    (fit,) = report.refused
    assert fit.device == simulated_device and fit.need == 2**30 and fit.free == 512 * 2**20
    assert "would need 1.0 GiB on simdev:0, 512.0 MiB free" in report.text()
    fitting = dry_run(cell, ns, free={"simdev": 2 * 2**30})
    assert not fitting.refused
    assert "✓ Fits: would need 1.0 GiB on simdev:0, 2.0 GiB free." in fitting.text()
    assert "✓ Fits" not in report.text()
    assert "big" not in ns


def test_meta_tensors_need_no_memory_until_the_cell_materialises_them(simulated_device):
    ns = {"torch": torch, "DEV": simulated_device, "held": torch.nn.Linear(256, 256, device="meta")}
    nominal = (256 * 256 + 256) * 4
    built = dry_run("with torch.device('meta'):\n    m = torch.nn.Linear(512, 512)", ns)
    assert built.completed and built.memory.peak == {} and built.fits == ()
    assert "meta" not in built.text()
    built_then_placed = built.cell.replace("512, 512", "256, 256") + "\nm.to_empty(device=DEV)"
    for cell in (built_then_placed, "held.to_empty(device=DEV)"):
        report = dry_run(cell, ns, free={simulated_device: nominal - 1})
        assert report.memory.peak == {simulated_device: nominal}, report.text()
        assert report.memory.start == {}  # the held meta module is no allocation
        (fit,) = report.refused
        assert fit.need == nominal
        assert {allocation.device for allocation in report.memory.biggest} == {simulated_device}


@pytest.mark.parametrize(
    "cell", ["t = torch.empty(4, device='meta').to(DEV)", "m = held.to(DEV)", "t = x.copy_(w)"]
)
def test_copying_out_of_a_meta_tensor_is_the_real_runs_error(simulated_device, cell):
    def fresh() -> dict:
        held = torch.nn.Linear(3, 3, device="meta")
        return {"torch": torch, "DEV": simulated_device, "held": held, "w": held.weight.data,
                "x": torch.ones(3, 3, device=simulated_device)}  # fmt: skip

    report = dry_run(cell, fresh())
    with pytest.raises(NotImplementedError) as real:
        exec(cell, fresh())
    assert report.device_error, report.text()
    assert type(report.error) is NotImplementedError and str(report.error) == str(real.value)


@pytest.mark.parametrize(
    ("cell", "line", "kind", "words"),
    [
        ("a = x.sum()\nif a > 0:\n    b = 1", 2, "data-dependent", "reads a tensor's value"),
        ("a = x * 2\nlosses.append(a.sum().item())", 2, "data-dependent", ".item()"),
        ("a = x + 1\nidx = torch.nonzero(a)", 2, "dynamic shape", "nonzero"),
    ],
)
def test_the_prediction_stops_where_values_are_needed(simulated_device, cell, line, kind, words):
    report = dry_run(cell, namespace(simulated_device))
    assert report.stopped is not None
    assert (report.stopped.line, report.stopped.kind) == (line, kind)
    assert words in report.stopped.reason
    assert f"Stopped at line {line}" in report.text()
    assert report.memory.peak  # what ran before the stop is counted


def test_writing_a_file_stops_the_prediction_and_writes_nothing(simulated_device, tmp_path):
    ns = namespace(simulated_device)
    for cell in (
        f"open({str(tmp_path / 'log.txt')!r}, 'w').write('x')",
        f"torch.save(model.state_dict(), {str(tmp_path / 'model.pt')!r})",
    ):
        report = dry_run("a = x * 2\n" + cell, ns)
        assert report.stopped is not None and report.stopped.kind == "side effect"
        assert report.stopped.line == 2
    assert os.listdir(tmp_path) == []
    assert dry_run(f"text = open({__file__!r}).read()", ns).completed  # reading is fine


def test_a_magic_in_the_cell_stops_the_prediction_and_runs_nothing(simulated_device):
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.user_ns.update(namespace(simulated_device))
    report = dry_run("a = x * 2\n%time b = model(x)\nc = 1", shell.user_ns, shell=shell)
    assert report.stopped is not None and report.stopped.kind == "side effect"
    assert report.stopped.line == 2 and "magic" in report.stopped.reason
    assert not {"a", "b", "c"} & set(shell.user_ns)


def test_appending_to_an_outside_list_changes_only_the_copy(simulated_device):
    ns = namespace(simulated_device)
    report = dry_run("losses.append(step(x.to(DEV), y.to(DEV)))", ns)
    assert report.completed and ns["losses"] == []
    assert any("changes losses" in note for note in report.notes)


def test_a_dataloader_is_iterated_and_the_random_state_is_left_as_it_was(simulated_device):
    ns = namespace(simulated_device)
    exec(
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.randn(12, 8)), batch_size=4)",
        ns,
    )
    state = torch.random.get_rng_state()
    report = dry_run("torch.manual_seed(1)\nfor (xb,) in loader:\n    out = model(xb)", ns)
    assert report.device_error and report.error_line == 3
    assert torch.equal(torch.random.get_rng_state(), state)


def test_a_function_reads_the_copies_of_the_globals_it_uses(simulated_device):
    ns = namespace(simulated_device)
    exec("scale = torch.ones(4, device=DEV)\ndef scaled(t):\n    return t * scale", ns)
    report = dry_run("out = scaled(model(x.to(DEV)))", ns)
    assert report.completed and not report.device_error
    assert "out" not in ns


def test_a_real_tensor_the_run_could_not_copy_stops_it_and_stays_as_it_was(simulated_device):
    library: dict = {"weight": torch.ones(3, 3, device=simulated_device)}
    exec("def project(t):\n    return t @ weight", library)  # a global of another module
    ns = {"torch": torch, "project": library["project"], "DEV": simulated_device}
    report = dry_run("y = project(torch.ones(3, 3, device=DEV))", ns)
    assert report.stopped is not None and report.stopped.kind == "not copied"
    assert torch.equal(library["weight"].cpu(), torch.ones(3, 3)) and "y" not in ns


def test_a_cell_that_does_not_compile_predicts_nothing():
    report = dry_run("x = (", {})
    assert report.memory is None and report.stopped is not None and report.stopped.line == 1
    assert report.text().splitlines()[1].startswith("Nothing predicted: the cell does not compile")


def test_sizes_are_read_as_device_equals_size():
    assert parse_free("cuda:0=24GiB") == ("cuda:0", 24 * 2**30)
    assert parse_free("cpu=1.5GB") == ("cpu", 1_500_000_000)
    assert parse_free("cuda:1=4096") == ("cuda:1", 4096)
    for text in ("cuda:0", "=1GiB", "cuda:0=lots"):
        with pytest.raises(ValueError, match="DEVICE=SIZE"):
            parse_free(text)
