"""What :func:`~torchdevice_magic.trace.trace` saw, and its text and escaped HTML.

``TraceReport`` (``first_divergence``, ``transfers``, ``host_reads``, ``error``) and the rows it
is made of (``Divergence``, ``Transfer``, ``HostRead``): plain data, built by the recorder
(:mod:`.recorder`) when the traced code is done; they keep no reference to frames or tensors.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from ..units import device_sort_key, format_bytes

NAMED_COPIES = 3

#: how a report introduces an op that computed with a meta tensor beside a real one
META_MIX_HEADLINE = "Meta mixed with real data, no error raised (the result holds no real values)"


@dataclass(frozen=True)
class Divergence:
    """The first op whose tensor inputs sat on more than one device."""

    op: str  # aten name, e.g. "add.Tensor"
    function: str  # "<cell>" or the user function's name
    line: int | None
    module: str | None  # "model.encoder.layers.3.attn" when inside a module's forward
    devices: tuple[str, ...]
    names: tuple[str | None, ...]  # per tensor input: its variable name in that frame, or None
    inputs: tuple[tuple[str | None, str, tuple[int, ...]], ...]  # (name, device, shape)
    filename: str = ""
    source: str = ""  # the text of that line
    raised: bool = False  # the op itself failed (torch refused the mix)
    file: str = ""  # where the function lives, as shown ("" for the cell, "In[3]", "train.py")

    @property
    def where(self) -> str:
        return _where(self.function, self.line, self.file)

    def describe(self) -> str:
        parts = []
        for name, device, shape in self.inputs:
            size = "×".join(map(str, shape)) if shape else "scalar"
            parts.append(f"{name or 'a temporary'} ({size}) on {device}")
        inside = f" in {self.module}" if self.module else ""
        verb = "failed mixing" if self.raised else "mixed"
        return f"{self.where}{inside}: {self.op} {verb} " + ", ".join(parts)


@dataclass(frozen=True)
class Transfer:
    """Copies between two devices made by one line, aggregated."""

    line: int | None
    function: str
    source: str  # device, "cpu"
    target: str  # device, "cuda:0"
    count: int
    bytes: int
    names: tuple[str, ...] = ()  # variables copied (of the first few copies), when found
    module: str | None = None
    filename: str = ""
    code: str = ""  # the text of the line
    in_loop: bool = False  # the line sits in a for/while loop of the cell
    direct: int = 0  # copies the line made itself (x.to(d)), not through library code
    file: str = ""  # where the function lives, as shown ("" for the cell, "In[3]", "train.py")
    #: one variable no loop of the cell binds: the same tensor copied each time round
    same_each_time: bool = False

    @property
    def name(self) -> str | None:
        if not self.names:
            return None
        # only the first few copies are looked up: more names may hide behind a full list
        more = ", ..." if len(self.names) >= NAMED_COPIES and self.count > len(self.names) else ""
        return ", ".join(self.names) + more

    @property
    def where(self) -> str:
        return _where(self.function, self.line, self.file)

    @property
    def repeated(self) -> bool:
        """The line ran again and again (a loop, or a function called in one), rather than
        copying many tensors once (``model.to()`` copies each parameter, through torch's code;
        ``a, b = x.to(d), y.to(d)`` copies two variables)."""
        if self.count < 2:
            return False
        return self.in_loop or self.direct > max(1, len(self.names))

    def hint(self) -> str | None:
        """Advice when one line copies again and again."""
        if not self.repeated:
            return None
        what = self.name or "a tensor"
        head = (
            f"{self.where} copies {what} from {self.source} to {self.target} "
            f"{self.count} times, {format_bytes(self.bytes)}"
        )
        if self.same_each_time and self.name:
            name = self.name
            return (
                f"{head}: {name} is the same tensor each time round: move it once, before the "
                f'loop ({name} = {name}.to("{self.target}"))'
            )
        if self.source == "cpu":
            return f"{head}: move the dataset once, or use pin_memory + non_blocking"
        if self.target == "cpu":
            return f"{head}: keep it on {self.source} and read it back once, after the loop"
        return f"{head}: keep what this line uses on one device"


@dataclass(frozen=True)
class HostRead:
    """Ops that need a tensor's values on the host (on an accelerator each one waits for it)."""

    line: int | None
    function: str
    device: str
    count: int
    ops: tuple[str, ...]  # user-facing names: ".item()", "nonzero", "print", ...
    module: str | None = None
    filename: str = ""
    code: str = ""
    in_loop: bool = False
    file: str = ""  # where the function lives, as shown ("" for the cell, "In[3]", "train.py")

    @property
    def where(self) -> str:
        return _where(self.function, self.line, self.file)

    @property
    def syncs(self) -> bool:
        """cpu and meta never wait for a device."""
        return self.device.partition(":")[0] not in ("cpu", "meta")


@dataclass
class TraceReport:
    """What :func:`trace` saw; ``text()`` and ``_repr_html_()`` render it."""

    first_divergence: Divergence | None
    transfers: list[Transfer]
    host_reads: list[HostRead]
    error: BaseException | None = None
    ops: int = 0  # aten ops run while tracing
    ops_by_device: dict[str, int] = field(default_factory=dict)  # "cpu" / "cpu+cuda:0"
    modules: dict[str, int] = field(default_factory=dict)  # ops per module path
    unattributed: int = 0  # interesting ops seen on other threads (no user frame)
    internal_errors: int = 0  # ops the recorder failed to record (they ran all the same)
    #: the first op that computed with a meta tensor beside a real one and did not raise: its
    #: result is numbers computed from no data (or a meta tensor that dropped real values)
    meta_mix: Divergence | None = None

    @property
    def transfer_bytes(self) -> int:
        return sum(t.bytes for t in self.transfers)

    def hints(self) -> list[str]:
        hints = [h for t in self.transfers if (h := t.hint())]
        for r in self.host_reads:
            if r.count >= 2 and r.syncs:
                hints.append(
                    f"{r.where} reads values from {r.device} to the host {r.count} times "
                    f"({', '.join(r.ops)}): each one waits for the device; keep results on "
                    "the device and read them once"
                )
        return hints

    def text(self) -> str:
        out = [self._headline()]
        d = self.first_divergence
        if d is not None:
            out.append(f"First divergence: {d.describe()}")
            if d.source:
                out.append(f"    {d.source}")
        elif self.error is None or len(self.ops_by_device) <= 1:
            out.append("No op mixed devices.")
        m = self.meta_mix
        if m is not None:
            out.append(f"{META_MIX_HEADLINE}: {m.describe()}")
            if m.source and m != d:
                out.append(f"    {m.source}")
        if self.transfers:
            out.append("Transfers (biggest first):")
            for t in self.transfers:
                name = f" {t.name}" if t.name else ""
                copies = "copy" if t.count == 1 else "copies"
                out.append(
                    f"  {t.where:<10} {t.source} -> {t.target}{name}: {t.count} {copies}, "
                    f"{format_bytes(t.bytes)}"
                )
        if self.host_reads:
            out.append("Host reads (values read back to Python):")
            for r in self.host_reads:
                out.append(f"  {r.where:<10} {r.count} on {r.device} ({', '.join(r.ops)})")
        if self.unattributed:
            out.append(
                f"{self.unattributed} copies/host reads ran on other threads (no line of "
                "yours on their stack: autograd's device threads, for one)"
            )
        if self.internal_errors:
            out.append(f"({self.internal_errors} ops could not be recorded; they ran as usual)")
        hints = self.hints()
        for h in hints:
            out.append(f"Hint: {h}")
        if self.error is not None:
            out.append(f"The cell raised {type(self.error).__name__}: {_first_line(self.error)}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.text()

    def _headline(self) -> str:
        devices = sorted(
            {d for key in self.ops_by_device for d in key.split("+")}, key=device_sort_key
        )
        on = f" on {', '.join(devices)}" if devices else ""
        copies = sum(t.count for t in self.transfers)
        reads = sum(r.count for r in self.host_reads)
        return (
            f"Trace: {self.ops} ops{on}; {copies} transfers "
            f"({format_bytes(self.transfer_bytes)}); {reads} host reads"
        )

    def _repr_html_(self) -> str:
        e = html.escape
        parts = [f"<p><b>{e(self._headline())}</b></p>"]
        d = self.first_divergence
        if d is not None:
            parts.append(f"<p><b>First divergence</b>: {e(d.describe())}</p>")
            if d.source:
                parts.append(f"<pre>{e(d.source)}</pre>")
        m = self.meta_mix
        if m is not None:
            parts.append(f"<p><b>{e(META_MIX_HEADLINE)}</b>: {e(m.describe())}</p>")
        if self.transfers:
            rows = "".join(
                f"<tr><td>{e(t.where)}</td><td>{e(t.name or '')}</td><td>{e(t.source)}</td>"
                f"<td>{e(t.target)}</td><td>{t.count}</td><td>{e(format_bytes(t.bytes))}</td></tr>"
                for t in self.transfers
            )
            parts.append(
                "<table><tr><th>where</th><th>tensor</th><th>from</th><th>to</th>"
                f"<th>count</th><th>bytes</th></tr>{rows}</table>"
            )
        if self.host_reads:
            rows = "".join(
                f"<tr><td>{e(r.where)}</td><td>{e(r.device)}</td><td>{r.count}</td>"
                f"<td>{e(', '.join(r.ops))}</td></tr>"
                for r in self.host_reads
            )
            parts.append(
                "<table><tr><th>where</th><th>device</th><th>host reads</th><th>ops</th></tr>"
                f"{rows}</table>"
            )
        parts.extend(f"<p>Hint: {e(h)}</p>" for h in self.hints())
        if self.error is not None:
            parts.append(
                f"<p>The cell raised <code>{e(type(self.error).__name__)}</code>: "
                f"{e(_first_line(self.error))}</p>"
            )
        return f'<div class="torchdevice-magic-trace">{"".join(parts)}</div>'

    def to_dict(self) -> dict[str, Any]:
        return {
            "first_divergence": _asdict(self.first_divergence),
            "meta_mix": _asdict(self.meta_mix),
            "transfers": [_asdict(t) for t in self.transfers],
            "host_reads": [_asdict(r) for r in self.host_reads],
            "error": None if self.error is None else _first_line(self.error),
            "ops": self.ops,
            "ops_by_device": dict(self.ops_by_device),
            "modules": dict(self.modules),
        }


def _asdict(obj: Any) -> Any:
    if obj is None:
        return None
    from dataclasses import asdict

    return asdict(obj)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else ""


def _where(function: str, line: int | None, file: str) -> str:
    if line is None:
        return "(no line)"
    if function == "<cell>":
        return f"line {line}"
    place = f" {file}" if file else ""
    return f"{function}(){place} line {line}"
