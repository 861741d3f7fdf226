"""Does the simulated accelerator compute what the CPU computes? PyTorch's operator database,
on both.

    .venv/bin/python benchmarks/simdev_opdb.py [--samples 3] [--backward] [--verbose]

Every ``OpInfo`` of ``op_db`` that supports float32 on the CPU: its first ``--samples`` sample
inputs run on the cpu, then again with every tensor moved to ``simdev:0``. Counted per sample:

- ``same``: every output (``--backward``: every input's gradient of a weighted sum of the float
  outputs) has the CPU's shape and values (``allclose``, rtol/atol 1e-3);
- ``shape``: a tensor whose shape differs (the wrapper and its values disagree);
- ``value``: same shape, other values (``empty``-like operators' values are never compared:
  they are whatever memory held);
- ``guard``: the simulated accelerator refused a shape change in place (one line; CUDA does it);
- ``error``: any other error on simdev where the CPU ran (ops it has no kernel for: sparse
  layouts; a sample that puts an argument CUDA wants on the cpu on the device).

Samples the CPU itself rejects are not counted. Random operators are seeded the same on both.
The simulated accelerator must behave as CUDA does (DESIGN.md "Testing without a GPU"); this is
the broad check, ``tests/testing/`` the precise ones.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

from torchdevice_magic.testing import simulated_accelerator

GUARD_WORDS = "cannot change a tensor's shape in place"
#: operators whose values are whatever memory held (compared by shape only)
UNINITIALISED = frozenset(
    ("empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided")
)


def _call(op: Any, sample: Any, device: str) -> tuple[Any, list[torch.Tensor]]:
    """``op`` on the sample's arguments moved to ``device`` (those that require grad still do),
    seeded: its result, and those inputs."""
    inputs: list[torch.Tensor] = []

    def there(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        moved = value.detach().to(device)
        if value.requires_grad:
            moved.requires_grad_()
            inputs.append(moved)
        return moved

    args = tree_map(there, (sample.input, *sample.args))
    kwargs = tree_map(there, sample.kwargs)
    torch.manual_seed(0)
    return op(*args, **kwargs), inputs


def _outputs(op: Any, sample: Any, device: str) -> list[torch.Tensor]:
    result, _ = _call(op, sample, device)
    return [t.cpu() for t in tree_leaves(result) if isinstance(t, torch.Tensor)]


def _gradients(op: Any, sample: Any, device: str) -> list[torch.Tensor] | None:
    result, inputs = _call(op, sample, device)
    outputs = [
        t
        for t in tree_leaves(result)
        if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()
    ]
    if not outputs or not inputs:
        return None
    # weights that differ by position, so a transposed gradient is not the same sum
    total = sum(
        (t.float() * (torch.arange(t.numel(), device=t.device).reshape(t.shape) % 7 + 1)).sum()
        for t in outputs
    )
    grads = torch.autograd.grad(total, inputs, allow_unused=True)
    return [g.cpu() if g is not None else torch.zeros(0) for g in grads]


def compare(expected: list[torch.Tensor], got: list[torch.Tensor], values: bool = True) -> str:
    for a, b in zip(expected, got, strict=False):
        if a.shape != b.shape:
            return f"shape: {tuple(a.shape)} on the cpu, {tuple(b.shape)} on simdev"
        if not values:
            continue
        if a.is_floating_point() or a.is_complex():
            if not torch.allclose(a, b, rtol=1e-3, atol=1e-3, equal_nan=True):
                return f"value: max difference {(a - b).abs().max().item():.3g}"
        elif not torch.equal(a, b):
            return "value: differs"
    return "same" if len(expected) == len(got) else "shape: another number of outputs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--backward", action="store_true", help="compare gradients")
    parser.add_argument("--verbose", action="store_true", help="name every op that differs")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    device = f"{simulated_accelerator()}:0"
    from torch.testing._internal.common_methods_invocations import op_db

    run = _gradients if args.backward else _outputs
    counts: collections.Counter[str] = collections.Counter()
    found: dict[str, list[str]] = collections.defaultdict(list)
    start = time.perf_counter()
    for op in op_db:
        if torch.float32 not in op.supported_dtypes("cpu"):
            continue
        if args.backward and not op.supports_autograd:
            continue
        try:
            samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=args.backward))
        except Exception:
            continue
        for sample in samples[: args.samples]:
            try:
                expected = run(op, sample, "cpu")
            except Exception:
                continue
            if expected is None:
                continue
            try:
                got = run(op, sample, device)
            except Exception as error:
                text = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
                kind = "guard" if GUARD_WORDS in text else "error"
            else:
                text = compare(expected, got or [], values=op.name not in UNINITIALISED)
                kind = text.partition(":")[0]
            counts[kind] += 1
            if kind != "same":
                label = f"{op.name} {op.variant_test_name}".strip()
                found[kind].append(f"{label}: {text}")
    took = time.perf_counter() - start
    total = sum(counts.values())
    what = "gradients" if args.backward else "outputs"
    print(f"torch {torch.__version__}; {total} samples of op_db, {what}, {took:.0f} s")
    print(
        "  ".join(f"{kind} {counts[kind]}" for kind in ("same", "shape", "value", "guard", "error"))
    )
    for kind in ("shape", "value", "guard", "error"):
        names = sorted(set(found[kind]))
        if names and (args.verbose or kind != "error"):
            print(f"{kind}:")
            for name in names:
                print(f"    {name}")
    sys.exit(0)


if __name__ == "__main__":
    main()
