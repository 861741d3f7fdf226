"""From what the recorder found to the :class:`~torchdevice_magic.trace.report.TraceReport`:
code objects and line numbers become function names, file labels and source text, the counts
become rows sorted by what matters most (bytes copied, host syncs).
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Callable
from types import CodeType
from typing import Any

from .findings import Findings
from .frames import loop_lines, names_bound_in_loops
from .report import Divergence, HostRead, TraceReport, Transfer


class Places:
    """Where a recorded ``(code, line)`` is, as the report shows it.

    ``filename``: the cell's file name (its lines are quoted from ``source``, and its
    ``<module>`` code is "<cell>"); ``file_label`` shows another file's name (``In[3]``), by
    default its base name."""

    def __init__(
        self,
        source: str | None,
        filename: str | None,
        file_label: Callable[[str], str | None] | None,
    ) -> None:
        self.source = source
        self.filename = filename
        self.file_label = file_label
        self._loops: set[int] | None = None  # parsed for the first row in the cell
        self._loop_names: set[str] | None = None

    def same_each_time(self, names: tuple[str, ...], in_loop: bool) -> bool:
        """Whether a loop line's copies are of one variable that no loop of the cell binds
        (the very tensor copied again each time round)."""
        if not in_loop or len(names) != 1 or not names[0].isidentifier():
            return False
        if self._loop_names is None:
            self._loop_names = names_bound_in_loops(self.source) if self.source else set()
        return names[0] not in self._loop_names

    def _in_loop(self, line: int | None) -> bool:
        if self._loops is None:
            self._loops = loop_lines(self.source) if self.source else set()
        return line in self._loops

    def place(self, code: CodeType | None, line: int | None) -> tuple[str, str, str, str, bool]:
        """(function, file name, how to show the file, source text, in a loop)"""
        if code is None:
            return "(other thread)", "", "", "", False
        filename = code.co_filename
        in_cell = filename == self.filename
        function = code.co_name
        if function == "<module>" and in_cell:
            function = "<cell>"
        text = ""
        if in_cell and self.source is not None and line:
            lines = self.source.splitlines()
            text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
        elif line:
            text = linecache.getline(filename, line).strip()
        return (
            function,
            filename,
            self._label(filename, in_cell),
            text,
            in_cell and self._in_loop(line),
        )

    def _label(self, filename: str, in_cell: bool) -> str:
        if in_cell or not filename:
            return ""
        if self.file_label is not None:
            try:
                label = self.file_label(filename)
            except Exception:
                label = None
            if label:
                return label
        return filename if filename.startswith("<") else os.path.basename(filename)


def assemble_report(findings: Findings, places: Places, error: BaseException | None) -> TraceReport:
    """The report of ``findings``, its lines placed by ``places``."""
    by_device, modules, total = _op_counts(findings.ops)
    return TraceReport(
        first_divergence=divergence_row(findings.divergence, places),
        transfers=_transfers(findings.transfers, places),
        host_reads=_reads(findings.reads, places),
        error=error,
        ops=total,
        ops_by_device=by_device,
        modules=modules,
        unattributed=findings.unattributed,
        internal_errors=findings.internal_errors,
        meta_mix=divergence_row(findings.meta_mix, places),
    )


def divergence_row(noted: dict[str, Any] | None, places: Places) -> Divergence | None:
    """The report's row of an op noted mixing devices (a divergence, a meta mix)."""
    if noted is None:
        return None
    function, filename, file, text, _ = places.place(noted["code"], noted["line"])
    return Divergence(
        op=noted["op"],
        function=function,
        line=noted["line"],
        module=noted["module"],
        devices=noted["devices"],
        names=noted["names"],
        inputs=noted["inputs"],
        filename=filename,
        source=text,
        raised=noted["raised"],
        file=file,
    )


def _transfers(noted: dict[Any, list[Any]], places: Places) -> list[Transfer]:
    transfers = []
    for (_, code, line, source, target), entry in noted.items():
        count, nbytes, names, module, direct = entry
        function, filename, file, text, in_loop = places.place(code, line)
        copied = tuple(names)
        transfers.append(
            Transfer(
                line,
                function,
                source,
                target,
                count,
                nbytes,
                copied,
                module,
                filename,
                text,
                in_loop,
                direct,
                file,
                places.same_each_time(copied, in_loop),
            )
        )
    transfers.sort(key=lambda t: (-t.bytes, -t.count, t.line or 0))
    return transfers


def _reads(noted: dict[Any, list[Any]], places: Places) -> list[HostRead]:
    reads = []
    for (_, code, line, device), (count, ops, module) in noted.items():
        function, filename, file, text, in_loop = places.place(code, line)
        reads.append(
            HostRead(
                line, function, device, count, tuple(ops), module, filename, text, in_loop, file
            )
        )
    reads.sort(key=lambda r: (-r.syncs, -r.count, r.line or 0))
    return reads


def _op_counts(ops: dict[Any, int]) -> tuple[dict[str, int], dict[str, int], int]:
    """(ops per device, ops per module, all ops) from the per-key counts."""
    by_device: dict[str, int] = {}
    modules: dict[str, int] = {}
    total = 0
    for key, count in ops.items():
        device, module = key if type(key) is tuple else (key, None)
        total += count
        if device is not None:
            by_device[str(device)] = by_device.get(str(device), 0) + count
        if module is not None:
            modules[module] = modules.get(module, 0) + count
    return by_device, modules, total
