"""The namespace the issue's benchmarks measure, and the floor loop they are compared to."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import torch


def build_namespace() -> dict[str, Any]:
    """2,000 tensors of 64x64 float32, a 24-layer TransformerEncoder (d_model 256, 8 heads,
    feedforward 512) with Adam after one step, a dict batch of two tensors, a list of 100
    tensors and 200 ints."""
    torch.manual_seed(0)
    namespace: dict[str, Any] = {f"t{i}": torch.randn(64, 64) for i in range(2000)}
    layer = torch.nn.TransformerEncoderLayer(
        d_model=256, nhead=8, dim_feedforward=512, batch_first=True
    )
    model = torch.nn.TransformerEncoder(layer, num_layers=24, enable_nested_tensor=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(2, 8, 256)).sum().backward()
    optimizer.step()
    namespace.update(
        model=model,
        optimizer=optimizer,
        batch={"x": torch.randn(32, 256), "y": torch.randint(0, 10, (32,))},
        tensors=[torch.randn(16, 16) for _ in range(100)],
    )
    namespace.update({f"n{i}": i for i in range(200)})
    return namespace


def floor_scan(namespace: dict[str, Any]) -> set[tuple[int, int]]:
    """The floor: visit each value; for each tensor (also inside a top-level list/dict) or
    module parameter/buffer, read untyped_storage() data_ptr() and nbytes() into a set."""
    seen: set[tuple[int, int]] = set()
    add = seen.add
    tensor_type = torch.Tensor
    module_type = torch.nn.Module
    for value in namespace.values():
        if isinstance(value, tensor_type):
            storage = value.untyped_storage()
            add((storage.data_ptr(), storage.nbytes()))
        elif isinstance(value, module_type):
            for tensor in value.parameters():
                storage = tensor.untyped_storage()
                add((storage.data_ptr(), storage.nbytes()))
            for tensor in value.buffers():
                storage = tensor.untyped_storage()
                add((storage.data_ptr(), storage.nbytes()))
        elif isinstance(value, (list, tuple, dict)):
            for item in value.values() if isinstance(value, dict) else value:
                if isinstance(item, tensor_type):
                    storage = item.untyped_storage()
                    add((storage.data_ptr(), storage.nbytes()))
    return seen


def floor_facts(namespace: dict[str, Any], top_level_grads: bool = True) -> list[tuple]:
    """The fair floor of a scan (issue 11): visit each value; for each tensor -- top-level,
    inside a top-level list/tuple/dict, module parameters and buffers, their gradients,
    optimizer state -- read its storage's ``data_ptr()`` and ``nbytes()``, its ``device``,
    ``dtype`` and ``shape`` once: the facts the table needs.

    ``top_level_grads``: also look for the gradient of each top-level tensor (``requires_grad``,
    then ``.grad``), as for parameters; the table shows both and the scan must read them. The
    issue's sentence names gradients of parameters only: ``False`` is that literal floor."""
    facts: list[tuple] = []
    add = facts.append
    tensor_type = torch.Tensor
    module_type = torch.nn.Module
    optimizer_type = torch.optim.Optimizer

    def read(tensor: Any) -> None:
        storage = tensor.untyped_storage()
        add((storage.data_ptr(), storage.nbytes(), tensor.device, tensor.dtype, tensor.shape))

    for value in namespace.values():
        if isinstance(value, tensor_type):
            read(value)
            if top_level_grads and value.requires_grad and value.is_leaf and value.grad is not None:
                read(value.grad)
        elif isinstance(value, module_type):
            for tensor in value.parameters():
                read(tensor)
                if tensor.grad is not None:
                    read(tensor.grad)
            for tensor in value.buffers():
                read(tensor)
        elif isinstance(value, optimizer_type):
            for state in value.state.values():
                for item in state.values():
                    if isinstance(item, tensor_type):
                        read(item)
        elif isinstance(value, (list, tuple, dict)):
            for item in value.values() if isinstance(value, dict) else value:
                if isinstance(item, tensor_type):
                    read(item)
    return facts


def median_seconds(function: Callable[[], object], repeats: int = 31, warmup: int = 3) -> float:
    """Median wall time of ``function``. Like ``timeit``, the cyclic garbage collector is off
    while timing: a full collection over the ~300k objects torch and IPython hold lands at
    random inside some samples and would measure the collector, not the code (the floor and
    the code under test are measured the same way)."""
    for _ in range(warmup):
        function()
    samples = []
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            function()
            samples.append(time.perf_counter() - start)
    finally:
        if was_enabled:
            gc.enable()
    samples.sort()
    return samples[len(samples) // 2]


def median_ratio(
    function: Callable[[], object],
    baseline: Callable[[], object],
    rounds: int = 31,
    before_each: Callable[[], object] | None = None,
) -> tuple[float, float, float]:
    """Interleave ``baseline`` and ``function`` (garbage collector off, as in
    :func:`median_seconds`) and return (median of the per-round ratios, median function time,
    median baseline time). Interleaving cancels the slow drifts of a shared virtual machine,
    which move both figures together. The order alternates from round to round (baseline
    first, then function first), so that neither one always finds the caches the other
    just filled."""
    ratios, times, floors = ratio_rounds(function, baseline, rounds, before_each)
    middle = rounds // 2
    return ratios[middle], times[middle], floors[middle]


def ratio_rounds(
    function: Callable[[], object],
    baseline: Callable[[], object],
    rounds: int = 31,
    before_each: Callable[[], object] | None = None,
) -> tuple[list[float], list[float], list[float]]:
    """The rounds of :func:`median_ratio`, each list sorted: (per-round ratios, function
    times, baseline times) -- for the spread (quartiles) as well as the median."""
    for _ in range(3):
        if before_each:
            before_each()
        function()
        baseline()
    ratios, times, floors = [], [], []
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for round_ in range(rounds):
            if round_ % 2:
                if before_each:
                    before_each()
                start = time.perf_counter()
                function()
                took = time.perf_counter() - start
            start = time.perf_counter()
            baseline()
            floor = time.perf_counter() - start
            if not round_ % 2:
                if before_each:
                    before_each()
                start = time.perf_counter()
                function()
                took = time.perf_counter() - start
            ratios.append(took / floor)
            times.append(took)
            floors.append(floor)
    finally:
        if was_enabled:
            gc.enable()
    return sorted(ratios), sorted(times), sorted(floors)
