"""How PyTorch prints devices and dtypes in its messages, and their one spelling here.

Pure: the standard library only. ``normalize_device`` turns any device as a message prints it
(``CUDA``, ``GPU``, ``device(type='cuda', index=0)``, a bare ``checkSameGPU`` index) into one
spelling; ``dtype_of`` does the same for dtypes; ``parse_tensor_type`` reads the legacy tensor-type
names a conv message prints (``torch.cuda.HalfTensor``).
"""

from __future__ import annotations

import re

__all__ = ["DEVICE_TOKEN", "DEVICE_TYPES", "dtype_of", "normalize_device", "parse_tensor_type"]

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
DEVICE_TOKEN = re.compile(
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


def parse_tensor_type(name: str) -> tuple[str | None, str | None]:
    """A conv message's type name -> (device or None, dtype or None).

    ``torch.cuda.FloatTensor`` -> (cuda, float32); ``torch.FloatTensor`` -> (cpu, float32);
    ``CUDAHalfType`` -> (cuda, float16); ``simdevFloatType`` -> (simdev, float32);
    ``long int`` / ``c10::Half`` -> (None, dtype).
    """
    name = name.strip()
    m = re.fullmatch(r"torch\.(?:(\w+)\.)?(\w+?)Tensor", name)
    if m:
        dev = normalize_device(m.group(1)) if m.group(1) else "cpu"
        if dev == "sparse":
            dev = "cpu"
        return dev, _TYPE_STEMS.get(m.group(2))
    # ``TensorBase::toString()``: the backend's name then the scalar type, for any backend
    # (``CUDAHalfType``, and ``simdevFloatType`` for a PrivateUse1 backend renamed ``simdev``)
    m = _BACKEND_TYPE.fullmatch(name)
    if m:
        return normalize_device(m.group(1)), _TYPE_STEMS.get(m.group(2))
    return None, dtype_of(name)


_BACKEND_TYPE = re.compile(
    r"([A-Za-z][A-Za-z0-9_]*?)(" + "|".join(sorted(_TYPE_STEMS, key=len, reverse=True)) + r")Type"
)
