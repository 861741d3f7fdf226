"""Readers for messages whose groups need interpreting: named in the :data:`~.rules.RULES` table.

Pure: the standard library only. Each takes a pattern's match and its :class:`~.schema.Rule`
and returns the :class:`~.schema.MessageMatch` (None: the message is not this family after all,
such as a conv message whose two types are on one device).
"""

from __future__ import annotations

import re
from dataclasses import replace

from .schema import MessageMatch, Rule, clean_operator, distinct, read_groups
from .vocabulary import normalize_device, parse_tensor_type

__all__ = [
    "read_conv_types",
    "read_found_two",
    "read_meta_only",
    "read_meta_operator",
    "read_must_be_cpu",
    "read_not_backend_tensor",
    "read_on_cpu",
    "read_same_gpu",
    "read_value_device",
]


def read_found_two(m: re.Match[str], rule: Rule) -> MessageMatch:
    a, b = normalize_device(m.group("a")), normalize_device(m.group("b"))
    if m.group("arg"):
        # ``common_device_check_failure(common_device, tensor, method, arg)``: the argument
        # is the tensor on the second device; the first is the common (expected) one.
        return MessageMatch(
            rule.kind,
            distinct([a, b]),
            argument=m.group("arg"),
            operator=clean_operator(m.group("op")),
            argument_device=b,
            expected=a,
        )
    return MessageMatch(rule.kind, distinct([a, b]))


def read_conv_types(m: re.Match[str], rule: Rule) -> MessageMatch | None:
    t_in, which, t_w = m.group("input"), m.group("which"), m.group("weight")
    d_in, dt_in = parse_tensor_type(t_in)
    d_w, dt_w = parse_tensor_type(t_w)
    if d_in is None or d_w is None or d_in == d_w:
        # ``Input type (long int) and bias type (double)``, ``(torch.cuda.HalfTensor) and
        # (torch.cuda.FloatTensor)``: same device (or none named) -- a dtype error, not ours.
        return None
    return MessageMatch(
        rule.kind,
        distinct([d_in, d_w]),
        argument="input",
        operator=which,  # the conv layer's parameter the input was compared with
        argument_device=d_in,
        expected=d_w,
        types=(t_in.strip(), t_w.strip()),
        dtypes=(dt_in, dt_w),
        dtype_mismatch=dt_in is not None and dt_w is not None and dt_in != dt_w,
    )


def read_same_gpu(m: re.Match[str], rule: Rule) -> MessageMatch:
    i, j = normalize_device(m.group("got")), normalize_device(m.group("want"))
    return MessageMatch(
        rule.kind,
        distinct([i, j]),
        argument=m.group("arg"),
        operator=m.group("op"),
        argument_device=i,
        expected=j,
    )


def read_on_cpu(m: re.Match[str], rule: Rule) -> MessageMatch:
    return MessageMatch(
        rule.kind,
        ("cpu", "cuda"),
        argument=m.group("arg"),
        operator=m.group("op"),
        argument_device="cpu",
        expected="cuda",
    )


def read_meta_only(m: re.Match[str], rule: Rule) -> MessageMatch:
    """A message about meta tensors that names no other device."""
    return MessageMatch(rule.kind, ("meta",), argument_device="meta")


def read_must_be_cpu(m: re.Match[str], rule: Rule) -> MessageMatch:
    got = normalize_device(m.group("got"))
    return MessageMatch(
        rule.kind,
        distinct(["cpu", got]),
        argument=m.group("arg") if "arg" in m.groupdict() and m.group("arg") else rule.argument,
        operator=rule.operator,
        argument_device=got,
        expected="cpu",
    )


def read_not_backend_tensor(m: re.Match[str], rule: Rule) -> MessageMatch:
    """``Input tensor is not a lazy tensor: torch.FloatTensor``: the backend is expected."""
    got = parse_tensor_type(m.group("type"))[0]
    want = normalize_device(m.group("want"))
    return MessageMatch(rule.kind, distinct([want, got]), argument_device=got, expected=want)


def read_value_device(m: re.Match[str], rule: Rule) -> MessageMatch:
    """``expected device X but got device Y for value tensor``: that is ``index_put_``."""
    operator = "index_put_" if m.group("arg") == "value" else None
    return replace(read_groups(m, rule), operator=operator)


def read_meta_operator(m: re.Match[str], rule: Rule) -> MessageMatch:
    """An operation that needs values (or has no meta kernel) got a meta tensor."""
    return MessageMatch(
        rule.kind, ("meta",), operator=m.groupdict().get("op"), argument_device="meta"
    )
