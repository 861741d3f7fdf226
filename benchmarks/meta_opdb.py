"""Issue figure: meta tensors mixing with real ones over PyTorch's operator database.

Every ``OpInfo`` of ``op_db`` whose first sample takes at least two tensors is run as a cell
(``_r = op(t0, t1, dim=a2)``, as ``benchmarks/diagnose_opdb.py`` binds it) under
:func:`torchdevice_magic.trace.trace`, once per tensor argument (the first three) moved to
meta, the rest on cpu. A case counts only where the sample runs with every tensor on cpu and
with every tensor on meta (otherwise a failure is about the op, not the mix). Each mixed run
ends one of four ways:

  raised    torch refused the mix (the error is diagnosed like any device error)
  garbage   it returned a real tensor: numbers computed from no data
  meta      it returned meta: the real tensor's values were dropped
  other     it returned no tensor

``garbage`` and ``meta`` runs in which an op computed with both devices are the silent mixes:
each must be flagged (``report.meta_mix``); those that are not are listed as missed. Silent
runs that are no mix (the real tensors left are 0-dim cpu tensors, which torch reads as
numbers; no op saw both devices; a shape-only op) must not be flagged: those that are are
false positives. Flagged ``garbage`` runs whose result equals the all-cpu one are listed apart
(the meta tensor was read for its shape only, or uninitialised memory happened to agree).
Each op's sample is the first whose tensors are all at least 1-d. Printed: ops swept, runs
per outcome, flagged, missed, false positives.

    python benchmarks/meta_opdb.py [--limit N] [--timeout 20]

Needs ``expecttest`` (torch's testing helpers import it).
"""

from __future__ import annotations

import argparse
import collections
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from diagnose_opdb import Case, meta_runs, pick_samples, run_cell  # noqa: E402


class OpTimeout(Exception):
    """One op ran past the time limit (it is counted as skipped)."""


def _alarm(signum: int, frame: Any) -> None:
    raise OpTimeout


#: ops whose tensors beside the first are read for their shapes only (truth kept here, apart
#: from the rule under test)
SHAPE_ONLY_OPS = {"resize_as_", "view_as", "expand_as", "reshape_as", "broadcast_tensors"}


def outcome(report: Any, result: Any, torch: Any) -> str:
    """How one mixed run ended: raised, garbage, meta or other."""
    if report.error is not None:
        return "raised"
    found = result if isinstance(result, (list, tuple)) else (result,)
    outputs = [t for t in found if isinstance(t, torch.Tensor)]
    if not outputs:
        return "other"
    return "meta" if any(t.is_meta for t in outputs) else "garbage"


def expectation(op: Any, case: Case, moved: str, report: Any) -> str:
    """Whether a silent run must be flagged: "mix", or why not: "scalar" (the real tensors
    left are 0-dim cpu tensors, numbers to torch), "separate" (no op saw both devices: each
    tensor went its own way), "shape-only"."""
    if op.name in SHAPE_ONLY_OPS:
        return "shape-only"
    if all(case.values[n].dim() == 0 for n in case.tensors if n != moved):
        return "scalar"
    if not any("+" in key for key in report.ops_by_device):
        return "separate"
    return "mix"


def _same_as_cpu(result: Any, reference: Any, torch: Any) -> bool:
    try:
        if isinstance(result, torch.Tensor) and isinstance(reference, torch.Tensor):
            return bool(torch.equal(result, reference))
    except Exception:
        return False
    return False


def first_sample(op: Any, torch: Any) -> Any:
    """The first sample whose tensors are all at least 1-d (a 0-dim cpu tensor is a number
    beside any device), else the first with two tensors, else the first."""
    samples = pick_samples(op, torch, 12)
    for sample in samples:
        tensors = Case(op.op, sample, torch)
        if len(tensors.tensors) >= 2 and all(tensors.values[n].dim() for n in tensors.tensors):
            return sample
    return samples[0] if samples else None


def sweep_op(op: Any, torch: Any) -> list[dict[str, Any]]:
    """The mixed runs of one op's sample (empty where no mix can be made)."""
    from torchdevice_magic.trace import trace

    sample = first_sample(op, torch)
    if sample is None:
        return []
    case = Case(op.op, sample, torch)
    if len(case.tensors) < 2:
        return []
    reference_ns = case.namespace({})
    if run_cell("_r = " + case.call, reference_ns) is not None or not meta_runs(case):
        return [{"op": op.name, "outcome": "skipped"}]
    rows = []
    for name in case.tensors[:3]:
        ns = case.namespace({name: case.values[name].to("meta")})
        report = trace("_r = " + case.call, ns)
        result = ns.get("_r")
        ended = outcome(report, result, torch)
        row = {"op": op.name, "moved": name, "outcome": ended, "flagged": report.meta_mix}
        row["expected"] = expectation(op, case, name, report)
        row["same_as_cpu"] = ended == "garbage" and _same_as_cpu(result, reference_ns["_r"], torch)
        rows.append(row)
    return rows


def _names(rows: list[dict[str, Any]]) -> str:
    return ", ".join(sorted({f"{r['op']}[{r['moved']}]" for r in rows}))


def summary(rows: list[dict[str, Any]], swept: int) -> str:
    cases = [r for r in rows if r["outcome"] != "skipped"]
    by_outcome = collections.Counter(r["outcome"] for r in cases)
    silent = [r for r in cases if r["outcome"] in ("garbage", "meta")]
    must = [r for r in silent if r["expected"] == "mix"]
    flagged = [r for r in must if r["flagged"] is not None]
    missed = [r for r in must if r["flagged"] is None]
    not_mixes = [r for r in silent if r["expected"] != "mix"]
    wrongly = [r for r in not_mixes if r["flagged"] is not None]
    equal = [r for r in flagged if r["same_as_cpu"]]
    why_not = collections.Counter(r["expected"] for r in not_mixes)
    flagged_raised = [r for r in cases if r["outcome"] == "raised" and r["flagged"] is not None]
    lines = [
        f"ops swept: {swept}; with two or more tensors and runnable on cpu and on meta: "
        f"{len({r['op'] for r in cases})} ({sum(r['outcome'] == 'skipped' for r in rows)} "
        "skipped)",
        f"mixed runs: {len(cases)}: "
        + ", ".join(f"{k} {by_outcome[k]}" for k in ("raised", "garbage", "meta", "other")),
        f"silent mixes (garbage or meta from an op computing with both): {len(must)} runs in "
        f"{len({r['op'] for r in must})} ops; flagged {len(flagged)}, missed {len(missed)}",
        f"silent runs that are no mix ({', '.join(f'{k} {v}' for k, v in why_not.items())}): "
        f"{len(not_mixes)}; flagged anyway (false positives): {len(wrongly)}",
        f"flagged although the op raised (a silent mix before it): {len(flagged_raised)}",
    ]
    if missed:
        lines.append(f"missed: {_names(missed)}")
    if wrongly:
        lines.append(f"false positives: {_names(wrongly)}")
    lines.append(
        f"flagged with a result equal to the all-cpu one (shape-only use, or the op read "
        f"uninitialised memory that happened to agree): {len(equal)} {_names(equal)}"
    )
    lines.append(f"silent-mix ops: {', '.join(sorted({r['op'] for r in must}))}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="only the first N OpInfos")
    parser.add_argument("--timeout", type=int, default=20, help="seconds per op")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    started = time.perf_counter()
    ops = op_db[: args.limit] if args.limit else op_db
    rows: list[dict[str, Any]] = []
    signal.signal(signal.SIGALRM, _alarm)
    for op in ops:
        signal.alarm(args.timeout)
        try:
            rows += sweep_op(op, torch)
        except OpTimeout:
            rows.append({"op": op.name, "outcome": "skipped"})
        except Exception:  # the harness could not set the op up
            rows.append({"op": op.name, "outcome": "skipped"})
        finally:
            signal.alarm(0)
    print(summary(rows, len(ops)))
    print(f"wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
