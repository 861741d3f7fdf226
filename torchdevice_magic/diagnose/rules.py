"""One rule per family of device errors: how PyTorch words it, what the words mean, how to fix it.

Pure: the standard library only. A :class:`Rule` is data -- message patterns whose named groups
say what each part of the message is -- plus the policy :mod:`.core` applies to it: which device
the fix moves things to, who moves, and what the user should know. :data:`RULES` is the one
table, specific templates first; :func:`parse_message` is "the first rule that matches".

Named groups in the patterns (all optional):

``got``   the device of the odd tensor (the argument, the out= tensor, the index, ...)
``want``  the device the operation expected (the common device, the indexed tensor's, ...)
``a``/``b`` two devices the message names without saying which is odd
``arg``   the argument's name;  ``op`` the operator or method

Texts come from PyTorch 1.x-2.14 sources: ``c10/core/TensorImpl``/``aten/src/ATen/native``
(``TORCH_CHECK`` texts, ``TensorIterator``, ``adaption.cpp``, ``TensorUtils.cpp``),
``torch/_prims_common``, ``torch/_refs``, ``torch/_meta_registrations.py``,
``torch/_subclasses/fake_tensor.py`` / ``fake_impls.py``, ``torch/nn``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "DEVICE_TYPES",
    "MessageMatch",
    "RULES",
    "Rule",
    "dtype_of",
    "normalize_device",
    "parse_message",
    "rule_for",
]

# --------------------------------------------------------------------------------------------
# Vocabulary: devices and dtypes as PyTorch prints them
# --------------------------------------------------------------------------------------------

#: Device-type names as ``c10::DeviceTypeName`` prints them (lower-cased), plus common aliases.
DEVICE_TYPES = (
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

#: ScalarType names in every spelling torch prints (``c10::toString``, ``typeid`` names from
#: ``scalar_type()`` in C++ messages, ``torch.dtype`` reprs, legacy tensor-type stems).
#: Keys are lower-case.
_DTYPE_SPELLINGS: dict[str, str] = {}


def _spell(dtype: str, *names: str) -> None:
    for name in names:
        _DTYPE_SPELLINGS[name.lower()] = dtype


_spell("float32", "float", "float32", "torch.float32", "torch.float", "Float", "single")
_spell("float64", "double", "float64", "torch.float64", "torch.double", "Double")
_spell("float16", "half", "c10::half", "at::half", "float16", "torch.float16", "torch.half")
_spell("bfloat16", "bfloat16", "c10::bfloat16", "at::bfloat16", "torch.bfloat16")
_spell(
    "int64",
    "long",
    "long int",
    "long long",
    "long long int",
    "int64_t",
    "int64",
    "torch.int64",
    "torch.long",
    "Long",
)
_spell("int32", "int", "int32_t", "int32", "torch.int32", "torch.int", "Int")
_spell("int16", "short", "short int", "int16_t", "int16", "torch.int16", "torch.short", "Short")
_spell("int8", "signed char", "char", "int8_t", "int8", "torch.int8", "Char")
_spell("uint8", "unsigned char", "uint8_t", "uint8", "torch.uint8", "Byte")
_spell("uint16", "unsigned short", "uint16_t", "uint16", "torch.uint16", "UInt16")
_spell("uint32", "unsigned int", "uint32_t", "uint32", "torch.uint32", "UInt32")
_spell("uint64", "unsigned long", "unsigned long int", "uint64_t", "uint64", "torch.uint64")
_spell("bool", "bool", "torch.bool", "Bool")
_spell("complex32", "c10::complex<c10::half>", "complex32", "torch.complex32", "ComplexHalf")
_spell("complex64", "c10::complex<float>", "complex64", "torch.complex64", "ComplexFloat")
_spell("complex128", "c10::complex<double>", "complex128", "torch.complex128", "ComplexDouble")
for _f8 in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
    _spell(_f8, _f8, f"torch.{_f8}", "c10::" + "".join(p.capitalize() for p in _f8.split("_")))
_spell("float8_e4m3fn", "c10::Float8_e4m3fn")
_spell("float8_e5m2", "c10::Float8_e5m2")
_spell("float4_e2m1fn_x2", "c10::Float4_e2m1fn_x2", "float4_e2m1fn_x2")
for _q in ("qint8", "quint8", "qint32", "quint4x2", "quint2x4"):
    _spell(_q, _q, f"c10::{_q}", f"torch.{_q}")
#: Legacy tensor-type stems (``torch.cuda.HalfTensor``, ``CUDAFloatType``).
_TYPE_STEMS = {
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


def dtype_of(name: str) -> str | None:
    """Any spelling of a dtype -> its torch name (``"long int"`` -> ``"int64"``), else None."""
    return _DTYPE_SPELLINGS.get(name.strip().lower())


#: A device in free text: a known type (``cuda``, ``cuda:1``) or any ``name:index`` (a
#: PrivateUse1 backend such as ``simdev:0``).
_DEVICE_TOKEN = re.compile(
    r"(?<![\w.])(?:(" + "|".join(DEVICE_TYPES) + r")(?::(\d+))?|[a-z_][a-z0-9_]*:\d+)(?![\w])",
    re.IGNORECASE,
)


def normalize_device(token: str) -> str:
    """``"CUDA"`` -> ``"cuda"``, ``"GPU"`` -> ``"cuda"``, ``"cuda:0"`` stays; no index invented."""
    tok = token.strip().strip("'\"`()[]{},.;!").strip()
    low = tok.lower()
    if low.startswith("device(type="):  # torch.device repr
        m = re.match(r"device\(type='(\w+)'(?:, index=(\d+))?", low)
        if m:
            return m.group(1) + (f":{m.group(2)}" if m.group(2) else "")
    if low in ("gpu", "cudatensorid"):
        return "cuda"
    if low == "privateuse1":
        return "privateuseone"
    if low.isdigit():  # ``checkSameGPU`` prints bare CUDA indices
        return f"cuda:{low}"
    return low


def _parse_tensor_type(name: str) -> tuple[str | None, str | None]:
    """A conv message's type name -> (device or None, dtype or None).

    ``torch.cuda.FloatTensor`` -> (cuda, float32); ``torch.FloatTensor`` -> (cpu, float32);
    ``CUDAHalfType`` -> (cuda, float16); ``long int`` / ``c10::Half`` -> (None, dtype).
    """
    name = name.strip()
    m = re.fullmatch(r"torch\.(?:(\w+)\.)?(\w+?)Tensor", name)
    if m:
        dev = normalize_device(m.group(1)) if m.group(1) else "cpu"
        if dev == "sparse":
            dev = "cpu"
        return dev, _TYPE_STEMS.get(m.group(2))
    m = re.fullmatch(r"(CPU|CUDA|MPS|XPU|Meta|HIP|XLA|PrivateUse1)(\w+?)Type", name)
    if m:
        return normalize_device(m.group(1)), _TYPE_STEMS.get(m.group(2))
    return None, dtype_of(name)


# --------------------------------------------------------------------------------------------
# What a message says
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MessageMatch:
    """What :func:`parse_message` found in an error message.

    ``devices`` are normalised (``"cuda:0"``, ``"cuda"``, ``"cpu"``, ``"meta"``, ...) in the
    order the message names them. ``argument_device`` is the device of the named (odd) tensor
    and ``expected`` the device the operation wanted, where the message says so.
    ``types``/``dtypes`` are only set for the conv ``Input type ... weight type`` message.
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

    @property
    def rule(self) -> Rule:
        return rule_for(self.kind)

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


def _dedup(items: Iterable[str | None]) -> tuple[str, ...]:
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


# --------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------

#: How a fix chooses where things go:
#: ``bigger``   where the model / the most bytes are (data follows the model)
#: ``expected`` the device the message says the operation expected
#: ``cpu``      the CPU (index arguments that must live there)
#: ``real``     a real device: the message's non-meta device (meta holds no data)
#: ``none``     nothing moves (say what to do instead)
TARGETS = ("bigger", "expected", "cpu", "real", "none")

#: Who a fix moves: ``all`` (everyone off the target), ``modules`` (DataParallel),
#: ``index`` (integer tensors: indices), ``out`` (the out= tensor), ``meta`` (meta objects).
MOVERS = ("all", "modules", "index", "out", "meta", "none")

_Extract = Callable[["re.Match[str]", "Rule"], "MessageMatch | None"]


@dataclass(frozen=True)
class Rule:
    """One family of device errors.

    ``patterns``: regexes (searched, first hit wins) whose named groups are described in the
    module docstring. ``target``/``movers``: the fix policy (see :data:`TARGETS`,
    :data:`MOVERS`). ``note``: what the user should know, formatted with the match's fields
    (``{expected}``, ``{argument}``, ``{operator}``, ``{devices}``). ``extract``: a custom
    reader for messages whose groups need interpreting (conv type names).
    """

    kind: str
    patterns: tuple[str, ...]
    target: str = "bigger"
    movers: str = "all"
    note: str = ""
    operator: str | None = None  # when the message names no operator but the rule implies one
    argument: str | None = None  # likewise for the argument
    extract: _Extract | None = None
    compiled: tuple[re.Pattern[str], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        assert self.target in TARGETS, self.target
        assert self.movers in MOVERS, self.movers
        object.__setattr__(self, "compiled", tuple(re.compile(p, re.DOTALL) for p in self.patterns))

    def match(self, text: str) -> MessageMatch | None:
        for pattern in self.compiled:
            m = pattern.search(text)
            if m is None:
                continue
            found = (self.extract or _read_groups)(m, self)
            if found is not None:
                return found
        return None

    def note_for(self, match: MessageMatch) -> str:
        if not self.note:
            return ""
        return self.note.format(
            expected=match.expected or "the expected device",
            argument=match.argument or "the argument",
            operator=match.operator or "the operation",
            devices=" and ".join(match.devices),
        )


def _read_groups(m: re.Match[str], rule: Rule) -> MessageMatch:
    groups = {k: v for k, v in m.groupdict().items() if v}
    got = normalize_device(groups["got"]) if "got" in groups else None
    want = normalize_device(groups["want"]) if "want" in groups else None
    a = normalize_device(groups["a"]) if "a" in groups else None
    b = normalize_device(groups["b"]) if "b" in groups else None
    # devices in the order the message prints them
    spans = sorted(
        (m.start(k), normalize_device(v))
        for k, v in groups.items()
        if k in ("got", "want", "a", "b")
    )
    return MessageMatch(
        rule.kind,
        _dedup(d for _, d in spans) or _dedup([a, b]),
        argument=groups.get("arg") or rule.argument,
        operator=_clean_operator(groups.get("op")) or rule.operator,
        argument_device=got,
        expected=want,
    )


def _extract_found_two(m: re.Match[str], rule: Rule) -> MessageMatch:
    a, b = normalize_device(m.group("a")), normalize_device(m.group("b"))
    if m.group("arg"):
        # ``common_device_check_failure(common_device, tensor, method, arg)``: the argument
        # is the tensor on the second device; the first is the common (expected) one.
        return MessageMatch(
            rule.kind,
            _dedup([a, b]),
            argument=m.group("arg"),
            operator=_clean_operator(m.group("op")),
            argument_device=b,
            expected=a,
        )
    return MessageMatch(rule.kind, _dedup([a, b]))


def _extract_conv(m: re.Match[str], rule: Rule) -> MessageMatch | None:
    t_in, which, t_w = m.group("input"), m.group("which"), m.group("weight")
    d_in, dt_in = _parse_tensor_type(t_in)
    d_w, dt_w = _parse_tensor_type(t_w)
    if d_in is None or d_w is None or d_in == d_w:
        # ``Input type (long int) and bias type (double)``, ``(torch.cuda.HalfTensor) and
        # (torch.cuda.FloatTensor)``: same device (or none named) -- a dtype error, not ours.
        return None
    return MessageMatch(
        rule.kind,
        _dedup([d_in, d_w]),
        argument="input",
        operator=which,  # the conv layer's parameter the input was compared with
        argument_device=d_in,
        expected=d_w,
        types=(t_in.strip(), t_w.strip()),
        dtypes=(dt_in, dt_w),
        dtype_mismatch=dt_in is not None and dt_w is not None and dt_in != dt_w,
    )


def _extract_same_gpu(m: re.Match[str], rule: Rule) -> MessageMatch:
    i, j = normalize_device(m.group("got")), normalize_device(m.group("want"))
    return MessageMatch(
        rule.kind,
        _dedup([i, j]),
        argument=m.group("arg"),
        operator=m.group("op"),
        argument_device=i,
        expected=j,
    )


def _extract_on_cpu(m: re.Match[str], rule: Rule) -> MessageMatch:
    return MessageMatch(
        rule.kind,
        ("cpu", "cuda"),
        argument=m.group("arg"),
        operator=m.group("op"),
        argument_device="cpu",
        expected="cuda",
    )


def _extract_meta_copy(m: re.Match[str], rule: Rule) -> MessageMatch:
    return MessageMatch(rule.kind, ("meta",), argument_device="meta")


def _extract_meta_inplace(m: re.Match[str], rule: Rule) -> MessageMatch:
    return MessageMatch(rule.kind, ("meta",), argument_device="meta")


def _extract_must_be_cpu(m: re.Match[str], rule: Rule) -> MessageMatch:
    got = normalize_device(m.group("got"))
    return MessageMatch(
        rule.kind,
        _dedup(["cpu", got]),
        argument=m.group("arg") if "arg" in m.groupdict() and m.group("arg") else rule.argument,
        operator=rule.operator,
        argument_device=got,
        expected="cpu",
    )


_D = r"[A-Za-z_][\w]*(?::\d+)?"  # a device as messages print it: ``cuda:0``, ``meta``, ``cpu``
_TD = r"(?:device\(type='\w+'(?:, index=\d+)?\)|" + _D + ")"  # or a torch.device repr


def _g(name: str, pattern: str = _D) -> str:
    return f"(?P<{name}>{pattern})"


_MOVE_INDEX_NOTE = (
    "index tensors must be on the CPU or on the indexed tensor's device ({expected}): "
    "move the index tensor, not the data."
)

#: The one table, most specific first. ``generic`` (below) catches any other device wording.
RULES: tuple[Rule, ...] = (
    Rule(
        # TensorIterator::compute_types, FakeTensor (2.1+); suffixed: adaption.cpp in 1.11-2.0,
        # including the misspelled "arugment" some 1.x releases shipped.
        "found_two_devices",
        (
            r"Expected all tensors to be on the same device, but found at least two devices, "
            + _g("a")
            + " and "
            + _g("b")
            + r"!?(?:\s*\(when checking ar(?:gu|ug)ment for argument (?P<arg>[\w.]+) in method "
            r"(?P<op>[\w.:<>]+)\))?",
        ),
        extract=_extract_found_two,
    ),
    Rule(
        "different_from_other",  # adaption.cpp, 2.1+
        (
            r"Expected all tensors to be on the same device, but got (?P<arg>[\w.]+) is on "
            + _g("got")
            + r", different from other tensors on "
            + _g("want")
            + r"(?:\s*\(when checking argument in method (?P<op>[\w.:<>]+)\))?",
        ),
    ),
    Rule(
        "expected_cpu_tensor",  # sparse addmm on the CPU
        (
            r"Expected all tensors to be on the same device\.\s*(?P<op>\w+):? expected "
            r"'(?P<arg>\w+)' to be (?:an? )?(?P<want>\w+) tensor, but got (?:an? )?tensor on "
            + _g("got"),
        ),
    ),
    Rule(
        # torch._prims_common.check_same_device: cpu+meta on torch 2.x (meta kernels)
        "not_on_expected_device",
        (
            r"Tensor on device " + _g("got") + r" is not on the expected device " + _g("want"),
            r"Tensor device mismatch! Expected: " + _g("want", _TD) + ", Got: " + _g("got", _TD),
        ),
    ),
    Rule(
        "conv_type",  # Convolution.cpp check_input_same_type_as_parameters
        (
            r"Input type \((?P<input>[^()]+)\) and (?P<which>weight|bias) type "
            r"\((?P<weight>[^()]+)\) should be the same",
        ),
        extract=_extract_conv,
    ),
    # ---- out= tensors ---------------------------------------------------------------------
    Rule(
        "out_copy",  # torch/_prims_common/wrappers.py _safe_copy_out, torch/_refs copy_to
        (
            r"Attempting to copy from device "
            + _g("want", _TD)
            + r" to device "
            + _g("got", _TD)
            + r", but cross-device copies are not allowed",
        ),
        target="expected",
        movers="out",
        argument="out",
        note="an out= tensor must be on the device the result is computed on ({expected}): "
        "move (or re-create) the out tensor there; its old values are overwritten anyway.",
    ),
    Rule(
        "out_device",  # _prims_common / meta registrations, linalg, multi_dot, dot, ...
        (
            r"Expected out tensor to have device " + _g("want", _TD) + r", but got "
            r"" + _g("got", _TD) + r" instead",
            r"(?P<op>[\w.]+)\(\): expected out tensor to be on device "
            + _g("want", _TD)
            + r" but got "
            + _g("got", _TD),
            r"(?P<op>[\w.]+): Expected the output and input tensors to be on the same device, "
            r"but got the output tensor on "
            + _g("got")
            + r" and the input tensor on "
            + _g("want"),
            r"(?P<op>[\w.]+): Expected (?P<arg>\w+) and input tensors to be on the same device, "
            r"but got \w+ on " + _g("got") + " and input on " + _g("want"),
            r"(?P<op>[\w.]+\.dims): output must be on the same device as input",
            r"out Tensor doesn't have the correct device set",
            r"Expected all tensors to be on the same device\. (?P<op>\w+) expected '(?P<arg>out)' "
            r"to be (?P<want>\w+) tensor, but got tensor on " + _g("got"),
        ),
        target="expected",
        movers="out",
        argument="out",
        note="an out= tensor must be on the device the result is computed on ({expected}): "
        "move (or re-create) the out tensor there; its old values are overwritten anyway.",
    ),
    Rule(
        "out_device_type",  # torch/csrc/utils/out_types.cpp check_out_type_matches (factories)
        (
            r"device type "
            + _g("want", r"\w+")
            + r" does not match device type of out parameter \("
            + _g("got", r"\w+")
            + r"\)",
        ),
        target="expected",
        movers="out",
        argument="out",
        note="a factory function (arange, zeros, randn, ...) called with out= and device= "
        "must get an out tensor on that device: move the out tensor to {expected}, or drop "
        "the device= argument.",
    ),
    # ---- index / scatter / gather ----------------------------------------------------------
    Rule(
        "indices_device",  # TensorAdvancedIndexing.cpp
        (
            r"indices should be either on \w+ or on the same device as the indexed tensor "
            r"\(" + _g("want") + r"\)",
        ),
        target="expected",
        movers="index",
        operator="index",
        argument="indices",
        note=_MOVE_INDEX_NOTE,
    ),
    Rule(
        "index_op_devices",  # index_add / index_copy / index_fill / masked ops, _refs
        (
            r"(?P<op>index_\w+)\(\): self, index and source expected to be in the same device, "
            r"but got \(self\) " + _g("want") + r", \(index\) " + _g("a") + r",? and \(source\) "
            r"" + _g("b"),
            r"expected self and mask to be on the same device, but got mask on "
            + _g("got")
            + " and self on "
            + _g("want"),
            r"Mismatching (?P<op>[\w.]+) device between self \(" + _g("want", _TD) + r"\) and "
            r"values \(" + _g("got", _TD) + r"\)",
            r"Mismatching (?P<op>[\w.]+) device between self and values",
        ),
        target="expected",
        note="the indexed tensor (self) decides the device; move the other tensors there.",
    ),
    Rule(
        "value_device",  # index_put_ / put_ with values elsewhere
        (
            r"expected device "
            + _g("want", _TD)
            + r" but got device "
            + _g("got", _TD)
            + r"(?: for (?P<arg>\w+) tensor)?",
        ),
        target="expected",
        extract=lambda m, rule: replace(
            _read_groups(m, rule), operator="index_put_" if m.group("arg") == "value" else None
        ),
    ),
    Rule(
        "device_type_check",  # TensorUtils.cpp checkDeviceType / checkDevice (take_along_dim)
        (
            r"Expected tensor to have (?P<want>[\w:]+) Device(?:Type)?, but got tensor with "
            r"(?P<got>[\w:]+) Device(?:Type)?(?: \(while checking arguments for (?P<op>[\w.:]+)\))?",
        ),
        target="expected",
    ),
    Rule(
        "must_be_cpu",  # arguments that must live on the CPU whatever the data's device
        (
            r"tensor_split expected (?P<arg>tensor_indices_or_sections) to be on cpu, but it's "
            r"on " + _g("got"),
        ),
        target="cpu",
        movers="index",
        operator="tensor_split",
        extract=_extract_must_be_cpu,
        note="{argument} is read on the host: it must be a CPU tensor whatever the data's "
        "device (or pass a list of ints).",
    ),
    Rule(
        "scalar_on_cpu",
        (r"Expected scalars to be on CPU, got " + _g("got") + " instead",),
        target="cpu",
        extract=_extract_must_be_cpu,
    ),
    # ---- CUDA-side argument checks (TensorUtils.cpp), THC-era messages ----------------------
    Rule(
        "tensor_on_cpu",
        (
            r"Tensor for (?:argument #\d+ )?'(?P<arg>[\w.]+)' is on CPU, .*?but expected "
            r"(?:it|them) to be on GPU \(while checking arguments for (?P<op>[\w.:]+)\)",
        ),
        target="expected",
        extract=_extract_on_cpu,
    ),
    Rule(
        # lazy / XLA-style backends: "Input tensor is not a lazy tensor: torch.FloatTensor"
        "not_backend_tensor",
        (r"Input tensor is not an? (?P<want>\w+) tensor: (?P<type>torch\.(?:\w+\.)?\w+Tensor)",),
        target="expected",
        extract=lambda m, rule: MessageMatch(
            rule.kind,
            _dedup([normalize_device(m.group("want")), _parse_tensor_type(m.group("type"))[0]]),
            argument_device=_parse_tensor_type(m.group("type"))[0],
            expected=normalize_device(m.group("want")),
        ),
    ),
    Rule(
        "same_gpu",
        (
            r"Expected tensor for (?:argument #\d+ )?'(?P<arg>[\w.]+)' to have the same device "
            r"as tensor for (?:argument #\d+ )?'[\w.]+'; but device (?P<got>\d+) does not equal "
            r"(?P<want>\d+)(?: \(while checking arguments for (?P<op>[\w.:]+)\))?",
        ),
        extract=_extract_same_gpu,
    ),
    Rule(
        "device_type_arg",
        (
            r"Expected object of device type (?P<want>\w+) but got device type (?P<got>\w+) "
            r"for argument #\d+ '(?P<arg>[\w.]+)'(?: in call to (?P<op>[\w.:]+))?",
        ),
        target="expected",
    ),
    Rule(
        "backend_arg",
        (
            r"Expected object of backend (?P<want>\w+) but got backend (?P<got>\w+) "
            r"for argument #\d+ '(?P<arg>[\w.]+)'(?: in call to (?P<op>[\w.:]+))?",
        ),
        target="expected",
    ),
    # ---- modules ---------------------------------------------------------------------------
    Rule(
        "rnn_params",  # RNN.h check_attributes
        (
            r"Input and (?P<arg>parameter) tensors are not at the same device, found input "
            r"tensor at " + _g("a") + r" and parameter tensor at " + _g("b"),
        ),
    ),
    Rule(
        "rnn_hidden",
        (
            r"Input and (?P<arg>hidden) tensors are not at the same device, found input "
            r"tensor at " + _g("want") + r" and hidden tensor at " + _g("got"),
        ),
        target="expected",
        note="the RNN's hidden state (h0, or the (h0, c0) tuple for an LSTM) must be on the "
        "input's device too: move it, or create it with device=x.device.",
    ),
    Rule(
        "data_parallel",  # torch/nn/parallel/data_parallel.py
        (
            r"module must have its parameters and buffers on device "
            + _g("want")
            + r" \(device_ids\[0\]\) but found one of them on device: "
            + _g("got", _TD),
        ),
        target="expected",
        movers="modules",
        operator="DataParallel",
        note="nn.DataParallel keeps the master copy of the module on device_ids[0] and "
        "scatters from there; move the whole module there first: "
        'model.to(f"cuda:{{model.device_ids[0]}}") (here: model.to("{expected}")).',
    ),
    Rule(
        "replica_device",  # DataParallel.replicate / comm
        (
            r"Input 0 is on device "
            + _g("want", _TD)
            + r" and input \d+ is on device "
            + _g("got", _TD),
        ),
        target="expected",
    ),
    # ---- meta ------------------------------------------------------------------------------
    Rule(
        "meta_copy",  # Tensor.to / Module.to on meta tensors
        (r"Cannot copy out of meta tensor; no data!",),
        target="real",
        movers="meta",
        extract=_extract_meta_copy,
    ),
    Rule(
        "meta_inplace",  # torch/_meta_registrations / FakeTensor in-place checks
        (r"Cannot inplace into non-meta tensor with meta tensor argument",),
        target="real",
        movers="meta",
        extract=_extract_meta_inplace,
        note="an in-place operation on a real tensor got a meta tensor (no data) as an "
        "argument: the meta tensor must be materialised on a real device first.",
    ),
    Rule(
        # codegen'd kernel wrappers (RegisterXXX.cpp) assert the output's device matches the
        # device guard: a backend kernel got inputs from two devices
        "device_guard",
        (r"current_device == options\.device\(\) INTERNAL ASSERT FAILED",),
    ),
    Rule(
        # an operation that needs values (or has no meta kernel) got a meta tensor
        "meta_unsupported",
        (
            r"(?P<op>[\w.]+\(\)) cannot be called on meta tensors",
            r"(?P<op>aten::[\w.]+): attempted to run this operator with Meta tensors",
            r"Cannot access data pointer of Tensor .*meta",
        ),
        target="real",
        movers="meta",
        extract=lambda m, rule: MessageMatch(
            rule.kind, ("meta",), operator=m.groupdict().get("op"), argument_device="meta"
        ),
        note="{operator} needs real values, and meta tensors have none: the meta tensor must "
        "be created (or its module materialised with to_empty and reloaded) on a real device.",
    ),
    Rule(
        "set_storage_device",  # Tensor.set_ / storage swaps
        (
            r"Attempted to set the storage of a tensor on device \"?"
            + _g("want")
            + r"\"? to a storage on different device \"?"
            + _g("got"),
        ),
        target="expected",
    ),
    # ---- autograd, generators, FakeTensor ----------------------------------------------------
    Rule(
        "grad_device",
        (
            r"attempting to assign a gradient with device type '(?P<got>\w+)' to a tensor "
            r"with device type '(?P<want>\w+)'",
            r"attempting to assign a gradient located on device with index '(?P<got>\d+)' to a "
            r"tensor located on device with index '(?P<want>\d+)'",
        ),
        target="expected",
        argument="grad",
    ),
    Rule(
        "fake_tensor_propagation",
        (
            r"Unhandled FakeTensor Device Propagation for (?P<op>[\w.]+), found two different "
            r"devices " + _g("a") + ", " + _g("b"),
        ),
    ),
    Rule(
        "fake_tensor_wrapped",  # torch/_subclasses/fake_tensor.py
        (
            r"FakeTensor is wrapped to wrong device, found "
            + _g("got", _TD)
            + ", expected "
            + _g("want", _TD),
        ),
        target="expected",
        note="a FakeTensor created for {devices} met tensors on another device while tracing "
        "(torch.compile / FakeTensorMode): create every input on one device.",
    ),
    Rule(
        "generator_device",
        (r"Expected a '(?P<want>\w+)' device type for generator but found '(?P<got>\w+)'",),
        target="none",
        argument="generator",
    ),
    Rule(
        "gradient_devices",
        (
            r"torch\.gradient expected each tensor to be on the same device, but got devices "
            + _g("a")
            + " and "
            + _g("b"),
        ),
        operator="gradient",
    ),
    Rule(
        "pair_devices",  # ``{op}: X and Y must/expected ... same device, got A and B``
        (
            r"(?P<op>[\w.]+)\(\)?:? expected input and grid to be on same device, but input is "
            r"on " + _g("a") + " and grid is on " + _g("b"),
            r"(?P<op>i?stft) input and window must be on the same device but got self on "
            + _g("a")
            + r" and window on "
            + _g("b"),
            r"(?P<op>[\w.]+): self and key must be on the same device, got " + _g("a") + " and "
            r"" + _g("b"),
            r"Expected divisor \(b\) to be on the same device \(" + _g("a") + r"\) as dividend "
            r"\(a\), but it is found on " + _g("b"),
            r"expected (?P<arg>condition), x and y to be on the same device, but condition is "
            r"on " + _g("a") + r" and x and y are on " + _g("b"),
        ),
    ),
)

_GENERIC_HINT = re.compile(
    r"same device|same GPU|different devices?|same devices|expected device|to be on (?:cpu|gpu)"
    r"|not on the expected device|device mismatch|devices? do(?:es)? not match"
    r"|on different devices|devices? (?:are|is) not the same|wrong device"
    r"|must be on (?:the )?(?:cpu|gpu|cuda)\b|cross-device",
    re.IGNORECASE,
)
#: Wordings that mention devices but are not mismatches (availability, CUDA runtime errors).
_NOT_MISMATCH = re.compile(
    r"CUDA error|out of memory|not compiled with|no CUDA GPUs|is not available|invalid device"
    r"|device-side assert",
    re.IGNORECASE,
)

GENERIC = Rule("generic", ())

_BY_KIND = {rule.kind: rule for rule in (*RULES, GENERIC)}


def rule_for(kind: str) -> Rule:
    return _BY_KIND.get(kind, GENERIC)


def parse_message(text: str) -> MessageMatch | None:
    """Recognise a device-mismatch error message; ``None`` for anything else.

    Searches (not matches) so prefixes such as torch.compile's wrapping text do not hide it.
    """
    try:
        if not isinstance(text, str) or not text:
            return None
        text = text[:20_000]
        for rule in RULES:
            found = rule.match(text)
            if found is not None:
                return found
        if _GENERIC_HINT.search(text) and not _NOT_MISMATCH.search(text):
            devices = _dedup(normalize_device(m.group(0)) for m in _DEVICE_TOKEN.finditer(text))
            return MessageMatch("generic", devices)
    except Exception:
        return None
    return None


def with_devices(match: MessageMatch, **changes: Any) -> MessageMatch:
    return replace(match, **changes)
