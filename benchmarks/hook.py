"""Issue figure: the post-execute hook's cost.

1. After a cell that rebinds 10 names, on the namespace of benchmarks/scan.py, as a ratio to
   that script's floor loop measured in the same run (target <= 0.2). Two cells:
   - `t0 = torch.randn(64, 64)` ... (the cell mentions only data: the hook knows no module or
     optimizer can have changed and skips their signature checks);
   - the same plus a call of a user function `log()` (could reach anything: the hook re-checks
     every module's and optimizer's signature).
2. When torch is not imported (a fresh interpreter that never imports it): absolute time per
   call (target <= 20 us).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent

NO_TORCH = textwrap.dedent(
    """
    import sys, time
    from types import SimpleNamespace
    from IPython.testing.globalipapp import start_ipython
    from torchdevice_magic.shell import load
    ip = start_ipython()
    session = load(ip)
    result = SimpleNamespace(info=SimpleNamespace(raw_cell="a = 1"), error_in_exec=None)
    assert "torch" not in sys.modules
    for _ in range(1000):
        session.post_run_cell(result)
    samples = []
    for _ in range(21):
        start = time.perf_counter()
        for _ in range(10000):
            session.post_run_cell(result)
        samples.append((time.perf_counter() - start) / 10000)
    samples.sort()
    assert "torch" not in sys.modules
    print(samples[len(samples) // 2] * 1e6)
    """
)


def hook_with_torch(rounds: int = 31) -> tuple[tuple, tuple]:
    import torch
    from IPython.testing.globalipapp import start_ipython

    sys.path.insert(0, str(HERE))
    from _namespace import build_namespace, floor_scan, median_ratio

    from torchdevice_magic.shell import load

    ip = start_ipython()
    session = load(ip)
    namespace = build_namespace()
    ip.user_ns.update(namespace)
    session.app.full_scan()
    ip.user_ns["log"] = lambda: None
    replacements = [[torch.randn(64, 64) for _ in range(10)] for _ in range(2)]
    turn = [0]

    def rebind_ten() -> None:  # what the cell did; not timed
        turn[0] += 1
        for i, tensor in enumerate(replacements[turn[0] % 2]):
            ip.user_ns[f"t{i}"] = tensor

    def hook_after(cell: str):
        result = SimpleNamespace(info=SimpleNamespace(raw_cell=cell), error_in_exec=None)
        return lambda: session.post_run_cell(result)

    data_cell = "\n".join(f"t{i} = torch.randn(64, 64)" for i in range(10))
    floor = lambda: floor_scan(namespace)  # noqa: E731
    data_only = median_ratio(hook_after(data_cell), floor, rounds, before_each=rebind_ten)
    full_check = median_ratio(
        hook_after(data_cell + "\nlog()"), floor, rounds, before_each=rebind_ten
    )
    return data_only, full_check


def hook_without_torch() -> float:
    output = subprocess.run(
        [sys.executable, "-c", NO_TORCH], capture_output=True, text=True, check=True
    ).stdout
    return float(output.strip().splitlines()[-1])


def main() -> None:
    no_torch_us = hook_without_torch()
    (ratio, hook, floor), (full_ratio, full, _) = hook_with_torch()
    print(f"floor loop (scan.py namespace): {floor * 1e3:8.3f} ms (median; ratios are medians")
    print("                                of per-round ratios, floor and hook interleaved)")
    print(
        f"hook_ratio:            {ratio:8.3f}  "
        f"(hook after a cell rebinding 10 names {hook * 1e3:.3f} ms; target <= 0.2)"
    )
    print(
        f"hook_ratio_full_check: {full_ratio:8.3f}  "
        f"(same cell plus a user function call, every module/optimizer re-checked "
        f"{full * 1e3:.3f} ms)"
    )
    print(f"hook_without_torch_us: {no_torch_us:8.3f}  (per call; target <= 20 us)")


if __name__ == "__main__":
    main()
