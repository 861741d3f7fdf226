"""Issue figure: what the always-on meta-call check costs per module call (target < 1 µs).

``MetaCallCheck`` is a global forward pre-hook (``register_module_forward_pre_hook``). Any
global hook sends every module call down ``Module._call_impl``'s slow path, so three cases are
timed on the same modules, interleaved, in one run (the best of several rounds each):

  baseline        no global hook
  empty hook      a global pre-hook that does nothing (torch's own price for any hook)
  armed check     MetaCallCheck.hook (modules without meta tensors: the common call)

on an identity module (the call overhead alone) and on a 4-layer MLP of ``nn.Linear(64, 64)``
called on one row (5 module calls per forward). It prints the extra microseconds per module
call of each, and the check's own share (armed - empty). The controller arms the check only
while the namespace holds a module with meta tensors, so a session without one pays nothing;
the cost of deciding after a cell (``arm_for`` over the inventory's module records) is printed
per cell for namespaces of 1,000 and 100,000 tensors, and the cost of ``%%devicecheck``'s
``MetaMixGuard`` (a dispatch mode) as guarded / unguarded ratios on small ops and on matmuls,
and what the registration hooks of ``MetaCallCheck.watch`` add to building a module.
Times are the thread's CPU time (``time.thread_time``): on a shared machine the time the
process waits for a core is not counted.

    python benchmarks/meta_calls.py [--rounds 9] [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _per_call(module: Any, x: Any, calls: int, module_calls: int) -> float:
    start = time.thread_time()
    for _ in range(calls):
        module(x)
    return (time.thread_time() - start) / calls / module_calls * 1e6


def _measure(module: Any, x: Any, module_calls: int, rounds: int, calls: int) -> dict[str, float]:
    import torch

    from torchdevice_magic.trace import MetaCallCheck

    register = torch.nn.modules.module.register_module_forward_pre_hook
    check = MetaCallCheck()
    samples: dict[str, list[float]] = {"baseline": [], "empty hook": [], "armed check": []}
    for _ in range(rounds):
        samples["baseline"].append(_per_call(module, x, calls, module_calls))
        handle = register(lambda mod, args: None)
        samples["empty hook"].append(_per_call(module, x, calls, module_calls))
        handle.remove()
        check.arm()
        samples["armed check"].append(_per_call(module, x, calls, module_calls))
        check.disarm()
    assert check.take({}) == []  # nothing on meta: nothing caught
    return {name: min(values) for name, values in samples.items()}


def _arm_for_cost(names: int, rounds: int) -> float:
    """Deciding after a cell, on a namespace of ``names`` tensors and one module: reading the
    inventory's module records and arming (or not), per cell, in microseconds."""
    import torch

    from torchdevice_magic import scan
    from torchdevice_magic.trace import MetaCallCheck

    namespace: dict[str, Any] = {f"t{i}": torch.zeros(2) for i in range(names)}
    namespace["model"] = torch.nn.Linear(8, 8)
    inventory = scan(namespace)
    inventory.meta_module_records()  # built once, as the post-cell hook's other checks do
    check = MetaCallCheck()
    samples = []
    for _ in range(rounds):
        start = time.thread_time()
        check.arm_for(inventory.meta_module_records())
        samples.append((time.thread_time() - start) * 1e6)
    return statistics.median(samples)


def _guard_ratio(rounds: int) -> tuple[float, float]:
    """``%%devicecheck``'s MetaMixGuard: 1,000 small ops, and 20 512x512 matmuls, guarded /
    unguarded (median of per-round ratios)."""
    import torch

    from torchdevice_magic.trace import MetaMixGuard

    small, big = torch.randn(8), torch.randn(512, 512)

    def small_ops() -> None:
        for _ in range(1000):
            small.add(1.0)

    def matmuls() -> None:
        for _ in range(20):
            big @ big

    ratios: dict[str, list[float]] = {"small": [], "matmul": []}
    for _ in range(rounds):
        for label, work in (("small", small_ops), ("matmul", matmuls)):
            start = time.thread_time()
            work()
            plain = time.thread_time() - start
            with MetaMixGuard({}):
                start = time.thread_time()
                work()
                guarded = time.thread_time() - start
            ratios[label].append(guarded / plain)
    return statistics.median(ratios["small"]), statistics.median(ratios["matmul"])


def _watch_cost(rounds: int) -> tuple[float, float]:
    """Building a ``Linear(64, 64)`` (two tensors registered) without and with the registration
    hooks of ``MetaCallCheck.watch``, microseconds (medians)."""
    import torch

    from torchdevice_magic.trace import MetaCallCheck

    def build() -> float:
        start = time.thread_time()
        for _ in range(300):
            torch.nn.Linear(64, 64)
        return (time.thread_time() - start) / 300 * 1e6

    check = MetaCallCheck()
    plain, watched = [], []
    for _ in range(rounds):
        plain.append(build())
        check.watch()
        watched.append(build())
        check.stop()
    return statistics.median(plain), statistics.median(watched)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    import torch

    class Identity(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x

    mlp = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(4)))
    cases = [
        ("identity module", Identity(), torch.randn(1, 64), 1),
        ("MLP, 4 x Linear(64, 64)", mlp, torch.randn(1, 64), 5),
    ]
    torch.set_num_threads(1)
    with torch.no_grad():
        for label, module, x, module_calls in cases:
            best = _measure(module, x, module_calls, args.rounds, args.calls)
            base = best["baseline"]
            print(f"{label}: {module_calls} module call(s) per forward, best of {args.rounds}")
            for name, value in best.items():
                extra = value - base
                print(
                    f"  {name:<12} {value:7.3f} µs per module call  (+{extra:.3f} µs, x{value / base:.2f})"
                )
            own = best["armed check"] - best["empty hook"]
            print(f"  the check's own share (armed - empty hook): {own:+.3f} µs per module call")
    small, matmul = _guard_ratio(args.rounds)
    print(
        f"%%devicecheck's meta-mix guard: 1,000 small ops x{small:.2f}, 512x512 matmuls x{matmul:.2f}"
    )
    plain, watched = _watch_cost(args.rounds)
    print(f"building a Linear(64, 64): {plain:.1f} µs, watched for meta tensors {watched:.1f} µs")
    for names in (1000, 100000):
        per_cell = _arm_for_cost(names, args.rounds)
        print(f"deciding whether to arm, {names} tensors + 1 module: {per_cell:.1f} µs per cell")


if __name__ == "__main__":
    main()
