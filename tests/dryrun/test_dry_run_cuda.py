"""dry_run() with ``cuda`` on a GPU: the predicted peak of a training step against the CUDA
caching allocator's own peak (``torch.cuda.max_memory_allocated``) of the real step, and a
device error predicted with the culprits the real run names. Skipped without CUDA; run by
``./dev gpu-check``."""

from __future__ import annotations

import gc

import pytest
import torch

from torchdevice_magic.diagnose import diagnose
from torchdevice_magic.dryrun import dry_run

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

STEP = "loss = torch.nn.functional.cross_entropy(model(x), y)\nloss.backward()\nopt.step()"


def namespace(optimizer: str) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1000)
    ).cuda()
    opt = (
        torch.optim.AdamW(model.parameters())
        if optimizer == "adamw"
        else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    )
    return {
        "torch": torch,
        "model": model,
        "opt": opt,
        "x": torch.randn(256, 1024, device="cuda"),
        "y": torch.randint(0, 1000, (256,), device="cuda"),
    }


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_the_predicted_peak_is_within_ten_percent_of_the_allocators_peak(optimizer):
    # cuBLAS and cuBLASLt take workspaces from the caching allocator at a thread's first matmul
    # and hold them with no tensor (aten/src/ATen/cuda/CublasHandlePool.cpp: handles are per
    # thread, workspaces per handle and stream). A step's matmuls run on two threads: this one
    # (the forward) and the autograd engine's device thread (the backward), whose workspace
    # (32 MiB on Hopper) would appear in the middle of the measured step. One step on a
    # throwaway copy makes them all before measuring: part of what the allocator holds at the
    # start, as the ten-cell accuracy test (tests/dryrun/test_memory.py) warms up too. The
    # throwaway step's freed blocks go back to the driver, so the measured step is served from
    # fresh segments as it would be without the warm-up.
    exec(STEP, namespace(optimizer))
    gc.collect()
    torch.cuda.empty_cache()
    ns = namespace(optimizer)
    torch.cuda.synchronize()
    report = dry_run(STEP, ns)
    assert report.completed and not report.device_error, report.text()
    held_by_no_tensor = torch.cuda.memory_allocated() - report.memory.start["cuda:0"]
    assert held_by_no_tensor >= 0
    torch.cuda.reset_peak_memory_stats()
    exec(STEP, ns)
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated()
    predicted = report.memory.peak["cuda:0"] + held_by_no_tensor
    assert abs(predicted - measured) <= 0.10 * measured, (predicted, measured)
    left = report.memory.left["cuda:0"] + held_by_no_tensor
    assert abs(left - torch.cuda.memory_allocated()) <= 0.10 * measured


def test_a_device_error_on_cuda_is_predicted_with_the_real_runs_culprits():
    ns = namespace("sgd")
    ns["x"] = ns["x"].cpu()
    report = dry_run(STEP, ns)
    assert report.device_error and report.error_line == 1
    try:
        exec(STEP, ns)
    except RuntimeError as error:
        real, real_message = diagnose(error, ns, STEP), str(error)
    else:
        pytest.fail("the real step raised no device error")
    assert real is not None
    assert [c.alias or c.name for c in report.diagnosis.culprits] == [
        c.alias or c.name for c in real.culprits
    ]
    # the real run's words: CUDA's generated check names the argument and its wrapper
    assert str(report.error) == real_message
    assert (report.diagnosis.operator, report.diagnosis.argument) == ("addmm", "mat1")


@pytest.mark.parametrize(
    "cell",
    ["out = emb(ids)", "out = torch.cat([a, b])", "out = a + b", "out = torch.mm(b[None], m)"],
)
def test_the_predicted_message_is_cudas_own(cell):
    def fresh() -> dict:
        return {
            "torch": torch,
            "emb": torch.nn.Embedding(10, 4).cuda(),
            "ids": torch.tensor([1, 2]),
            "a": torch.ones(3, device="cuda"),
            "b": torch.ones(3),
            "m": torch.ones(3, 2, device="cuda"),
        }

    report = dry_run(cell, fresh())
    try:
        exec(cell, fresh())
    except RuntimeError as error:
        real = error
    else:
        pytest.fail(f"{cell!r} raised no device error")
    assert report.device_error, report.text()
    assert str(report.error) == str(real)


def test_reseeding_in_a_dry_run_leaves_the_cuda_generator_as_it_was():
    torch.cuda.init()
    state = torch.cuda.get_rng_state()
    dry_run("torch.manual_seed(1)\nnoise = torch.randn(4, device='cuda')", {"torch": torch})
    assert torch.equal(torch.cuda.get_rng_state(), state)


def test_a_step_that_would_not_fit_is_refused_before_it_runs():
    ns = namespace("adamw")
    # free as the pre-check counts it (devices.free_bytes): the driver's free memory and what
    # the caching allocator holds unused, which the tests before this one leave behind (their
    # freed steps: far more than the 4 MiB this cell asks for beyond the driver's figure)
    driver_free, _total = torch.cuda.mem_get_info()
    free = driver_free + max(torch.cuda.memory_reserved() - torch.cuda.memory_allocated(), 0)
    elements = free // 4 + 2**20  # float32: 4 MiB more than is free
    report = dry_run(f"big = torch.empty({elements}, device='cuda')", ns)
    (fit,) = report.refused
    assert fit.device == "cuda:0" and fit.need >= elements * 4 > fit.free
    assert "big" not in ns
