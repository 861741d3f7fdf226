"""dry_run(): a cell run on fake copies of what it reads, and what that predicts.

The steps, in order: compile the cell (IPython's ``transform_cell`` first when a shell is
given) under a file name of its own; build the shadow namespace (:mod:`.shadow`: fake copies,
re-pointed functions); run the cell there under the fake mode, the memory counter
(:mod:`.memory`) and the file-write guard; then read what stopped it. A device error is
explained by :func:`..diagnose.diagnose` exactly as the real run's would be (the error is
the one the real device raises, in its words: see :mod:`.gaps`), on the shadow namespace: its
names are the user's, and a function's local is found under the name it has there (a fake
reports the device of the real object it copies, and its culprit the real size); anything
else that stopped the run is a :class:`~.report.Stop`. Last, what the cell needs on each
device beyond what it holds is compared with the device's free memory.

The user's objects are never touched: only their copies run, and nothing is written back.
"""

from __future__ import annotations

import itertools
import linecache
import re
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any

from .. import devices
from .fakes import FakeCopies, python_backend_fakes
from .memory import MemoryCounter
from .report import DryRunReport, Fit, Stop
from .shadow import SideEffect, build_shadow, changed_containers, no_file_writes

__all__ = ["dry_run", "parse_free"]

_RUNS = itertools.count(1)

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?)B?\s*", re.IGNORECASE)

#: the operator a fake tensor could not answer without values, and what the cell did
_DATA_DEPENDENT = {
    "_local_scalar_dense": "reads a tensor's value (.item(), bool(t), float(t), an if on a tensor)",
    "equal": "compares tensors' values (torch.equal)",
    "allclose": "compares tensors' values (torch.allclose)",
    "is_nonzero": "reads a tensor's truth value (bool(t), an if on a tensor)",
}


#: how a TypeError says a real tensor met a fake one: every dispatch handler declined, or an
#: operator such as ``@`` found no method for the pair
_REAL_TENSOR_SIGNS = ("__torch_dispatch__ handlers returned NotImplemented", "'FakeTensor' and '")


def dry_run(
    cell: str,
    namespace: Mapping[str, Any],
    *,
    shell: Any = None,
    target: str | None = None,
    free: Mapping[str, int] | None = None,
) -> DryRunReport:
    """Run ``cell`` on fake copies of the tensors, modules and optimizers it reads from
    ``namespace`` and report the device error it would raise, its memory per device and where
    the prediction stopped (see :class:`~.report.DryRunReport`).

    ``shell``: an IPython shell (its ``transform_cell`` turns magics into Python); ``target``:
    the device a fix should move things to (as ``diagnose``'s); ``free``: free bytes per device
    to compare with instead of the device's own figure (``{"cuda:0": 24 * 2**30}``: "would it
    fit on a 24 GiB card?"). Never changes ``namespace`` or anything in it.
    """
    started = time.perf_counter()
    report = DryRunReport(cell)
    if "torch" not in sys.modules:  # never imported on the user's behalf
        report.stopped = Stop(None, "not started", "torch is not imported yet")
        return report
    filename = f"<dry-run-{next(_RUNS)}>"
    source = shell.transform_cell(cell) if shell is not None else cell
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as error:
        report.stopped = Stop(error.lineno, "error", "the cell does not compile", str(error))
        return report
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        _run(report, code, filename, namespace, shell, target)
    finally:
        linecache.cache.pop(filename, None)
    report.fits = _fits(report.memory, free or {})
    report.seconds = time.perf_counter() - started
    return report


def parse_free(text: str) -> tuple[str, int]:
    """``cuda:0=24GiB`` -> ``("cuda:0", 25769803776)``; sizes in B, KB/KiB, MB/MiB, GB/GiB,
    TB/TiB (the ``i`` forms are powers of 1024, the others of 1000), or a number of bytes."""
    device, equals, size = text.partition("=")
    match = _SIZE.fullmatch(size)
    if not equals or not device.strip() or match is None:
        raise ValueError(f"{text!r} is not DEVICE=SIZE (cuda:0=24GiB)")
    number, prefix, binary = match.groups()
    base = 1024 if binary or not prefix else 1000
    power = " KMGT".index(prefix.upper() or " ")
    return devices.full_device_name(device), int(float(number) * base**power)


def _run(
    report: DryRunReport,
    code: Any,
    filename: str,
    namespace: Mapping[str, Any],
    shell: Any,
    target: str | None,
) -> None:
    copies = FakeCopies()
    try:
        shadow = build_shadow(code, namespace, copies)
        # the copies are made: from now on only the shadow holds the fakes, as only the
        # user's objects hold their tensors, so what the cell frees (a parameter `.half()`
        # or `.cpu()` replaces) is freed when the real run would free it
        copies.release()
        _run_shadow(report, code, filename, shadow, copies, shell, target)
    finally:
        copies.release()


def _run_shadow(
    report: DryRunReport,
    code: Any,
    filename: str,
    shadow: Any,
    copies: FakeCopies,
    shell: Any,
    target: str | None,
) -> None:
    import torch

    error: BaseException | None = None
    # the generators a cell can draw from or reseed (torch.manual_seed seeds CUDA's too) are
    # the user's: forked, and restored after; CUDA's only where it is already initialised
    cuda = torch.cuda.is_initialized()
    with (
        torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else []),
        copies.running() as checks,
        MemoryCounter(filename, shadow.namespace) as counter,
        no_file_writes(),
    ):
        try:
            exec(code, shadow.namespace)
        except (Exception, SideEffect) as raised:
            error = raised
    report.memory = counter.forecast(shadow.namespace)
    notes = [
        f"{name} was not copied ({why}); a real tensor reached through it stops the run"
        for name, why in shadow.shared.items()
    ]
    notes += [
        f"the cell changes {name} (the dry run changed a copy; the real run changes {name})"
        for name in changed_containers(shadow)
    ]
    report.notes = tuple(notes)
    if error is None:
        return
    line = _cell_line(error, filename)
    diagnosis = None
    if not isinstance(error, SideEffect):
        from ..diagnose import diagnose

        # the scan reads fakes' storages, which torch warns about: nothing for the user to do
        with python_backend_fakes(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            diagnosis = diagnose(error, shadow.namespace, report.cell, target=target, shell=shell)
    if diagnosis is not None:
        _as_real_culprits(diagnosis, shadow.namespace)
        # the message names the operator where the real one does; the run knows it always
        diagnosis.operator = diagnosis.operator or checks.operator_of(error)
        report.error, report.diagnosis, report.error_line = error, diagnosis, line
    else:
        report.stopped = _stop(error, line)


def _as_real_culprits(diagnosis: Any, namespace: Mapping[str, Any]) -> None:
    """Culprits are fakes standing for the real objects of the real run: called by the real
    type's name, with the bytes the real ones take (a fake's storage knows its size)."""
    for culprit in diagnosis.culprits:
        if culprit.kind == "FakeTensor":
            culprit.kind = "Tensor"
        found = _resolve(namespace, culprit.alias or culprit.name)
        sizes = _bytes_by_device(found)
        if sizes:
            culprit.bytes_by_device = sizes
            culprit.bytes = sum(sizes.values())


def _resolve(namespace: Mapping[str, Any], path: str) -> Any:
    """``model.fc.weight`` looked up in ``namespace``; None for anything but a dotted name.
    Attributes are read from the instance's own dict and a module's registries, never through
    a property (which is code)."""
    root, *attributes = path.split(".")
    if not root.isidentifier() or root not in namespace:
        return None
    value = namespace[root]
    for attribute in attributes:
        found = None
        for registry in ("__dict__", "_parameters", "_buffers", "_modules"):
            held = _own_dict(value, registry)
            if attribute in held:
                found = held[attribute]
                break
        if found is None:
            return None
        value = found
    return value


def _own_dict(value: Any, name: str) -> Mapping[str, Any]:
    try:
        held = object.__getattribute__(value, name)
    except Exception:
        return {}
    return held if isinstance(held, Mapping) else {}


def _bytes_by_device(value: Any) -> dict[str, int]:
    """Bytes per device of a tensor, a module's parameters and buffers, or the tensors of a
    list, tuple or dict (a batch, a tokenizer's output), each storage once."""
    import torch

    if isinstance(value, torch.Tensor):
        tensors = [value]
    elif isinstance(value, torch.nn.Module):
        tensors = [*value.parameters(), *value.buffers()]
    elif isinstance(value, (list, tuple, dict)):
        items = value.values() if isinstance(value, dict) else value
        tensors = [v for v in items if isinstance(v, torch.Tensor)]
    else:
        return {}
    seen: set[int] = set()
    sizes: dict[str, int] = {}
    for tensor in tensors:
        try:
            storage = tensor.untyped_storage()
            key, nbytes = storage._cdata, storage.nbytes()
        except Exception:
            continue
        if key not in seen:
            seen.add(key)
            device = str(tensor.device)
            sizes[device] = sizes.get(device, 0) + nbytes
    return sizes


def _cell_line(error: BaseException, filename: str) -> int | None:
    """The line of the cell's own code where ``error`` went through last."""
    line = None
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _stop(error: BaseException, line: int | None) -> Stop:
    """What the fake run could not go past, in the user's words."""
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
        UnsupportedFakeTensorException,
        UnsupportedOperatorException,
    )

    text = str(error).splitlines()[0][:200] if str(error) else ""
    if isinstance(error, SideEffect):
        return Stop(line, "side effect", str(error))
    if isinstance(error, DataDependentOutputException):
        op = _operator_name(error)
        reason = _DATA_DEPENDENT.get(op, f"needs tensor values ({op})")
        return Stop(line, "data-dependent", reason)
    if isinstance(error, DynamicOutputShapeException):
        op = _operator_name(error)
        return Stop(line, "dynamic shape", f"its result's shape depends on tensor values ({op})")
    if isinstance(error, (UnsupportedOperatorException, UnsupportedFakeTensorException)):
        return Stop(line, "unsupported", "an operator fake tensors cannot run", text)
    # a real tensor reaching the fake mode: torch's own message, or (a real tensor of a Python
    # backend, a tensor subclass of its own) every dispatch handler declining it
    if "convert all Tensors to FakeTensors" in str(error) or (
        isinstance(error, TypeError) and any(sign in text for sign in _REAL_TENSOR_SIGNS)
    ):
        return Stop(
            line,
            "not copied",
            "reaches a real tensor the dry run did not copy (a global read by a method, a "
            "closure, a default argument)",
        )
    return Stop(
        line,
        "error",
        f"the cell raised {type(error).__name__} on fake tensors (likely the real run too)",
        text,
    )


def _operator_name(error: BaseException) -> str:
    func = getattr(error, "func", None) or (error.args[0] if error.args else None)
    name = getattr(func, "__name__", None) or str(func)
    return name.split(".")[0].removeprefix("aten::")


def _fits(memory: Any, free: Mapping[str, int]) -> tuple[Fit, ...]:
    if memory is None:
        return ()
    given = {devices.full_device_name(name): int(size) for name, size in free.items()}
    fits = []
    for device in sorted(memory.peak):
        need = memory.growth(device)
        if need <= 0 or device == "meta":
            continue
        fits.append(Fit(device, need, given.get(device, _free_on(device))))
    return tuple(fits)


def _free_on(device: str) -> int | None:
    """The device's free memory, asked only where that cannot initialise it."""
    kind = device.partition(":")[0]
    if not devices.is_initialized(kind):
        return None
    return devices.free_bytes(device)
