"""Explain device-mismatch errors: what the message says, who is where, and the one-line fix.

Pure core: this module imports only the standard library. It never imports torch itself; it
uses torch only when the user already imported it (``"torch" in sys.modules``), because an
error that mentions tensors cannot have happened otherwise.

Three steps, each usable on its own:

1. :func:`parse_message` recognises the device-mismatch messages PyTorch has raised over the
   years (C++ ``TORCH_CHECK`` texts, the Python refs in ``torch._prims_common``, FakeTensor,
   RNNs, DataParallel, meta tensors) and pulls out the devices, the argument and the operator.
2. Culprits are found in two places: the names the failing cell reads (looked up in the user's
   namespace) and the locals of the innermost *user* frames of the traceback, because the
   mismatch usually happens inside a function (``train(model, loader)``) whose locals the cell
   never names.
3. The fix moves the smaller side to the device of the bigger side (or everything to the
   device the user asked for), written as Python the user can paste.

Everything here is defensive: :func:`diagnose` never raises, never calls ``str()``/``repr()``
on a tensor (that copies GPU data to the host), never iterates anything but plain
lists/tuples/dicts, and keeps no reference to user objects or frames (a stored diagnosis must
not keep GPU memory alive).
"""

from __future__ import annotations

import ast
import contextlib
import html
import os
import re
import sys
import sysconfig
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .units import device_sort_key, format_bytes

__all__ = [
    "Culprit",
    "Diagnosis",
    "FixLine",
    "MessageMatch",
    "diagnose",
    "parse_message",
]

# --------------------------------------------------------------------------------------------
# Message parsing
# --------------------------------------------------------------------------------------------

#: Tensor-type names in the old conv message (``torch.cuda.HalfTensor``) -> dtype name.
_TYPE_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "ComplexHalf": "complex32",
}

#: Scalar-type names printed by newer conv messages (``Input type (double) and bias type
#: (float)``) -> dtype name.
_SCALAR_DTYPES = {
    "float": "float32",
    "double": "float64",
    "c10::half": "float16",
    "half": "float16",
    "c10::bfloat16": "bfloat16",
    "bfloat16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::complex<c10::half>": "complex32",
}

#: Device-type names as PyTorch prints them (``DeviceTypeName``), lower-cased.
_DEVICE_TYPES = (
    "cpu",
    "cuda",
    "meta",
    "mps",
    "xpu",
    "xla",
    "hpu",
    "npu",
    "ipu",
    "mtia",
    "maia",
    "lazy",
    "hip",
    "ve",
    "vulkan",
    "mkldnn",
    "opengl",
    "opencl",
    "ideep",
    "fpga",
    "ort",
    "privateuseone",
)
_DEVICE_TOKEN = re.compile(
    r"(?<![\w.])(" + "|".join(_DEVICE_TYPES) + r")(?::(\d+))?(?![\w])", re.IGNORECASE
)
_GENERIC_HINT = re.compile(
    r"same device|different devices?|same devices|expected device|not on the expected device"
    r"|device mismatch|devices? do(?:es)? not match",
    re.IGNORECASE,
)

#: How a device token in a message should look: at most ``type:index``.
_DEV = r"([A-Za-z_][\w]*(?::\d+)?)"


@dataclass(frozen=True)
class MessageMatch:
    """What :func:`parse_message` found in an error message.

    ``devices`` are normalised (``"cuda:0"``, ``"cuda"``, ``"cpu"``, ``"meta"``, ...) in the
    order the message names them. ``argument_device`` is the device of the named argument
    (or of the odd tensor) and ``expected`` the device the operation wanted, where the message
    says so. ``types``/``dtypes`` are only set for the conv ``Input type ... weight type``
    message, which also reports pure dtype mismatches (``dtype_mismatch``).
    """

    kind: str
    devices: tuple[str, ...] = ()
    argument: str | None = None
    operator: str | None = None
    argument_device: str | None = None
    expected: str | None = None
    types: tuple[str, ...] = ()
    dtypes: tuple[str | None, ...] = ()
    dtype_mismatch: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "devices": list(self.devices),
            "argument": self.argument,
            "operator": self.operator,
            "argument_device": self.argument_device,
            "expected": self.expected,
            "types": list(self.types),
            "dtypes": list(self.dtypes),
            "dtype_mismatch": self.dtype_mismatch,
        }


def normalize_device(token: str) -> str:
    """``"CUDA"`` -> ``"cuda"``, ``"GPU"`` -> ``"cuda"``, ``"cuda:0"`` stays; no index invented."""
    tok = token.strip().strip("'\"`()[]{},.;!").strip()
    low = tok.lower()
    if low in ("gpu", "cudatensorid"):
        return "cuda"
    if low == "privateuse1":
        return "privateuseone"
    if low.isdigit():  # ``checkSameGPU`` prints bare CUDA indices
        return f"cuda:{low}"
    return low


def _dedup(items: Iterator[str] | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for item in items:
        if item and item not in out:
            out.append(item)
    return tuple(out)


def _clean_operator(method: str | None) -> str | None:
    """``wrapper_CUDA__index_select`` -> ``index_select`` (codegen'd kernel wrapper names)."""
    if not method:
        return None
    m = re.match(r"^wrapper_(?:[A-Z][A-Za-z0-9]*_)?_?(.+)$", method)
    return m.group(1) if m else method


def _parse_tensor_type(name: str) -> tuple[str | None, str | None]:
    """A conv message type name -> (device or None, dtype or None).

    ``torch.cuda.FloatTensor`` -> (cuda, float32); ``torch.FloatTensor`` -> (cpu, float32);
    ``CUDAHalfType`` -> (cuda, float16); ``double`` -> (None, float64).
    """
    name = name.strip()
    m = re.fullmatch(r"torch\.(?:(\w+)\.)?(\w+?)Tensor", name)
    if m:
        dev = normalize_device(m.group(1)) if m.group(1) else "cpu"
        if dev == "sparse":
            dev = "cpu"
        return dev, _TYPE_DTYPES.get(m.group(2))
    m = re.fullmatch(r"(CPU|CUDA|MPS|XPU|Meta|HIP|XLA)(\w+?)Type", name)
    if m:
        return normalize_device(m.group(1)), _TYPE_DTYPES.get(m.group(2))
    low = name.lower()
    if low in _SCALAR_DTYPES:
        return None, _SCALAR_DTYPES[low]
    m = re.fullmatch(r"(?:torch\.)?(float\d+|bfloat16|int\d+|uint\d+|bool|complex\d+)", low)
    if m:
        return None, m.group(1)
    return None, None


_Handler = Callable[["re.Match[str]"], MessageMatch]


def _m_found_two(m: re.Match[str]) -> MessageMatch:
    a, b = normalize_device(m.group(1)), normalize_device(m.group(2))
    arg, method = m.group("arg"), m.group("method")
    if arg:
        # ``common_device_check_failure(common_device, tensor, method, arg)``: the argument
        # is the tensor on the second device; the first is the common (expected) one.
        return MessageMatch(
            "found_two_devices",
            _dedup([a, b]),
            argument=arg,
            operator=_clean_operator(method),
            argument_device=b,
            expected=a,
        )
    return MessageMatch("found_two_devices", _dedup([a, b]))


def _m_different_from_other(m: re.Match[str]) -> MessageMatch:
    d, c = normalize_device(m.group("dev")), normalize_device(m.group("other"))
    return MessageMatch(
        "different_from_other",
        _dedup([d, c]),
        argument=m.group("arg"),
        operator=_clean_operator(m.group("method")),
        argument_device=d,
        expected=c,
    )


def _m_expected_cpu_tensor(m: re.Match[str]) -> MessageMatch:
    want = normalize_device(m.group("want"))
    got = normalize_device(m.group("got"))
    return MessageMatch(
        "expected_cpu_tensor",
        _dedup([want, got]),
        argument=m.group("arg"),
        operator=m.group("op"),
        argument_device=got,
        expected=want,
    )


def _m_not_on_expected(m: re.Match[str]) -> MessageMatch:
    a, b = normalize_device(m.group(1)), normalize_device(m.group(2))
    return MessageMatch("not_on_expected_device", _dedup([a, b]), argument_device=a, expected=b)


def _m_conv_type(m: re.Match[str]) -> MessageMatch:
    t_in, which, t_w = m.group("input"), m.group("which"), m.group("weight")
    d_in, dt_in = _parse_tensor_type(t_in)
    d_w, dt_w = _parse_tensor_type(t_w)
    devices = _dedup([d for d in (d_in, d_w) if d])
    dtype_mismatch = dt_in is not None and dt_w is not None and dt_in != dt_w
    return MessageMatch(
        "conv_type",
        devices,
        argument="input",
        operator=which,  # the conv layer's parameter the input was compared with
        argument_device=d_in,
        expected=d_w,
        types=(t_in.strip(), t_w.strip()),
        dtypes=(dt_in, dt_w),
        dtype_mismatch=dtype_mismatch,
    )


def _m_indices(m: re.Match[str]) -> MessageMatch:
    d = normalize_device(m.group("dev"))
    return MessageMatch("indices_device", (d,), argument="indices", operator="index", expected=d)


def _m_value_device(m: re.Match[str]) -> MessageMatch:
    a, b = normalize_device(m.group("a")), normalize_device(m.group("b"))
    arg = m.group("what")
    return MessageMatch(
        "value_device",
        _dedup([a, b]),
        argument=arg or None,
        operator="index_put_" if arg == "value" else None,
        argument_device=b,
        expected=a,
    )


def _m_tensor_on_cpu(m: re.Match[str]) -> MessageMatch:
    return MessageMatch(
        "tensor_on_cpu",
        ("cpu", "cuda"),
        argument=m.group("arg"),
        operator=m.group("op"),
        argument_device="cpu",
        expected="cuda",
    )


def _m_same_gpu(m: re.Match[str]) -> MessageMatch:
    i, j = normalize_device(m.group("i")), normalize_device(m.group("j"))
    return MessageMatch(
        "same_gpu",
        _dedup([i, j]),
        argument=m.group("arg"),
        operator=m.group("op"),
        argument_device=i,
        expected=j,
    )


def _m_device_type_arg(m: re.Match[str]) -> MessageMatch:
    a, b = normalize_device(m.group("want")), normalize_device(m.group("got"))
    return MessageMatch(
        "device_type_arg",
        _dedup([a, b]),
        argument=m.group("arg"),
        operator=m.group("op"),
        argument_device=b,
        expected=a,
    )


def _m_backend_arg(m: re.Match[str]) -> MessageMatch:
    a, b = normalize_device(m.group("want")), normalize_device(m.group("got"))
    return MessageMatch(
        "backend_arg",
        _dedup([a, b]),
        argument=m.group("arg"),
        operator=m.group("op"),
        argument_device=b,
        expected=a,
    )


def _m_device_type_check(m: re.Match[str]) -> MessageMatch:
    a, b = normalize_device(m.group("want")), normalize_device(m.group("got"))
    return MessageMatch(
        "device_type_check",
        _dedup([a, b]),
        operator=m.group("op"),
        argument_device=b,
        expected=a,
    )


def _m_rnn(m: re.Match[str]) -> MessageMatch:
    which = m.group("which").lower()
    a, b = normalize_device(m.group("a")), normalize_device(m.group("b"))
    return MessageMatch(
        f"rnn_{'hidden' if which == 'hidden' else 'params'}",
        _dedup([a, b]),
        argument=which,
        argument_device=b,
        expected=a,
    )


def _m_data_parallel(m: re.Match[str]) -> MessageMatch:
    d, e = normalize_device(m.group("d")), normalize_device(m.group("e"))
    return MessageMatch(
        "data_parallel",
        _dedup([d, e]),
        operator="DataParallel",
        argument_device=e,
        expected=d,
    )


def _m_meta_copy(m: re.Match[str]) -> MessageMatch:
    return MessageMatch("meta_copy", ("meta",), argument_device="meta")


def _m_grad_device(m: re.Match[str]) -> MessageMatch:
    a, b = normalize_device(m.group("grad")), normalize_device(m.group("param"))
    return MessageMatch(
        "grad_device", _dedup([a, b]), argument="grad", argument_device=a, expected=b
    )


def _m_fake_propagation(m: re.Match[str]) -> MessageMatch:
    a, b = normalize_device(m.group("a")), normalize_device(m.group("b"))
    return MessageMatch("fake_tensor_propagation", _dedup([a, b]), operator=m.group("op"))


def _m_generator(m: re.Match[str]) -> MessageMatch:
    a, b = normalize_device(m.group("want")), normalize_device(m.group("got"))
    return MessageMatch(
        "generator_device",
        _dedup([a, b]),
        argument="generator",
        argument_device=b,
        expected=a,
    )


def _m_gradient(m: re.Match[str]) -> MessageMatch:
    a, b = normalize_device(m.group("a")), normalize_device(m.group("b"))
    return MessageMatch("gradient_devices", _dedup([a, b]), operator="gradient")


#: (pattern, handler) in priority order: the specific templates first, the generic last.
_PATTERNS: list[tuple[re.Pattern[str], _Handler]] = [
    (
        # TensorIterator / FakeTensor; the suffixed form is adaption.cpp before 2.x renamed
        # it, including the misspelled "arugment" some 1.x releases shipped.
        re.compile(
            r"Expected all tensors to be on the same device, but found at least two devices, "
            + _DEV
            + r" and "
            + _DEV
            + r"!?"
            + r"(?:\s*\(when checking ar(?:gu|ug)ment for argument (?P<arg>[\w.]+) in method "
            r"(?P<method>[\w.:<>]+)\))?"
        ),
        _m_found_two,
    ),
    (
        re.compile(
            r"Expected all tensors to be on the same device, but got (?P<arg>[\w.]+) is on "
            r"(?P<dev>[\w]+(?::\d+)?), different from other tensors on (?P<other>[\w]+(?::\d+)?)"
            r"(?:\s*\(when checking argument in method (?P<method>[\w.:<>]+)\))?"
        ),
        _m_different_from_other,
    ),
    (
        re.compile(
            r"Expected all tensors to be on the same device\.\s*(?P<op>\w+):? expected "
            r"'(?P<arg>\w+)' to be (?:an? )?(?P<want>\w+) tensor, but got (?:an? )?tensor on "
            + _DEV.replace("(", "(?P<got>", 1)
        ),
        _m_expected_cpu_tensor,
    ),
    (
        re.compile(r"Tensor on device " + _DEV + r" is not on the expected device " + _DEV),
        _m_not_on_expected,
    ),
    (
        re.compile(
            r"Input type \((?P<input>[^()]+)\) and (?P<which>weight|bias) type "
            r"\((?P<weight>[^()]+)\) should be the same"
        ),
        _m_conv_type,
    ),
    (
        re.compile(
            r"indices should be either on \w+ or on the same device as the indexed tensor "
            r"\((?P<dev>[\w]+(?::\d+)?)\)"
        ),
        _m_indices,
    ),
    (
        re.compile(
            r"Input and (?P<which>parameter|hidden) tensors are not at the same device, found "
            r"input tensor at (?P<a>[\w]+(?::\d+)?) and (?:parameter|hidden) tensor at "
            r"(?P<b>[\w]+(?::\d+)?)"
        ),
        _m_rnn,
    ),
    (
        re.compile(
            r"module must have its parameters and buffers on device (?P<d>[\w]+(?::\d+)?) "
            r"\(device_ids\[0\]\) but found one of them on device: (?P<e>[\w]+(?::\d+)?)"
        ),
        _m_data_parallel,
    ),
    (re.compile(r"Cannot copy out of meta tensor; no data!"), _m_meta_copy),
    (
        re.compile(
            r"Tensor for (?:argument #\d+ )?'(?P<arg>[\w.]+)' is on CPU, .*?but expected "
            r"(?:it|them) to be on GPU \(while checking arguments for (?P<op>[\w.:]+)\)",
            re.DOTALL,
        ),
        _m_tensor_on_cpu,
    ),
    (
        re.compile(
            r"Expected tensor for (?:argument #\d+ )?'(?P<arg>[\w.]+)' to have the same device "
            r"as tensor for (?:argument #\d+ )?'[\w.]+'; but device (?P<i>\d+) does not equal "
            r"(?P<j>\d+)(?: \(while checking arguments for (?P<op>[\w.:]+)\))?"
        ),
        _m_same_gpu,
    ),
    (
        re.compile(
            r"Expected object of device type (?P<want>\w+) but got device type (?P<got>\w+) "
            r"for argument #\d+ '(?P<arg>[\w.]+)'(?: in call to (?P<op>[\w.:]+))?"
        ),
        _m_device_type_arg,
    ),
    (
        re.compile(
            r"Expected object of backend (?P<want>\w+) but got backend (?P<got>\w+) "
            r"for argument #\d+ '(?P<arg>[\w.]+)'(?: in call to (?P<op>[\w.:]+))?"
        ),
        _m_backend_arg,
    ),
    (
        re.compile(
            r"Expected tensor to have (?P<want>\w+) DeviceType, but got tensor with "
            r"(?P<got>\w+) DeviceType(?: \(while checking arguments for (?P<op>[\w.:]+)\))?"
        ),
        _m_device_type_check,
    ),
    (
        re.compile(
            r"expected device (?P<a>[\w]+(?::\d+)?) but got device (?P<b>[\w]+(?::\d+)?)"
            r"(?: for (?P<what>\w+) tensor)?"
        ),
        _m_value_device,
    ),
    (
        re.compile(
            r"attempting to assign a gradient with device type '(?P<grad>\w+)' to a tensor "
            r"with device type '(?P<param>\w+)'"
        ),
        _m_grad_device,
    ),
    (
        re.compile(
            r"Unhandled FakeTensor Device Propagation for (?P<op>[\w.]+), found two different "
            r"devices (?P<a>[\w]+(?::\d+)?), (?P<b>[\w]+(?::\d+)?)"
        ),
        _m_fake_propagation,
    ),
    (
        # randperm/DataLoader shuffling with a generator on another device
        re.compile(
            r"Expected a '(?P<want>\w+)' device type for generator but found '(?P<got>\w+)'"
        ),
        _m_generator,
    ),
    (
        re.compile(
            r"torch\.gradient expected each tensor to be on the same device, but got devices "
            r"(?P<a>[\w]+(?::\d+)?) and (?P<b>[\w]+(?::\d+)?)"
        ),
        _m_gradient,
    ),
]


def parse_message(text: str) -> MessageMatch | None:
    """Recognise a device-mismatch error message; ``None`` for anything else.

    Searches (not matches) so prefixes such as torch.compile's wrapping text do not hide it.
    """
    try:
        if not isinstance(text, str) or not text:
            return None
        text = text[:20_000]
        for pattern, handler in _PATTERNS:
            m = pattern.search(text)
            if m:
                return handler(m)
        if _GENERIC_HINT.search(text):
            devices = _dedup(normalize_device(m.group(0)) for m in _DEVICE_TOKEN.finditer(text))
            return MessageMatch("generic", devices)
    except Exception:
        return None
    return None


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class Culprit:
    """One object involved in the mismatch.

    ``where`` is ``"cell"`` (a name the cell reads, looked up in the namespace) or
    ``"frame <funcname>"`` (a local of a user function on the traceback). ``bytes`` is what
    the object occupies (meta: 0); ``needed_bytes`` what it would occupy on a real device.
    ``alias`` is the namespace name bound to the same object, for frame locals.
    """

    name: str
    where: str
    kind: str
    devices: tuple[str, ...]
    bytes: int
    needed_bytes: int = 0
    bytes_by_device: dict[str, int] = field(default_factory=dict)
    dtype: str | None = None
    alias: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "where": self.where,
            "kind": self.kind,
            "devices": list(self.devices),
            "bytes": self.bytes,
            "needed_bytes": self.needed_bytes,
            "bytes_by_device": dict(self.bytes_by_device),
            "dtype": self.dtype,
            "alias": self.alias,
        }


@dataclass(frozen=True)
class FixLine:
    """One statement of the fix and where it goes: ``"cell"``, ``"loop"`` (top of the cell's
    ``for`` body) or ``"frame <funcname>"`` (inside that function)."""

    where: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return {"where": self.where, "source": self.source}


@dataclass
class Diagnosis:
    """Everything :func:`diagnose` found; ``text()`` and ``_repr_html_()`` render it."""

    message: str
    kind: str
    devices: tuple[str, ...]
    argument: str | None
    operator: str | None
    culprits: list[Culprit]
    fix: str
    note: str
    target: str | None
    fix_lines: list[FixLine] = field(default_factory=list)
    reason: str = ""
    match: MessageMatch | None = None

    # -- rendering -------------------------------------------------------------------------

    def _headline(self) -> str:
        # ``Input type (double) and bias type (float)``: one device, two dtypes.
        if self.kind == "conv_type" and len(self.devices) < 2:
            return "Dtype mismatch (same device)"
        return "Device mismatch"

    def summary(self) -> str:
        """The first line: who is on which device."""
        head = self._headline()
        shown = self.culprits[:6]
        if shown:
            parts = [_describe_culprit(c) for c in shown]
            more = len(self.culprits) - len(shown)
            tail = f"; and {more} more" if more > 0 else ""
            return f"{head}: " + "; ".join(parts) + tail + "."
        bits = []
        if self.devices:
            bits.append("the operation mixed " + " and ".join(self.devices) + " tensors")
        else:
            bits.append("the operation mixed tensors of different devices or types")
        if self.argument:
            where = f" in {self.operator}" if self.operator else ""
            bits.append(f"(argument '{self.argument}'{where})")
        elif self.operator:
            bits.append(f"(in {self.operator})")
        return f"{head}: " + " ".join(bits) + "."

    def fix_text_lines(self) -> list[str]:
        """``Fix: ...`` lines, one per place the fix goes."""
        if not self.fix_lines:
            return [f"Fix: {self.fix}"] if self.fix else []
        groups: dict[str, list[str]] = {}
        for line in self.fix_lines:
            groups.setdefault(line.where, []).append(line.source)
        out = []
        for i, (where, sources) in enumerate(groups.items()):
            label = _place_label(where)
            src = "; ".join(sources)
            reason = f"   # {self.reason}" if self.reason and i == 0 and "#" not in src else ""
            out.append(f"Fix{label}: {src}{reason}")
        return out

    def text(self) -> str:
        lines = [self.summary(), *self.fix_text_lines()]
        if self.note:
            lines.append(f"Note: {self.note}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        e = html.escape
        items = []
        for c in self.culprits:
            devs = ", ".join(f"<code>{e(d)}</code>" for d in c.devices) or "no device"
            items.append(
                f"<li><code>{e(c.alias or c.name)}</code> ({e(c.kind)}, "
                f"{e(format_bytes(_shown_bytes(c)))}{e(_culprit_where(c))}) on {devs}</li>"
            )
        culprits = f"<ul>{''.join(items)}</ul>" if items else f"<p>{e(self.summary())}</p>"
        fixes = "".join(f"<pre>{e(line)}</pre>" for line in self.fix_text_lines())
        note = f"<p><b>Note:</b> {e(self.note)}</p>" if self.note else ""
        return (
            '<div class="torchdevice-magic-diagnosis">'
            f"<p><b>{e(self._headline())}</b> "
            f"<small>({e(self.kind)})</small></p>"
            f"{culprits}{fixes}{note}"
            f"<details><summary>Original message</summary><pre>{e(self.message)}</pre>"
            "</details></div>"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "kind": self.kind,
            "devices": list(self.devices),
            "argument": self.argument,
            "operator": self.operator,
            "culprits": [c.to_dict() for c in self.culprits],
            "fix": self.fix,
            "fix_lines": [f.to_dict() for f in self.fix_lines],
            "note": self.note,
            "target": self.target,
            "reason": self.reason,
            "match": self.match.to_dict() if self.match is not None else None,
        }


def _shown_bytes(c: Culprit) -> int:
    # Meta objects occupy nothing; show what they would need, which is what matters when
    # deciding which side to move.
    return c.needed_bytes or c.bytes


def _culprit_where(c: Culprit) -> str:
    """``""`` for the cell, ``", in train()"`` for a frame, ``", self in forward()"`` when a
    frame local is also a namespace name (shown under that name)."""
    if c.where == "cell":
        return ""
    func = c.where.removeprefix("frame ")
    return f", {c.name} in {func}()" if c.alias else f", in {func}()"


def _describe_culprit(c: Culprit) -> str:
    devs = " and ".join(c.devices) if c.devices else "no device"
    size = format_bytes(_shown_bytes(c))
    return f"{c.alias or c.name} ({c.kind}, {size}{_culprit_where(c)}) is on {devs}"


def _place_label(where: str) -> str:
    if where == "cell":
        return ""
    if where == "loop":
        return " (first line inside the for loop)"
    if where.startswith("frame "):
        return f" (inside {where.removeprefix('frame ')}())"
    return f" ({where})"


# --------------------------------------------------------------------------------------------
# Inspecting objects (torch only when already imported)
# --------------------------------------------------------------------------------------------

_MAX_CONTAINER = 1000
_MAX_MODULE_TENSORS = 200_000


def _torch() -> Any:
    return sys.modules.get("torch")


@dataclass
class _Info:
    """What we learned about one object (no reference to it is kept after analysis)."""

    kind: str
    category: str  # "tensor" | "module" | "optimizer" | "container"
    by_device: dict[str, int]  # needed bytes per device
    actual: int
    dtype: str | None = None
    trainable_leaf: bool = False
    is_parameter: bool = False
    container: str | None = None  # "list" | "tuple" | "dict"
    all_tensors: bool = True
    meta_params: bool = False
    #: bytes of model parameters per device (module: its own; optimizer: its params'), which
    #: decide where things should go: data follows the model, optimizer state its parameters
    anchor: dict[str, int] = field(default_factory=dict)
    member_ids: frozenset[int] = frozenset()  # ids of a module's parameters and buffers

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(sorted(self.by_device, key=device_sort_key))

    @property
    def needed(self) -> int:
        return sum(self.by_device.values())


def _tensor_sizes(t: Any) -> tuple[str, int, int]:
    """(device, actual bytes, needed bytes) of a tensor; never touches its data."""
    device = str(t.device)
    numel_bytes = 0
    try:
        numel_bytes = int(t.numel()) * int(t.element_size())
    except Exception:
        numel_bytes = 0
    if device == "meta":
        return device, 0, numel_bytes
    try:
        actual = int(t.untyped_storage().nbytes())
    except Exception:  # sparse, nested, some subclasses
        actual = numel_bytes
    return device, actual, actual


def _is_tensor(obj: Any, torch: Any) -> bool:
    try:
        return issubclass(type(obj), torch.Tensor)
    except Exception:
        return False


def _inspect_tensor(t: Any, torch: Any) -> _Info | None:
    try:
        device, actual, needed = _tensor_sizes(t)
    except Exception:
        return None
    dtype = None
    trainable_leaf = False
    is_param = False
    with contextlib.suppress(Exception):
        dtype = str(t.dtype).removeprefix("torch.")
    try:
        trainable_leaf = bool(t.requires_grad) and bool(t.is_leaf)
        is_param = issubclass(type(t), torch.nn.Parameter)
    except Exception:
        pass
    try:
        kind = type(t).__name__
    except Exception:
        kind = "Tensor"
    return _Info(
        kind=kind,
        category="tensor",
        by_device={device: needed},
        actual=actual,
        dtype=dtype,
        trainable_leaf=trainable_leaf,
        is_parameter=is_param,
    )


def _iter_module_tensors(module: Any) -> Iterator[Any]:
    torch = _torch()
    if torch is None:
        return
    torch_module_cls = torch.nn.Module
    n = 0
    for getter in ("parameters", "buffers"):
        try:
            # torch's own method, so an override on a user subclass cannot run here
            it = getattr(torch_module_cls, getter)(module)
        except Exception:
            continue
        try:
            for t in it:
                n += 1
                if n > _MAX_MODULE_TENSORS:
                    return
                yield t
        except Exception:
            continue


def _inspect_module(module: Any, torch: Any) -> _Info | None:
    by_device: dict[str, int] = {}
    actual = 0
    seen: set[Any] = set()
    member_ids: set[int] = set()
    meta_params = False
    for t in _iter_module_tensors(module):
        member_ids.add(id(t))
        try:
            device, act, needed = _tensor_sizes(t)
            # Count each storage once (tied weights share one); meta tensors have no storage.
            key: Any = (device, int(t.untyped_storage().data_ptr())) if device != "meta" else None
            if key is None or key[1] == 0:
                key = ("id", id(t))
        except Exception:
            continue
        if key in seen:
            continue
        seen.add(key)
        by_device[device] = by_device.get(device, 0) + needed
        actual += act
        if device == "meta":
            meta_params = True
    try:
        kind = type(module).__name__
    except Exception:
        kind = "Module"
    return _Info(
        kind=kind,
        category="module",
        by_device=by_device,
        actual=actual,
        meta_params=meta_params,
        anchor=dict(by_device),
        member_ids=frozenset(member_ids),
    )


def _inspect_optimizer(opt: Any, torch: Any) -> _Info | None:
    by_device: dict[str, int] = {}
    anchor: dict[str, int] = {}
    actual = 0
    # Parameters: devices only (their bytes belong to the model, not to the optimizer).
    try:
        groups = opt.param_groups
        if type(groups) is list:
            for group in groups[:_MAX_CONTAINER]:
                params = group.get("params", []) if type(group) is dict else []
                if type(params) is not list:
                    continue
                for p in params[:_MAX_MODULE_TENSORS]:
                    if _is_tensor(p, torch):
                        device, _, needed = _tensor_sizes(p)
                        by_device.setdefault(device, 0)
                        anchor[device] = anchor.get(device, 0) + needed
    except Exception:
        pass
    try:
        state = opt.state
        if isinstance(state, dict):
            for n, per_param in enumerate(dict.values(state)):
                if n > _MAX_MODULE_TENSORS or not isinstance(per_param, dict):
                    break
                for key, value in dict.items(per_param):
                    # 0-dim ``step`` counters live on the CPU on purpose; they are not a mismatch.
                    if key == "step" or not _is_tensor(value, torch):
                        continue
                    device, act, needed = _tensor_sizes(value)
                    by_device[device] = by_device.get(device, 0) + needed
                    actual += act
    except Exception:
        pass
    try:
        kind = type(opt).__name__
    except Exception:
        kind = "Optimizer"
    return _Info(kind=kind, category="optimizer", by_device=by_device, actual=actual, anchor=anchor)


def _container_items(obj: Any) -> list[Any] | None:
    # The base classes' own iteration, so an overridden ``__iter__``/``values`` cannot run.
    try:
        if isinstance(obj, dict):
            return list(dict.values(obj))[:_MAX_CONTAINER]
        if isinstance(obj, list):
            return list.__getitem__(obj, slice(0, _MAX_CONTAINER))
        if isinstance(obj, tuple):
            return list(tuple.__getitem__(obj, slice(0, _MAX_CONTAINER)))
    except Exception:
        return None
    return None


def _inspect_container(obj: Any, torch: Any) -> _Info | None:
    items = _container_items(obj)
    if not items:
        return None
    by_device: dict[str, int] = {}
    actual = 0
    count = 0
    all_tensors = True
    for item in items:
        if not _is_tensor(item, torch):
            all_tensors = False
            continue
        info = _inspect_tensor(item, torch)
        if info is None:
            continue
        count += 1
        for dev, n in info.by_device.items():
            by_device[dev] = by_device.get(dev, 0) + n
        actual += info.actual
    if count == 0:
        return None
    container = "dict" if isinstance(obj, dict) else "list" if isinstance(obj, list) else "tuple"
    noun = "tensor" if count == 1 else "tensors"
    return _Info(
        kind=f"{container} of {count} {noun}",
        category="container",
        by_device=by_device,
        actual=actual,
        container=container,
        all_tensors=all_tensors,
    )


def _inspect(obj: Any, torch: Any) -> _Info | None:
    """Device facts about a tensor / module / optimizer / shallow container, else None."""
    try:
        cls = type(obj)
        if issubclass(cls, torch.Tensor):
            return _inspect_tensor(obj, torch)
        if issubclass(cls, torch.nn.Module):
            return _inspect_module(obj, torch)
        if issubclass(cls, torch.optim.Optimizer):
            return _inspect_optimizer(obj, torch)
        packed = getattr(getattr(torch.nn.utils, "rnn", None), "PackedSequence", None)
        if packed is not None and issubclass(cls, packed):
            # Its ``batch_sizes`` always live on the CPU; the data decides the device.
            info = _inspect_tensor(tuple.__getitem__(obj, 0), torch)
            if info is not None:
                info.kind = "PackedSequence"
            return info
        if issubclass(cls, (list, tuple, dict)):
            return _inspect_container(obj, torch)
    except Exception:
        return None
    return None


# --------------------------------------------------------------------------------------------
# Finding candidates: the cell's names and the traceback's user frames
# --------------------------------------------------------------------------------------------


@dataclass
class _Candidate:
    name: str
    where: str  # "cell" | "frame <func>"
    obj_id: int
    info: _Info
    order: int
    alias: str | None = None
    loop_var: bool = False
    module_ids: frozenset[int] = frozenset()  # ids of submodules, for modules
    element_ids: frozenset[int] = frozenset()  # ids of tensor items, for containers
    covered: bool = False  # a container whose failing item is itself a candidate
    parent_chain: str | None = None


_MAGIC_LINE = re.compile(r"^(\s*)(%%?|!)\s*\w*\s*")


def _parse_cell(cell: str) -> ast.Module | None:
    try:
        return ast.parse(cell)
    except Exception:
        pass
    # IPython syntax: drop a leading ``%%magic`` line, turn ``%time expr`` into ``expr`` and
    # shell escapes into ``pass``, then try once more.
    try:
        lines = cell.splitlines()
        if lines and lines[0].lstrip().startswith("%%"):
            lines = lines[1:]
        fixed = []
        for line in lines:
            stripped = line.lstrip()
            if stripped.startswith("!"):
                fixed.append(line[: len(line) - len(stripped)] + "pass")
            elif stripped.startswith("%"):
                rest = _MAGIC_LINE.sub(r"\1", line)
                fixed.append(rest if rest.strip() else line[: len(line) - len(stripped)] + "pass")
            else:
                fixed.append(line)
        return ast.parse("\n".join(fixed))
    except Exception:
        return None


def _chain(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _cell_reads(tree: ast.Module) -> tuple[list[str], set[str]]:
    """Names and attribute chains the cell reads (source order), and its for-loop targets."""
    found: dict[str, tuple[int, int]] = {}
    loop_vars: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            for target in ast.walk(node.target):
                if isinstance(target, ast.Name):
                    loop_vars.add(target.id)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            chain = _chain(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            chain = node.id
        else:
            continue
        if chain is None:
            continue
        pos = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        if chain not in found or pos < found[chain]:
            found[chain] = pos
    names = sorted(found, key=lambda k: (found[k], k.count(".")))
    return names[:300], loop_vars


def _resolve(namespace: Mapping[str, Any], chain: str, torch: Any) -> tuple[bool, Any]:
    """Look ``a.b.c`` up with plain getattr, as the cell itself did; never through a tensor
    (``x.T``, ``x.grad``, ``x.data`` are views or parts of ``x``, which is listed itself)."""
    head, *rest = chain.split(".")
    try:
        if head not in namespace:
            return False, None
        obj = namespace[head]
    except Exception:
        return False, None
    for attr in rest:
        if torch is not None and _is_tensor(obj, torch):
            return False, None
        try:
            obj = getattr(obj, attr)
        except Exception:
            return False, None
    return True, obj


_STD_DIRS: tuple[str, ...] | None = None
_STD_DIRS_WITH_TORCH = False


def _library_dirs() -> tuple[str, ...]:
    """Directories whose frames are library code, not the user's."""
    global _STD_DIRS, _STD_DIRS_WITH_TORCH
    with_torch = _torch() is not None
    if _STD_DIRS is not None and with_torch == _STD_DIRS_WITH_TORCH:
        return _STD_DIRS
    dirs: set[str] = set()
    try:
        paths = sysconfig.get_paths()
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            if paths.get(key):
                dirs.add(paths[key])
    except Exception:
        pass
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        dirs.add(os.path.join(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}"))
    torch = _torch()
    try:
        if torch is not None and getattr(torch, "__file__", None):
            dirs.add(os.path.dirname(torch.__file__))
    except Exception:
        pass
    dirs.add(os.path.dirname(os.path.abspath(__file__)))
    expanded: set[str] = set()
    for d in dirs:
        for variant in (d, os.path.realpath(d)):
            expanded.add(os.path.normcase(os.path.abspath(variant)).rstrip(os.sep) + os.sep)
    _STD_DIRS = tuple(sorted(expanded))
    _STD_DIRS_WITH_TORCH = with_torch  # recompute once torch (maybe a source checkout) arrives
    return _STD_DIRS


def is_user_filename(filename: str) -> bool:
    """True for the user's code: notebook cells and their own files, not torch/stdlib/libs."""
    if not filename:
        return False
    if filename.startswith("<"):
        # ``<ipython-input-3-...>`` and ``<string>`` are user code; ``<frozen ...>`` is not.
        return not filename.startswith(("<frozen", "<__array_function__"))
    norm = os.path.normcase(os.path.abspath(filename))
    parts = norm.split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return False
    return not any(norm.startswith(d) for d in _library_dirs())


def _user_frames(tb: Any, limit: int = 3) -> list[Any]:
    """The innermost ``limit`` user function frames (outermost first); module-level skipped."""
    frames: list[Any] = []
    steps = 0
    while tb is not None and steps < 10_000:
        steps += 1
        try:
            frame = tb.tb_frame
            code = frame.f_code
            if is_user_filename(code.co_filename) and code.co_name != "<module>":
                frames.append(frame)
            tb = tb.tb_next
        except Exception:
            break
    return frames[-limit:]


def _frame_argument_names(code: Any) -> set[str]:
    try:
        n = code.co_argcount + code.co_kwonlyargcount
        return set(code.co_varnames[:n])
    except Exception:
        return set()


# --------------------------------------------------------------------------------------------
# The fix
# --------------------------------------------------------------------------------------------


def _same_device(a: str, b: str) -> bool:
    if a == b:
        return True
    ta, _, ia = a.partition(":")
    tb, _, ib = b.partition(":")
    return ta == tb and (not ia or not ib)


def _on_target(devices: tuple[str, ...], target: str) -> bool:
    return bool(devices) and all(_same_device(d, target) for d in devices)


def _relevant(c: _Candidate, devices: tuple[str, ...]) -> bool:
    if not c.info.by_device:
        return False
    if not devices:
        return True
    return any(_same_device(d, m) for d in c.info.by_device for m in devices)


def _move_source(c: _Candidate, target: str | None, dtype: str | None) -> str:
    """The statement that moves one candidate to ``target`` and/or converts it to ``dtype``."""
    name = c.alias or c.name
    dev = '"' + target.replace('"', "") + '"' if target else None
    to_args = ", ".join(a for a in (dev, f"torch.{dtype}" if dtype else None) if a)
    if not to_args:
        return ""
    info = c.info
    if info.category == "module":
        if dev is None:
            return ""
        if info.meta_params and target != "meta":
            # ``.to()`` on meta parameters raises "Cannot copy out of meta tensor"; allocate
            # fresh storage instead (weights must then be reloaded, see the note).
            return f"{name}.to_empty(device={dev})"
        return f"{name}.to({dev})"  # modules move in place: Parameters keep their identity
    if info.category == "optimizer":
        if dev is None:
            return ""
        return (
            f"for s in {name}.state.values(): s.update({{k: v.to({dev}) for k, v in s.items() "
            f'if torch.is_tensor(v) and k != "step"}})'
        )
    if info.category == "container":
        guard = "" if info.all_tensors else " if torch.is_tensor(t) else t"
        if info.container == "dict":
            return f"{name} = {{k: t.to({to_args}){guard} for k, t in {name}.items()}}"
        if info.container == "tuple":
            return f"{name} = tuple(t.to({to_args}){guard} for t in {name})"
        return f"{name} = [t.to({to_args}){guard} for t in {name}]"
    # A tensor.
    if info.trainable_leaf:
        # ``w.to()`` on a trainable leaf returns a non-leaf copy whose ``.grad`` stays None;
        # keep it a leaf (and a Parameter if it was one).
        if info.is_parameter:
            return f"{name} = torch.nn.Parameter({name}.detach().to({to_args}))"
        return f"{name} = {name}.detach().to({to_args}).requires_grad_()"
    return f"{name} = {name}.to({to_args})"


def _choose_target(cands: list[_Candidate], match: MessageMatch) -> tuple[str | None, str]:
    """Where the bigger side is: (device, reason)."""
    # The side holding model parameters is the big thing: a model is moved once and on
    # purpose, batches every step, and optimizer state follows its parameters. Between two
    # parts of a split model, or between plain tensors, bytes decide.
    totals: dict[str, int] = {}
    stateful: dict[str, int] = {}
    for c in cands:
        for dev, n in c.info.by_device.items():
            totals[dev] = totals.get(dev, 0) + n
        for dev, n in c.info.anchor.items():
            stateful[dev] = stateful.get(dev, 0) + n + 1  # +1: a parameterless anchor counts
    if len(totals) >= 2:
        best = max(
            totals,
            key=lambda d: (stateful.get(d, 0), totals[d], d != "cpu", d),
        )
        return best, "move the small thing to where the big thing is"
    if match.expected:
        return match.expected, "move it to the device the operation expected"
    non_cpu = [d for d in match.devices if d != "cpu"]
    if totals and match.devices:
        # Only one side is known: move it to the other device named in the message.
        (only,) = totals
        others = [d for d in match.devices if not _same_device(d, only)]
        if others:
            return others[0], "move it to the other device in the message"
    if non_cpu:
        return non_cpu[0], "move everything to one device"
    if match.devices:
        return match.devices[0], "move everything to one device"
    return None, ""


def _normalize_target(target: str) -> str:
    raw = str(target).strip()
    torch = _torch()
    if torch is not None:
        try:
            return str(torch.device(raw.lower()))
        except Exception:
            pass
    return normalize_device(raw)


def _cell_to_target(tree: ast.Module | None) -> str | None:
    """For ``Cannot copy out of meta``: the device the cell's ``.to(...)`` asked for."""
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr = node.func.attr
        if attr in ("cuda", "cpu") and not node.args:
            return attr
        if attr not in ("to", "to_empty"):
            continue
        values = list(node.args[:1]) + [k.value for k in node.keywords if k.arg == "device"]
        for value in values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
            if (
                isinstance(value, ast.Call)
                and value.args
                and isinstance(value.args[0], ast.Constant)
                and isinstance(value.args[0].value, str)
            ):
                return value.args[0].value
    return None


# --------------------------------------------------------------------------------------------
# diagnose()
# --------------------------------------------------------------------------------------------


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo and len(chain) < 20:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        chain.append(e)
        for nxt in (getattr(e, "__cause__", None), getattr(e, "__context__", None)):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    return chain


def _message_of(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        try:
            text = str(exc.args[0]) if exc.args else ""
        except Exception:
            text = ""
    return text


def diagnose(
    exc: BaseException,
    namespace: Mapping[str, Any] | None = None,
    cell: str | None = None,
    *,
    target: str | None = None,
) -> Diagnosis | None:
    """Explain a device-mismatch error, or return ``None`` if ``exc`` is not one.

    ``namespace`` is the user's namespace (IPython's ``user_ns``), ``cell`` the failing cell's
    source, ``target`` a device the user asked for (``%%devicecheck -d cuda``): then the fix
    moves everything there instead of moving the smaller side. Never raises.
    """
    try:
        found: tuple[BaseException, str, MessageMatch] | None = None
        chain = _exception_chain(exc)
        for e in chain:
            text = _message_of(e)
            match = parse_message(text)
            if match is not None:
                found = (e, text, match)
                break
        if found is None:
            return None
    except Exception:
        return None
    err, text, match = found
    try:
        return _diagnose(err, chain, text, match, namespace, cell, target)
    except Exception:
        # Analysis failed on something hostile: still say what the message means.
        try:
            return _diagnose(err, [], text, match, None, None, target)
        except Exception:
            return None


def _diagnose(
    err: BaseException,
    chain: list[BaseException],
    text: str,
    match: MessageMatch,
    namespace: Mapping[str, Any] | None,
    cell: str | None,
    target: str | None,
) -> Diagnosis:
    torch = _torch()
    tree = _parse_cell(cell) if isinstance(cell, str) and cell.strip() else None
    cands: list[_Candidate] = []
    if torch is not None:
        cands = _collect(err, chain, namespace, tree, torch)

    if match.kind == "indices_device":
        # the message names only the indexed tensor's device; the index is elsewhere
        relevant = [c for c in cands if c.info.by_device]
    else:
        relevant = [c for c in cands if _relevant(c, match.devices)]
    if not relevant and match.kind == "conv_type":
        relevant = [c for c in cands if c.info.by_device]

    user_target = _normalize_target(target) if target else None
    notes: list[str] = []
    reason = ""
    dtype: str | None = None
    if match.kind == "conv_type":
        dtype = match.dtypes[1] if match.dtype_mismatch and len(match.dtypes) == 2 else None

    # -- which device, and who moves ---------------------------------------------------------
    # ``Input type (double) and bias type (float)``: one device, two dtypes; nothing to move.
    conv_dtype_only = match.kind == "conv_type" and len(match.devices) < 2
    dest: str | None
    if user_target:
        dest, reason = user_target, f"move everything to {user_target}, as asked"
    elif match.kind == "data_parallel" and match.expected:
        dest, reason = match.expected, "DataParallel needs the module on device_ids[0]"
    elif match.kind in ("indices_device", "value_device") and match.expected:
        dest, reason = match.expected, "move the index tensor to the indexed tensor's device"
    elif match.kind == "meta_copy":
        asked = _cell_to_target(tree)
        dest = _normalize_target(asked) if asked else "cpu"
        reason = "meta tensors hold no data: allocate real storage, then load the weights"
    elif conv_dtype_only:
        dest, reason = None, "convert the input to the layer's dtype"
    else:
        dest, reason = _choose_target(relevant, match)

    movers: list[_Candidate] = []
    if match.kind == "meta_copy":
        movers = [c for c in relevant if c.info.category == "module" and c.info.meta_params]
        if not movers:
            movers = [c for c in relevant if "meta" in c.info.by_device]
    elif match.kind == "generator_device":
        movers = []  # a torch.Generator is the culprit; see _fallback_fix
    elif dest is not None:
        movers = [c for c in relevant if not _on_target(c.info.devices, dest) and not c.covered]
        if match.kind == "data_parallel" and not user_target:
            # DataParallel scatters the inputs itself; only the module must sit on device_ids[0].
            movers = [c for c in movers if c.info.category == "module"] or movers
        if match.kind == "indices_device" and not user_target:
            idx = [
                c
                for c in movers
                if c.info.category == "tensor" and (c.info.dtype or "").startswith(("int", "bool"))
            ]
            movers = idx or [c for c in movers if c.info.category == "tensor"] or movers
    in_dtype = match.dtypes[0] if match.kind == "conv_type" and match.dtypes else None
    if dtype and in_dtype:
        # The conv input also needs the layer's dtype, even where its device is right.
        for c in relevant:
            if c.info.category == "tensor" and c.info.dtype == in_dtype and c not in movers:
                movers.append(c)
        movers.sort(key=lambda c: c.order)

    fix_lines: list[FixLine] = []
    for c in movers:
        device_arg = dest if dest is not None and not _on_target(c.info.devices, dest) else None
        dtype_arg = dtype if c.info.category == "tensor" and c.info.dtype == in_dtype else None
        src = _move_source(c, device_arg, dtype_arg)
        if not src:
            continue
        place = c.where
        if c.alias:
            place = "cell"
        elif c.where == "cell" and c.loop_var:
            place = "loop"
        fix_lines.append(FixLine(place, src))

    if not fix_lines:
        fix_lines = [FixLine("cell", _fallback_fix(match, dest))]
    fix = "; ".join(line.source for line in fix_lines)

    # -- notes ---------------------------------------------------------------------------------
    meta_modules = [
        c for c in movers if c.info.category == "module" and c.info.meta_params and dest is not None
    ]
    if match.kind == "meta_copy" or (meta_modules and dest != "meta"):
        names = ", ".join(c.alias or c.name for c in meta_modules) or "the model"
        d = dest or "cuda"
        first = (meta_modules[0].alias or meta_modules[0].name) if meta_modules else "model"
        notes.append(
            f"{names} has parameters on the meta device, which hold no data, so .to() cannot "
            f'copy them: use {first}.to_empty(device="{d}") and then reload the weights, '
            f"e.g. {first}.load_state_dict(torch.load(PATH)) (to_empty leaves every "
            "parameter uninitialised)."
        )
    elif dest == "meta" and not user_target:
        meta_mods = [c for c in relevant if c.info.category == "module" and c.info.meta_params]
        if meta_mods:
            m0 = meta_mods[0].alias or meta_mods[0].name
            notes.append(
                "meta tensors hold no data: moving to meta makes the error go away but "
                f"computes nothing; to run for real, materialise {m0} on a real device with "
                f'{m0}.to_empty(device="cpu") and load its weights ({m0}.load_state_dict(...)).'
            )
        else:
            notes.append(
                "meta tensors hold no data: moving to meta makes the error go away but "
                "computes nothing; to run for real, create the meta tensors on a real device."
            )
    if match.kind == "data_parallel":
        dev = match.expected or "cuda:0"
        notes.append(
            "nn.DataParallel keeps the master copy of the module on device_ids[0] and "
            f"scatters from there; move the whole module there first: "
            f'model.to(f"cuda:{{model.device_ids[0]}}") (here: model.to("{dev}")).'
        )
    if match.kind == "conv_type":
        types = " and ".join(match.types)
        if match.dtype_mismatch and dtype:
            how = (
                f'.to("{dest}", torch.{dtype})'
                if len(match.devices) > 1 and dest
                else f".to(torch.{dtype})"
            )
            notes.append(
                f"this message also covers dtype mismatches: {types} differ in dtype "
                f"({match.dtypes[0]} vs {match.dtypes[1]}); convert the input with {how}."
            )
        else:
            notes.append(
                f"this message ({types}) is raised for device and for dtype mismatches; "
                "here the devices differ."
            )
    if match.kind == "rnn_hidden":
        notes.append(
            "the RNN's hidden state (h0, or the (h0, c0) tuple for an LSTM) must be on the "
            "input's device too: move it, or create it with device=x.device."
        )
    if match.kind == "generator_device":
        notes.append(
            f"a torch.Generator lives on one device; the operation (often a shuffling "
            f"DataLoader or randperm under torch.set_default_device) wanted one on "
            f'{match.expected}: pass generator=torch.Generator(device="{match.expected}").'
        )
    if match.kind == "indices_device":
        notes.append(
            "index tensors must be on the CPU or on the indexed tensor's device "
            f"({match.expected}): move the index tensor, not the data."
        )
    if any(c.info.trainable_leaf and c in movers for c in relevant):
        notes.append(
            "a trainable leaf tensor gets a new object when moved: rebuild any optimizer that "
            "holds the old one."
        )
    if not user_target and dest == "cpu" and match.kind not in ("meta_copy", "indices_device"):
        others = [d for c in relevant for d in c.info.by_device if d not in ("cpu", "meta")] + [
            d for d in match.devices if d not in ("cpu", "meta")
        ]
        if others:
            alt = "; ".join(
                src
                for c in relevant
                if not _on_target(c.info.devices, others[0])
                and (src := _move_source(c, others[0], None))
            )
            if alt:
                notes.append(f"to run on {others[0]} instead: {alt}")

    culprits = [_to_culprit(c) for c in relevant]
    return Diagnosis(
        message=text,
        kind=match.kind,
        devices=match.devices,
        argument=match.argument,
        operator=match.operator,
        culprits=culprits,
        fix=fix,
        note=" ".join(notes),
        target=dest,
        fix_lines=fix_lines,
        reason=reason,
        match=match,
    )


def _fallback_fix(match: MessageMatch, dest: str | None) -> str:
    """No culprit found: say what to do in a comment (still valid Python source)."""
    if match.kind == "meta_copy":
        return f'model.to_empty(device="{dest or "cpu"}")  # then load_state_dict(...)'
    if match.kind == "generator_device":
        dev = match.expected or dest or "cpu"
        return f'generator = torch.Generator(device="{dev}")  # pass generator=generator'
    if dest is None:
        if match.kind == "conv_type" and match.dtypes and match.dtypes[-1]:
            return f"x = x.to(torch.{match.dtypes[-1]})  # x: the input of the conv layer"
        return "# move every tensor and module of this operation to one device with .to(device)"
    what = f"the tensor passed as '{match.argument}'" if match.argument else "every input"
    op = f" of {match.operator}" if match.operator else ""
    return f'# move {what}{op} to "{dest}": x = x.to("{dest}")'


def _to_culprit(c: _Candidate) -> Culprit:
    return Culprit(
        name=c.name,
        where=c.where,
        kind=c.info.kind,
        devices=c.info.devices,
        bytes=c.info.actual,
        needed_bytes=c.info.needed,
        bytes_by_device=dict(c.info.by_device),
        dtype=c.info.dtype,
        alias=c.alias,
    )


def _submodule_ids(obj: Any, torch: Any) -> frozenset[int]:
    ids: set[int] = set()
    try:
        for n, m in enumerate(torch.nn.Module.modules(obj)):
            if n > 100_000:
                break
            ids.add(id(m))
    except Exception:
        pass
    return frozenset(ids)


def _collect(
    err: BaseException,
    chain: list[BaseException],
    namespace: Mapping[str, Any] | None,
    tree: ast.Module | None,
    torch: Any,
) -> list[_Candidate]:
    cands: list[_Candidate] = []
    by_id: dict[int, _Candidate] = {}
    # Objects a getattr chain produced may be temporaries; keep them alive until we are done
    # so that no id is reused by another object and mistaken for it.
    keepalive: list[Any] = []
    order = 0

    def add(name: str, where: str, obj: Any, *, loop_var: bool = False) -> None:
        nonlocal order
        if id(obj) in by_id or len(cands) >= 60:
            return  # the same object seen first in the cell or an outer frame wins
        keepalive.append(obj)
        info = _inspect(obj, torch)
        if info is None:
            return
        order += 1
        cand = _Candidate(name, where, id(obj), info, order, loop_var=loop_var)
        if info.category == "module":
            cand.module_ids = _submodule_ids(obj, torch)
        elif info.category == "container":
            items = _container_items(obj) or []
            cand.element_ids = frozenset(id(i) for i in items if _is_tensor(i, torch))
        cands.append(cand)
        by_id[id(obj)] = cand

    # (a) what the cell reads, looked up in the namespace
    if tree is not None and namespace is not None:
        names, loop_vars = _cell_reads(tree)
        for chain_name in names:
            ok, obj = _resolve(namespace, chain_name, torch)
            if ok:
                add(chain_name, "cell", obj, loop_var=chain_name in loop_vars)
            obj = None

    # (b) locals of the innermost user frames (outermost of them first, so a tensor that is
    # ``batch_X`` in train() is not renamed ``x`` from forward())
    frames: list[Any] = []
    try:
        for e in [err, *[c for c in chain if c is not err]]:
            frames = _user_frames(getattr(e, "__traceback__", None))
            if frames:
                break
        for frame in frames:
            try:
                code = frame.f_code
                func = code.co_name
                local_items = list(dict(frame.f_locals).items())
            except Exception:
                continue
            args = _frame_argument_names(code)
            self_obj = next((v for k, v in local_items if k == "self"), None)
            in_module_method = _is_module(self_obj, torch)
            for name, value in local_items[:2000]:
                if not isinstance(name, str) or name.startswith("."):
                    continue
                # Inside a Module method, non-argument locals are intermediates computed from
                # the arguments and parameters; fixing the inputs fixes them.
                if in_module_method and name not in args:
                    continue
                if _is_namespace_dict(value):
                    continue  # a globals()/user_ns passed around (exec), not data
                add(name, f"frame {func}", value)
            local_items = []
            self_obj = None
    finally:
        frames = []

    # Frame objects that the namespace also holds (e.g. ``self`` in forward() is ``model``):
    # name the fix after the namespace binding, which the user can run in a cell.
    frame_only = [c for c in cands if c.where != "cell"]
    if frame_only and namespace is not None:
        _find_aliases(frame_only, namespace, torch)

    # A submodule the cell also reaches through its parent (``model`` and ``model.fc``) adds
    # nothing if it is on the same devices: keep the parent.
    modules = [c for c in cands if c.info.category == "module"]
    drop: set[int] = set()
    for child in modules:
        for parent in modules:
            if (
                parent is not child
                and child.obj_id in parent.module_ids
                and set(child.info.by_device) <= set(parent.info.by_device)
                and parent.obj_id not in drop
            ):
                drop.add(child.obj_id)
                break
    # ``model.fc.weight`` next to ``model``: the parameter is part of the module's entry.
    member_of = [c for c in modules if c.obj_id not in drop]
    for c in cands:
        if c.info.category == "tensor" and any(
            c.obj_id in m.info.member_ids and set(c.info.by_device) <= set(m.info.by_device)
            for m in member_of
        ):
            drop.add(c.obj_id)
    # ``for batch_X in xs: model(batch_X)``: moving the batch where it is used beats moving
    # the whole list, so the list is listed but not moved.
    single_ids = {c.obj_id for c in cands if c.info.category == "tensor"}
    for c in cands:
        if c.element_ids & single_ids:
            c.covered = True
    keepalive.clear()
    return [c for c in cands if c.obj_id not in drop]


def _is_namespace_dict(value: Any) -> bool:
    try:
        return type(value) is dict and "__builtins__" in value
    except Exception:
        return False


def _is_module(obj: Any, torch: Any) -> bool:
    try:
        return issubclass(type(obj), torch.nn.Module)
    except Exception:
        return False


def _find_aliases(frame_only: list[_Candidate], namespace: Mapping[str, Any], torch: Any) -> None:
    wanted = {c.obj_id: c for c in frame_only}
    try:
        items = list(dict.items(namespace) if isinstance(namespace, dict) else namespace.items())
    except Exception:
        return
    for name, value in items[:20_000]:
        if not isinstance(name, str) or name.startswith("_"):
            continue
        hit = wanted.get(id(value))
        if hit is not None and hit.alias is None:
            hit.alias = name
        if _is_module(value, torch):
            try:
                for n, (sub_name, sub) in enumerate(torch.nn.Module.named_modules(value)):
                    if n > 100_000:
                        break
                    hit = wanted.get(id(sub))
                    if hit is not None and hit.alias is None and sub_name:
                        hit.alias = f"{name}.{sub_name}"
            except Exception:
                continue
