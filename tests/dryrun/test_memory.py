"""The dry run's memory forecast (torchdevice_magic/dryrun/memory.py): the predicted peak of ten
cells against PyTorch's ``MemTracker`` on a real run (target: within 10%), the counting rule
itself against ``MemTracker``, frees, the starting allocation, lines and variables, CUDA's
512-byte blocks, and the foreach path a fake optimizer step must take.

The ten cells and the three ways to run them are in tests/dryrun/memorycells.py.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
from typing import Any

import pytest
import torch
from memorycells import CELLS, Cell, counted, fake_copy, measured_by_memtracker, predicted
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.optim.optimizer import _foreach_supported_types as optimizer_foreach_types
from torch.utils._foreach_utils import _foreach_supported_types as utils_foreach_types
from torch.utils._python_dispatch import _get_current_dispatch_mode

from torchdevice_magic.dryrun.memory import (
    Allocation,
    MemoryCounter,
    MemoryForecast,
    allocator_bytes,
)

HAS_CUDA = torch.cuda.is_available()
F32 = 4


def _cell(name: str) -> Cell:
    return next(cell for cell in CELLS if cell.name == name)


def _dry_run(source: str, namespace: dict[str, Any], filename: str = "<cell>") -> MemoryForecast:
    """``source`` run on a fake copy of ``namespace``, counted."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    shadow = fake_copy({"torch": torch, **namespace}, mode)
    with mode, MemoryCounter(filename) as counter:
        exec(compile(source, filename, "exec"), shadow)
    return counter.forecast(shadow)


# -- accuracy: the ten cells -------------------------------------------------------------------


def test_the_table_has_ten_cells_training_and_inference() -> None:
    assert len(CELLS) == 10 and len({cell.name for cell in CELLS}) == 10
    inference = [cell for cell in CELLS if not cell.training]
    assert len(inference) >= 2 and len(CELLS) - len(inference) >= 5
    assert all("no_grad" in cell.source for cell in inference)
    for family in ("mlp", "cnn", "transformer"):
        assert any(cell.name.startswith(family) and cell.training for cell in CELLS)
    assert any("AdamW" in repr(cell.make("cpu")["opt"]) for cell in CELLS if cell.name[:3] == "cnn")


@pytest.mark.parametrize("cell", CELLS, ids=lambda cell: cell.name)
def test_predicted_peak_is_within_ten_percent_of_memtrackers_peak_in_a_real_run(
    cell: Cell,
) -> None:
    forecast, _ = predicted(cell)
    measured = measured_by_memtracker(cell)
    assert measured > 0
    assert abs(forecast.peak["cpu"] - measured) <= 0.10 * measured, (forecast.peak, measured)
    # the run added something on top of what was there: the peak is not just the start
    assert forecast.peak["cpu"] > forecast.start["cpu"]


@pytest.mark.parametrize("name", ["mlp_adamw_step", "cnn_adamw_step"])
def test_the_counting_rule_on_a_real_run_gives_memtrackers_peak(name: str) -> None:
    real, _ = counted(_cell(name))
    assert real.peak["cpu"] == measured_by_memtracker(_cell(name))


@pytest.mark.parametrize("name", ["cnn_adamw_two_steps", "transformer_inference_no_grad"])
def test_fake_and_real_runs_agree_on_start_peak_and_left(name: str) -> None:
    fake, _ = predicted(_cell(name))
    real, _ = counted(_cell(name))
    assert (fake.start, fake.peak, fake.left) == (real.start, real.peak, real.left)
    assert [(a.nbytes, a.line, a.variable) for a in fake.biggest] == [
        (a.nbytes, a.line, a.variable) for a in real.biggest
    ]


# -- the API -----------------------------------------------------------------------------------


def test_a_forecast_is_frozen_data_per_device_string() -> None:
    forecast, _ = predicted(_cell("mlp_adamw_step"))
    assert isinstance(forecast, MemoryForecast)
    for figures in (forecast.start, forecast.peak, forecast.left):
        assert set(figures) == {"cpu"} and all(type(v) is int for v in figures.values())
    assert forecast.start["cpu"] <= forecast.left["cpu"] <= forecast.peak["cpu"]
    assert forecast.growth("cpu") == forecast.peak["cpu"] - forecast.start["cpu"]
    assert forecast.growth("cuda:0") == 0
    assert 0 < len(forecast.biggest) <= 5
    assert all(isinstance(a, Allocation) for a in forecast.biggest)
    sizes = [a.nbytes for a in forecast.biggest]
    assert sizes == sorted(sizes, reverse=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        forecast.peak = {}  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        forecast.biggest[0].nbytes = 0  # type: ignore[misc]


def test_a_freed_temporary_counts_in_the_peak_and_not_in_what_is_left() -> None:
    source = "tmp = torch.ones(1000, 1000)\ntotal = tmp.sum()\ndel tmp\n"
    forecast = _dry_run(source, {"x": torch.zeros(1000)})
    assert forecast.start == {"cpu": 1000 * F32}
    assert forecast.peak == {"cpu": 1000 * F32 + 1000 * 1000 * F32 + F32}
    assert forecast.left == {"cpu": 1000 * F32 + F32}
    assert forecast.biggest[0] == Allocation("cpu", 1000 * 1000 * F32, 1, None)


def test_storages_alive_at_the_start_count_once_even_when_the_cell_never_reads_them() -> None:
    unused = torch.zeros(1000)
    namespace = {"unused": unused, "view": unused[:10], "tied": [unused]}
    forecast = _dry_run("y = torch.zeros(10)\n", namespace)
    assert forecast.start == {"cpu": 1000 * F32}
    assert forecast.peak == forecast.left == {"cpu": 1000 * F32 + 10 * F32}
    assert forecast.biggest == (
        Allocation("cpu", 1000 * F32, None, "unused"),
        Allocation("cpu", 10 * F32, 1, "y"),
    )


def test_a_modules_plain_tensor_attribute_is_named_where_it_holds_memory() -> None:
    """``self.pe = pe`` (not a buffer): the storage alive at the start is ``model.pe``'s."""
    model = torch.nn.Linear(2, 2)
    model.pe = torch.zeros(1000)
    forecast = _dry_run("y = torch.zeros(10)\n", {"model": model})
    assert Allocation("cpu", 1000 * F32, None, "model.pe") in forecast.biggest


def test_a_tensor_of_the_start_that_the_cell_replaces_counts_until_it_dies() -> None:
    forecast = _dry_run("x = x * 2\n", {"x": torch.zeros(1000)})
    assert forecast.start == {"cpu": 1000 * F32}
    assert forecast.peak == {"cpu": 2 * 1000 * F32}
    assert forecast.left == {"cpu": 1000 * F32}
    assert forecast.biggest == (
        Allocation("cpu", 1000 * F32, None, None),
        Allocation("cpu", 1000 * F32, 1, "x"),
    )


def test_the_peak_of_a_cell_that_fails_counts_what_ran_before_the_failure() -> None:
    source = "a = torch.ones(1000)\nb = torch.ones(2000)\nraise ValueError('stop')\n"
    mode = FakeTensorMode()
    shadow = {"torch": torch}
    with pytest.raises(ValueError), mode, MemoryCounter("<failing>") as counter:
        exec(compile(source, "<failing>", "exec"), shadow)
    forecast = counter.forecast(shadow)
    assert forecast.peak == forecast.left == {"cpu": 3000 * F32}
    assert [(a.line, a.variable) for a in forecast.biggest] == [(2, "b"), (1, "a")]
    # and torch is left as it was: no mode on the stack, the foreach checks unchanged
    assert _get_current_dispatch_mode() is None
    assert FakeTensor not in optimizer_foreach_types
    assert FakeTensor not in utils_foreach_types


# -- attribution -------------------------------------------------------------------------------


def test_the_biggest_allocations_name_their_line_and_their_variable() -> None:
    forecast, _ = predicted(_cell("mlp_adamw_step"))
    by_variable = {a.variable: a for a in forecast.biggest}
    # TRAIN_STEP: line 4 is loss.backward(), line 5 opt.step(); model.2 is the 512x512 layer
    assert by_variable["model.2.weight.grad"].line == 4
    assert by_variable["opt.state[model.2.weight]['exp_avg']"].line == 5
    assert by_variable["opt.state[model.2.weight]['exp_avg_sq']"].line == 5
    assert by_variable["model.2.weight.grad"].nbytes == 512 * 512 * F32
    # what the step's update made and dropped again has a line but no variable
    assert any(a.variable is None and a.line == 5 for a in forecast.biggest)


def test_a_variable_inside_a_container_and_a_line_inside_a_function_of_the_cell() -> None:
    source = (
        "def make(n):\n    return torch.zeros(n)\nbatch = {'x': make(5000), 'y': [make(3000)]}\n"
    )
    forecast = _dry_run(source, {})
    assert forecast.biggest == (
        Allocation("cpu", 5000 * F32, 2, "batch['x']"),
        Allocation("cpu", 3000 * F32, 2, "batch['y'][0]"),
    )


def test_an_allocation_on_another_thread_takes_the_line_the_cell_waits_at() -> None:
    """Autograd runs a device's backward on its own thread (the dispatch mode goes with it):
    the line is where the cell's thread is, waiting in ``loss.backward()``."""
    counter = MemoryCounter("<threaded>")
    waiting = threading.Event()

    def allocate_elsewhere() -> None:
        waiting.wait(timeout=30)
        counter.saw_outputs([torch.zeros(250)])

    source = (
        "import threading\n"
        "worker = threading.Thread(target=allocate_elsewhere)\n"
        "worker.start()\n"
        "waiting.set(); worker.join()\n"
    )
    shadow = {"allocate_elsewhere": allocate_elsewhere, "waiting": waiting}
    with FakeTensorMode(), counter:
        exec(compile(source, "<threaded>", "exec"), shadow)
    (allocation,) = counter.forecast(shadow).biggest
    assert (allocation.nbytes, allocation.line) == (250 * F32, 4)


# -- devices -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("device", "nbytes", "blocks"),
    [
        ("cuda:0", 0, 0),
        ("cuda:0", 1, 512),
        ("cuda:0", 511, 512),
        ("cuda:0", 512, 512),
        ("cuda:0", 513, 1024),
        ("cuda", 4000, 4096),
        ("cuda:1", 2**20 + 1, 2**20 + 512),
        ("cpu", 513, 513),
        ("simdev:0", 1, 1),
        ("meta", 1000, 0),  # holds no memory
    ],
)
def test_cuda_storages_are_counted_in_512_byte_blocks_and_meta_ones_as_nothing(
    device: str, nbytes: int, blocks: int
) -> None:
    assert allocator_bytes(device, nbytes) == blocks


def test_the_counter_rounds_fake_cuda_storages_like_the_caching_allocator() -> None:
    with FakeTensorMode(), MemoryCounter("<cuda>") as counter:
        kept = torch.empty(3, device="cuda")
        dropped = torch.empty(1000, device="cuda")
        del dropped
    forecast = counter.forecast({"kept": kept})
    assert forecast.peak == {"cuda:0": 512 + 4096}
    assert forecast.left == {"cuda:0": 512}


def test_a_fake_optimizer_step_allocates_what_the_real_foreach_step_would() -> None:
    """On cuda a plain tensor's Adam takes the foreach path (one temporary per parameter, all
    alive at once); a fake tensor's type would send it down the per-parameter loop."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    mode = FakeTensorMode()
    with mode:
        params = [torch.nn.Parameter(torch.empty(1000, 1000, device="cuda")) for _ in range(4)]
        for param in params:
            param.grad = torch.empty_like(param)
        opt = torch.optim.Adam(params)
        with MemoryCounter("<step>") as counter:
            assert _default_to_fused_or_foreach(params, False) == (False, True)
            opt.step()
        assert _default_to_fused_or_foreach(params, False) == (False, False)
    forecast = counter.forecast({"params": params, "opt": opt})
    one = allocator_bytes("cuda:0", 1000 * 1000 * F32)
    assert forecast.start["cuda:0"] == 8 * one  # parameters and gradients
    assert forecast.left["cuda:0"] == 16 * one  # and exp_avg, exp_avg_sq
    assert forecast.growth("cuda:0") == 12 * one  # and the foreach sqrt of all four at once


@pytest.mark.simulated
def test_a_real_run_on_the_simulated_accelerator_is_counted_like_the_same_run_on_cpu(
    simulated_device: str,
) -> None:
    cell = _cell("mlp_sgd_momentum_step")
    on_device, _ = counted(cell, simulated_device)
    on_cpu, _ = counted(cell, "cpu")
    assert set(on_device.peak) == {simulated_device}
    assert on_device.peak[simulated_device] == on_cpu.peak["cpu"]
    assert on_device.left[simulated_device] == on_cpu.left["cpu"]


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("name", ["mlp_adamw_step", "mlp_inference_no_grad"])
def test_predicted_peak_is_within_ten_percent_of_cuda_max_memory_allocated(name: str) -> None:
    """Cells of matmuls and elementwise ops: a fused kernel's own scratch memory (the native
    attention of an inference transformer, cuDNN's convolution workspace) is seen by the
    allocator and by no dispatch-level counter."""
    cell = _cell(name)
    forecast, _ = predicted(cell, "cuda")
    # the first run creates cuBLAS's workspaces (one per thread that runs a matmul, the autograd
    # engine's included; kept by the caching allocator, outside the cell); its freed blocks go
    # back to the driver, so the measured run gets fresh segments and no cached block bigger
    # than it asked for (a large block is split only when over 1 MiB would remain)
    cell.run(cell.namespace("cuda"))
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    outside = torch.cuda.memory_allocated()
    namespace = cell.namespace("cuda")
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated() - outside
    torch.cuda.reset_peak_memory_stats()
    cell.run(namespace)
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated() - outside
    assert abs(forecast.start["cuda:0"] - start) <= 0.01 * start, (forecast.start, start)
    assert abs(forecast.peak["cuda:0"] - measured) <= 0.10 * measured, (forecast.peak, measured)


def test_a_tensor_built_from_python_data_is_an_allocation_of_its_line() -> None:
    forecast = _dry_run("x = 1\nt = torch.tensor([1.0, 2.0, 3.0])\n", {})
    assert forecast.start == {}
    assert forecast.biggest == (Allocation("cpu", 3 * F32, 2, "t"),)


@pytest.mark.simulated
def test_a_cell_that_moves_a_tensor_is_counted_on_both_devices(simulated_device: str) -> None:
    namespace = {"x": torch.zeros(1000), "DEV": simulated_device}
    source = "y = x.to(DEV)\nz = y * 2\ndel y\n"
    with MemoryCounter("<move>") as counter:
        exec(compile(source, "<move>", "exec"), namespace)
    forecast = counter.forecast(namespace)
    assert forecast.start == {"cpu": 1000 * F32}
    assert forecast.peak == {"cpu": 1000 * F32, simulated_device: 2 * 1000 * F32}
    assert forecast.left == {"cpu": 1000 * F32, simulated_device: 1000 * F32}
    assert forecast.biggest == (
        Allocation("cpu", 1000 * F32, None, "x"),
        Allocation(simulated_device, 1000 * F32, 1, None),
        Allocation(simulated_device, 1000 * F32, 2, "z"),
    )


@pytest.mark.simulated
def test_a_dry_run_of_moving_a_model_away_leaves_what_the_real_move_leaves(
    simulated_device: str,
) -> None:
    """``model.cpu()`` frees the model's storages on the accelerator: the dry run's copies
    must not keep them counted as left there. The storages it found on the accelerator are
    the biggest at that device's peak (its start), named by what held them."""
    import torchdevice_magic as tdm

    def namespace() -> dict[str, Any]:
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4))
        model.to(simulated_device)
        x = torch.ones(8, 64, device=simulated_device)
        model(x).sum().backward()
        return {"torch": torch, "model": model, "x": x}

    cell = "model.cpu()\nkept = x\n"  # x stays on the accelerator
    forecast = tdm.dry_run(cell, namespace()).memory
    assert forecast is not None
    real = namespace()
    with MemoryCounter("<cell>") as counter:
        exec(compile(cell, "<cell>", "exec"), real)
    measured = counter.forecast(real)
    assert forecast.left == measured.left == {"cpu": forecast.peak["cpu"], simulated_device: 2048}
    assert (forecast.start, forecast.peak) == (measured.start, measured.peak)
    found = [(a.device, a.nbytes, a.variable) for a in forecast.biggest if a.line is None]
    assert found[:2] == [
        (simulated_device, 16384, "model.0.weight"),
        (simulated_device, 16384, "model.0.weight.grad"),
    ]


def test_a_dry_run_of_a_dtype_change_peaks_where_the_real_one_does() -> None:
    """``model.half()`` frees each float32 parameter as its half copy is made: the real peak
    is the start plus the half copies, not twice the model."""
    import torchdevice_magic as tdm

    def namespace() -> dict[str, Any]:
        layers = [torch.nn.Linear(256, 256) for _ in range(8)]
        return {"torch": torch, "model": torch.nn.Sequential(*layers)}

    forecast = tdm.dry_run("model.half()\n", namespace()).memory
    assert forecast is not None
    real = namespace()
    with MemoryCounter("<cell>") as counter:
        exec(compile("model.half()\n", "<cell>", "exec"), real)
    measured = counter.forecast(real)
    assert forecast.left == measured.left and forecast.start == measured.start
    assert abs(forecast.peak["cpu"] - measured.peak["cpu"]) <= 0.01 * measured.peak["cpu"]
