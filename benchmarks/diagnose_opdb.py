"""Issue figure: how well the automatic diagnosis does on PyTorch's own operator database.

Every ``OpInfo`` of ``torch.testing._internal.common_methods_invocations.op_db`` (and every
``ModuleInfo`` of ``common_modules.module_db``) is run as a notebook cell would run it, with its
tensors bound to names (``op(t0, t1, dim=a2)``), after putting tensors on two devices:

  cpu+meta one        one tensor moved to meta, the rest on cpu
  cpu+meta all-but-one every tensor on meta but one
  out=                the op's out= tensor on meta, the inputs on cpu
  fake cuda           under FakeTensorMode, one tensor on a fake cuda:0 (no CUDA needed)
  simulated           one tensor on the simulated accelerator (torchdevice_magic.testing)
  modules             module_db: the module on meta, input on cpu; and one input on meta

A case counts only if the same sample runs without error with every tensor on one device and
with every tensor on the other (meta; fake cuda; the simulated device): ops with no meta kernel,
paths this CPU build cannot fake on cuda, and ops the simulated device lacks are "skipped". Per group it prints
  recall            device errors diagnosed / device errors raised
  culprit accuracy  diagnoses naming the moved variable with its device / diagnoses
  no error          mixes that returned without raising (matmul, conv2d, ... on cpu+meta
                    give garbage instead: listed apart so nobody mistakes them for covered)
and, over every ``OpInfo.error_inputs`` (real errors, almost all not about devices), the false
positives: diagnoses of errors whose expected message says nothing about devices.

Items run in worker processes with a time limit per op, so a hanging or crashing op costs one op.
Timing: the time spent inside diagnose() is printed as a ratio to the time the failing calls
themselves took, both measured on the same items in the same run.

    python benchmarks/diagnose_opdb.py [--workers 2] [--limit N] [--timeout 30]

Needs ``expecttest`` (torch's testing helpers import it): ``pip install expecttest``.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import queue
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GROUPS = ("one", "all_but_one", "out", "fake_cuda", "simulated", "modules")
_DEVICE_WORDS = re.compile(r"device|cpu|cuda|meta|same GPU", re.IGNORECASE)


# --------------------------------------------------------------------------------------------
# In the worker
# --------------------------------------------------------------------------------------------


class Case:
    """One call with its tensors bound to names: ``op(t0, t1, dim=a2)``."""

    def __init__(self, fn: Any, sample: Any, torch: Any) -> None:
        self.fn = fn
        self.values: dict[str, Any] = {}
        self.tensors: list[str] = []
        parts = []
        parts.append(self._bind(sample.input, torch))
        for arg in sample.args:
            parts.append(self._bind(arg, torch))
        for key, value in sample.kwargs.items():
            parts.append(f"{key}={self._bind(value, torch)}")
        self.call = f"op({', '.join(parts)})"

    def _bind(self, value: Any, torch: Any) -> str:
        if isinstance(value, torch.Tensor):
            name = f"t{len(self.values)}"
            self.values[name] = value
            self.tensors.append(name)
            return name
        if (
            isinstance(value, (list, tuple))
            and value
            and all(isinstance(v, torch.Tensor) for v in value)
        ):
            inner = ", ".join(self._bind(v, torch) for v in value)
            return f"[{inner}]" if isinstance(value, list) else f"({inner},)"
        name = f"a{len(self.values)}"
        self.values[name] = value
        return name

    def namespace(self, moved: dict[str, Any]) -> dict[str, Any]:
        ns = {"op": self.fn, **self.values}
        ns.update(moved)
        return ns


_CELL = [0]


def run_cell(cell: str, ns: dict[str, Any]) -> BaseException | None:
    _CELL[0] += 1
    code = compile(cell, f"<ipython-input-{_CELL[0]}-bench>", "exec")
    try:
        exec(code, ns)
    except Exception as error:
        return error
    return None


def _judge(
    group: str, op: str, cell: str, ns: dict[str, Any], culprit: str, device: str, diagnose: Any
) -> dict[str, Any]:
    started = time.perf_counter()
    error = run_cell(cell, ns)
    ran = time.perf_counter() - started
    if error is None:
        return {"group": group, "op": op, "kind": "no_error"}
    started = time.perf_counter()
    d = diagnose(error, ns, cell)
    spent = time.perf_counter() - started
    out: dict[str, Any] = {
        "group": group,
        "op": op,
        "kind": "error",
        "seconds": spent,
        "op_seconds": ran,
    }
    out["diagnosed"] = d is not None
    if d is None:
        out["message"] = str(error)[:300]
        out["etype"] = type(error).__name__
        return out
    out["culprit"] = any(
        c.name == culprit and any(dv == device or dv.split(":")[0] == device for dv in c.devices)
        for c in d.culprits
    )
    if not out["culprit"]:
        out["culprits"] = [(c.name, c.devices) for c in d.culprits][:6]
        out["message"] = str(error)[:200]
    return out


def pick_samples(op: Any, torch: Any, limit: int) -> list[Any]:
    dtype = torch.float32
    try:
        if dtype not in op.supported_dtypes("cpu"):
            dtype = sorted(op.supported_dtypes("cpu"), key=str)[0]
    except Exception:
        pass
    samples = []
    try:
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            samples.append(sample)
            if len(samples) >= 12:
                break
    except Exception:
        return []
    # prefer samples with at least two tensors (one can then be moved against the rest)
    samples.sort(key=lambda s: -min(2, len(Case(op.op, s, torch).tensors)))
    return samples[:limit]


def _op_items(op: Any, groups: set[str], sim: str | None, diagnose: Any) -> list[dict[str, Any]]:
    import torch

    results: list[dict[str, Any]] = []
    for sample in pick_samples(op, torch, 1):
        case = Case(op.op, sample, torch)
        if not case.tensors:
            continue
        if run_cell(f"_r = {case.call}", case.namespace({})) is not None:
            continue  # the sample does not run even on one device
        for group in ("one", "all_but_one", "out", "fake_cuda", "simulated"):
            if group in groups:
                try:
                    results += _GROUP_RUNNERS[group](op, case, sim, diagnose)
                except Exception as error:  # the harness could not set the case up
                    results.append(
                        {"group": group, "op": op.name, "kind": "skip", "why": repr(error)[:200]}
                    )
    return results


def all_on(case: Case, device: str) -> dict[str, Any]:
    return {n: case.values[n].to(device) for n in case.tensors}


def meta_runs(case: Case) -> bool:
    """The op runs with every tensor on meta: a mixed failure is then about the mix (ops with
    no meta kernel fail on meta alone and are not device-mismatch cases)."""
    return run_cell(f"_r = {case.call}", case.namespace(all_on(case, "meta"))) is None


def _group_one(op: Any, case: Case, sim: Any, diagnose: Any) -> list[dict[str, Any]]:
    if not meta_runs(case):
        return [{"group": "one", "op": op.name, "kind": "no_meta_kernel"}]
    out = []
    for name in case.tensors[:3]:
        moved = {name: case.values[name].to("meta")}
        out.append(_judge("one", op.name, case.call, case.namespace(moved), name, "meta", diagnose))
    return out


def _group_all_but_one(op: Any, case: Case, sim: Any, diagnose: Any) -> list[dict[str, Any]]:
    if len(case.tensors) < 2:
        return []
    if not meta_runs(case):
        return [{"group": "all_but_one", "op": op.name, "kind": "no_meta_kernel"}]
    out = []
    for keep in case.tensors[:2]:
        moved = {n: case.values[n].to("meta") for n in case.tensors if n != keep}
        ns = case.namespace(moved)
        out.append(_judge("all_but_one", op.name, case.call, ns, keep, "cpu", diagnose))
    return out


def _group_out(op: Any, case: Case, sim: Any, diagnose: Any) -> list[dict[str, Any]]:
    import torch

    if not op.supports_out:
        return []
    ns = case.namespace({})
    run_cell(f"_r = {case.call}", ns)
    result = ns.get("_r")
    if not isinstance(result, torch.Tensor):
        return []
    ns = case.namespace({"out": torch.empty_like(result, device="meta")})
    cell = case.call[:-1] + (", out=out)" if case.call[-2] != "(" else "out=out)")
    return [_judge("out", op.name, cell, ns, "out", "meta", diagnose)]


def _group_fake_cuda(op: Any, case: Case, sim: Any, diagnose: Any) -> list[dict[str, Any]]:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    name = case.tensors[min(2, len(case.tensors) - 1)]
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fakes = {n: mode.from_tensor(case.values[n]) for n in case.tensors}
        all_cuda = {n: torch.empty_like(f, device="cuda") for n, f in fakes.items()}
        if run_cell(f"_r = {case.call}", case.namespace(all_cuda)) is not None:
            # this CPU build cannot fake the op on cuda alone (CUDA-only paths,
            # data-dependent outputs): not a mixed-device case
            return [{"group": "fake_cuda", "op": op.name, "kind": "no_fake_cuda"}]
        fakes[name] = all_cuda[name]
        ns = case.namespace(fakes)
        return [_judge("fake_cuda", op.name, case.call, ns, name, "cuda", diagnose)]


def _group_simulated(op: Any, case: Case, sim: Any, diagnose: Any) -> list[dict[str, Any]]:
    if sim is None:
        return []
    if run_cell(f"_r = {case.call}", case.namespace(all_on(case, sim))) is not None:
        return [{"group": "simulated", "op": op.name, "kind": "no_sim_kernel"}]
    name = case.tensors[min(2, len(case.tensors) - 1)]
    moved = {name: case.values[name].to(sim)}
    ns = case.namespace(moved)
    return [_judge("simulated", op.name, case.call, ns, name, sim.split(":")[0], diagnose)]


_GROUP_RUNNERS = {
    "one": _group_one,
    "all_but_one": _group_all_but_one,
    "out": _group_out,
    "fake_cuda": _group_fake_cuda,
    "simulated": _group_simulated,
}


def _error_input_items(op: Any, diagnose: Any) -> list[dict[str, Any]]:
    """False positives: real errors from OpInfo.error_inputs."""
    import torch

    out = []
    if op.error_inputs_func is None:
        return out
    try:
        inputs = list(op.error_inputs("cpu"))[:20]
    except Exception:
        return out
    for item in inputs:
        sample = item.sample_input
        case = Case(op.op, sample, torch)
        ns = case.namespace({})
        error = run_cell(case.call, ns)
        if error is None:
            continue
        regex = getattr(item, "error_regex", "") or ""
        about_devices = bool(_DEVICE_WORDS.search(regex)) or bool(
            _DEVICE_WORDS.search(str(error)) and "device" in str(error).lower()
        )
        d = diagnose(error, ns, case.call)
        out.append(
            {
                "group": "error_inputs",
                "op": op.name,
                "kind": "error_input",
                "device_error": about_devices,
                "diagnosed": d is not None,
                "message": str(error)[:200],
            }
        )
    return out


def _module_items(info: Any, diagnose: Any) -> list[dict[str, Any]]:
    import torch

    out = []
    try:
        inputs = info.module_inputs_func(
            info, device="cpu", dtype=torch.float32, requires_grad=False, training=False
        )
    except Exception:
        return out
    for module_input in inputs[:1]:
        try:
            ctor = module_input.constructor_input
            module = info.module_cls(*ctor.args, **ctor.kwargs)
        except Exception:
            continue
        fwd = module_input.forward_input
        sample = type("S", (), {"input": fwd.args[0] if fwd.args else None})()
        sample.args = tuple(fwd.args[1:])
        sample.kwargs = dict(fwd.kwargs)
        if sample.input is None:
            continue
        case = Case(module, sample, torch)
        if not case.tensors:
            continue
        base = case.namespace({})
        base["m"] = module
        cell = case.call.replace("op(", "m(", 1)
        if run_cell(f"_r = {cell}", base) is not None:
            continue
        has_params = any(True for _ in torch.nn.Module.parameters(module)) or any(
            True for _ in torch.nn.Module.buffers(module)
        )
        if has_params:
            import copy

            ns = case.namespace({})
            ns["m"] = copy.deepcopy(module).to("meta")
            out.append(_judge("modules", info.name, cell, ns, "m", "meta", diagnose))
        name = case.tensors[0]
        ns = case.namespace({name: case.values[name].to("meta")})
        ns["m"] = module
        out.append(_judge("modules", info.name, cell, ns, name, "meta", diagnose))
    return out


def _worker(tasks: list[tuple[str, int]], groups: list[str], channel: Any, timed: bool) -> None:
    import warnings

    warnings.simplefilter("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_modules import module_db

    from torchdevice_magic.diagnose import diagnose
    from torchdevice_magic.testing import simulated_accelerator

    torch.set_num_threads(1)
    sim = f"{simulated_accelerator()}:0" if "simulated" in groups else None
    wanted = set(groups)

    def nothing(error: BaseException, ns: Any, cell: str) -> Any:
        return None  # the baseline: the same items, not diagnosed

    diag = nothing if timed else diagnose
    for kind, index in tasks:
        channel.put(("start", kind, index))
        started = time.perf_counter()
        try:
            if kind == "op":
                op = op_db[index]
                results = _op_items(op, wanted, sim, diag)
                if "error_inputs" in wanted:
                    results += _error_input_items(op, diag)
            else:
                results = _module_items(module_db[index], diag)
        except Exception:
            results = [{"kind": "crash", "op": f"{kind} {index}", "trace": traceback.format_exc()}]
        channel.put(("done", kind, index, results, time.perf_counter() - started))
    channel.put(("exit",))


# --------------------------------------------------------------------------------------------
# The parent: workers with a time limit per op
# --------------------------------------------------------------------------------------------


def _run_all(
    tasks: list[tuple[str, int]], groups: list[str], workers: int, timeout: float, timed: bool
) -> tuple[list[dict[str, Any]], list[str], float]:
    ctx = mp.get_context("spawn")
    channel = ctx.Queue()
    todo = collections.deque(tasks)
    chunk = max(1, -(-len(tasks) // (workers * 2)))
    running: dict[Any, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []
    timeouts: list[str] = []
    started = time.perf_counter()

    def spawn() -> None:
        batch = [todo.popleft() for _ in range(min(chunk, len(todo)))]
        if not batch:
            return
        proc = ctx.Process(target=_worker, args=(batch, groups, channel, timed), daemon=True)
        proc.start()
        running[proc] = {"batch": batch, "current": None, "since": time.monotonic(), "done": 0}

    for _ in range(workers):
        spawn()
    while running:
        try:
            message = channel.get(timeout=1.0)
        except queue.Empty:
            message = None
        now = time.monotonic()
        if message is not None:
            kind = message[0]
            # find the worker by the task it reports
            for state in running.values():
                if kind == "start" and (message[1], message[2]) in state["batch"]:
                    state["current"], state["since"] = (message[1], message[2]), now
                    break
                if kind == "done" and state["current"] == (message[1], message[2]):
                    results.extend(message[3])
                    state["current"], state["done"] = None, state["done"] + 1
                    break
        for proc, state in list(running.items()):
            finished = state["done"] >= len(state["batch"])
            slow = state["current"] is not None and now - state["since"] > timeout
            startup = state["current"] is None and not finished and now - state["since"] > 120
            if finished or not proc.is_alive() or slow or startup:
                if not finished:
                    died = not proc.is_alive()  # before the kill: the op crashed its process
                    if not died:
                        proc.kill()
                    proc.join(5)
                    lost = state["current"]
                    if lost is not None:
                        how = "died (the process crashed)" if died else "over the time limit"
                        timeouts.append(f"{lost[0]} {lost[1]}: {how}")
                    # the rest of its batch goes back to the queue
                    seen = state["batch"].index(lost) + 1 if lost in state["batch"] else 0
                    for item in reversed(state["batch"][max(seen, state["done"]) :]):
                        todo.appendleft(item)
                else:
                    proc.join(5)
                del running[proc]
                spawn()
        if not running and todo:
            spawn()
    return results, timeouts, time.perf_counter() - started


def _report(results: list[dict[str, Any]], timeouts: list[str], wall: float) -> str:
    lines = []
    by_group: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in results:
        by_group[r.get("group", r["kind"])].append(r)
    lines.append(
        f"{'group':<14}{'errors':>8}{'recall':>9}{'culprit':>9}{'no error':>10}{'skipped':>9}"
        "  (diagnosed/raised)"
    )
    misses: collections.Counter[str] = collections.Counter()
    wrong: list[str] = []
    for group in GROUPS:
        rows = by_group.get(group, [])
        errors = [r for r in rows if r["kind"] == "error"]
        diagnosed = [r for r in errors if r["diagnosed"]]
        right = [r for r in diagnosed if r.get("culprit")]
        silent = [r for r in rows if r["kind"] == "no_error"]
        skipped = [r for r in rows if r["kind"] not in ("error", "no_error")]
        recall = len(diagnosed) / len(errors) if errors else float("nan")
        accuracy = len(right) / len(diagnosed) if diagnosed else float("nan")
        lines.append(
            f"{group:<14}{len(errors):>8}{recall:>9.3f}{accuracy:>9.3f}{len(silent):>10}"
            f"{len(skipped):>9}  ({len(diagnosed)}/{len(errors)})"
        )
        for r in errors:
            if not r["diagnosed"]:
                text = re.sub(r"\d+", "N", r.get("message", ""))[:110]
                misses[f"{group}: {r.get('etype', '')}: {text}"] += 1
            elif not r.get("culprit"):
                wrong.append(
                    f"{group} {r['op']}: {r.get('culprits')} | {r.get('message', '')[:90]}"
                )
    fp_rows = by_group.get("error_inputs", [])
    not_device = [r for r in fp_rows if not r["device_error"]]
    fps = [r for r in not_device if r["diagnosed"]]
    lines.append(
        f"false positives on error_inputs: {len(fps)} of {len(not_device)} non-device errors "
        f"({len(fp_rows) - len(not_device)} error_inputs are device errors)"
    )
    for r in fps[:10]:
        lines.append(f"  FP {r['op']}: {r['message'][:120]}")
    crashes = [r for r in results if r["kind"] == "crash"]
    lines.append(
        f"errors inside a worker: {len(crashes)}; ops that lost their worker (a crash or the time"
        f" limit): {len(timeouts)}"
    )
    for t in timeouts[:10]:
        lines.append(f"  lost: {t}")
    for c in crashes[:3]:
        lines.append("  crash: " + c["trace"].splitlines()[-1])
    if misses:
        lines.append("not diagnosed (most common):")
        for text, n in misses.most_common(12):
            lines.append(f"  {n:4d}  {text}")
    if wrong:
        lines.append(f"culprit not named ({len(wrong)}), first ones:")
        lines.extend(f"  {w}" for w in wrong[:12])
    errors = [r for r in results if r["kind"] == "error"]
    spent = sum(r.get("seconds", 0.0) for r in errors)
    ran = sum(r.get("op_seconds", 0.0) for r in errors)
    lines.append(
        f"time inside diagnose() {spent:.2f} s for {len(errors)} errors "
        f"({1000 * spent / max(1, len(errors)):.2f} ms each); the failing calls themselves "
        f"{ran:.2f} s: ratio {spent / ran if ran else float('nan'):.1f}"
    )
    lines.append(f"wall time {wall:.1f} s (worker start-up, op_db import and every group)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="only the first N ops/modules")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per op")
    parser.add_argument("--groups", default=",".join((*GROUPS, "error_inputs")))
    parser.add_argument("--json", type=Path, help="write every item's result here")
    args = parser.parse_args()
    groups = args.groups.split(",")

    os.environ.setdefault("PYTORCH_TEST_SKIP_FAST", "1")
    import warnings

    warnings.simplefilter("ignore")
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_modules import module_db

    n_ops = len(op_db) if not args.limit else min(args.limit, len(op_db))
    n_mods = len(module_db) if not args.limit else min(args.limit, len(module_db))
    tasks = [("op", i) for i in range(n_ops)]
    if "modules" in groups:
        tasks += [("module", i) for i in range(n_mods)]
    results, timeouts, wall = _run_all(tasks, groups, args.workers, args.timeout, timed=False)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    print(f"op_db: {n_ops} OpInfos, module_db: {n_mods} ModuleInfos, {args.workers} workers")
    print(_report(results, timeouts, wall))


if __name__ == "__main__":
    main()
