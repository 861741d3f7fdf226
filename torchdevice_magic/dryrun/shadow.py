"""The shadow namespace: what a cell reads, copied, so that running the cell changes nothing real.

The names a cell reads are those its compiled code loads (``co_names`` of the cell and of every
code object nested in it), and, for each function of the user's namespace it reads, the names
that function's code loads, recursively. Each name is then

- copied when it holds data (tensors, modules, optimizers, containers, any other object):
  :meth:`.fakes.FakeCopies.copy`, one memo for all, so objects that share stay shared;
- re-created when it is a function of the user's namespace: the same code, closure and
  defaults, with the shadow namespace as its globals (the names it reads are the copies);
- passed as it is when it cannot change: Python modules, classes, builtins, numbers, strings.

An object that cannot be deep-copied is passed as it is and listed in ``Shadow.shared``: a
real tensor reached through it stops the run (the fake mode refuses real inputs).

While the shadow run lasts, :func:`no_file_writes` makes opening a file for writing stop the
run (:class:`SideEffect`): the real run would write it, the dry run must not. Printing is kept.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .fakes import FakeCopies

__all__ = ["Shadow", "SideEffect", "build_shadow", "names_loaded", "no_file_writes"]

#: values that cannot change, passed as they are
_IMMUTABLE = (int, float, complex, bool, str, bytes, type(None), range, frozenset)


class SideEffect(BaseException):
    """The shadow run reached something that would change the world outside the kernel.

    A ``BaseException``, so that a cell's ``except Exception`` does not swallow it and go on as
    if the side effect had happened."""


@dataclass
class Shadow:
    """The namespace the cell runs in, and how each of its names relates to the user's."""

    namespace: dict[str, Any]
    #: shadow name -> the user's object it is a copy of (or a re-created function of)
    originals: dict[str, Any] = field(default_factory=dict)
    #: shadow name -> the copy (or re-created function) made of it before the run
    copies: dict[str, Any] = field(default_factory=dict)
    #: names passed as they are because they could not be copied, with why
    shared: dict[str, str] = field(default_factory=dict)


def names_loaded(code: types.CodeType) -> set[str]:
    """Every name ``code`` and the code objects nested in it (functions, comprehensions,
    classes) load from their globals (or look up as attributes: harmless extras)."""
    found: set[str] = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= names_loaded(const)
    return found


def _is_user_function(value: Any, namespace: Mapping[str, Any]) -> bool:
    return isinstance(value, types.FunctionType) and value.__globals__ is namespace


def _names_to_shadow(code: types.CodeType, namespace: Mapping[str, Any]) -> list[str]:
    """The names of ``namespace`` the cell reads, directly or through its functions."""
    wanted = sorted(names_loaded(code))
    seen: set[str] = set()
    order: list[str] = []
    while wanted:
        name = wanted.pop()
        if name in seen or name not in namespace:
            continue
        seen.add(name)
        order.append(name)
        value = namespace[name]
        if _is_user_function(value, namespace):
            wanted += sorted(names_loaded(value.__code__) - seen)
    return order


def _passed_as_is(value: Any) -> bool:
    return isinstance(
        value,
        (
            *_IMMUTABLE,
            types.ModuleType,
            type,
            types.BuiltinFunctionType,
            types.FunctionType,
            # a bound method is its object's: deep-copying it would copy that object whole
            # (``get_ipython`` would copy the shell)
            types.MethodType,
        ),
    ) or _is_torch_constant(value)


def _is_torch_constant(value: Any) -> bool:
    torch = _loaded_torch()
    return torch is not None and isinstance(value, (torch.dtype, torch.device, torch.Size))


def _loaded_torch() -> Any:
    import sys

    return sys.modules.get("torch")


def build_shadow(code: types.CodeType, namespace: Mapping[str, Any], copies: FakeCopies) -> Shadow:
    """The shadow namespace for running ``code`` (a compiled cell) against ``namespace``."""
    shadow = Shadow({"__name__": "__main__", "__builtins__": builtins})
    memo: dict[int, Any] = {}
    functions: list[tuple[str, types.FunctionType]] = []
    for name in _names_to_shadow(code, namespace):
        value = namespace[name]
        if _is_user_function(value, namespace):
            functions.append((name, value))
            continue
        if _passed_as_is(value):
            shadow.namespace[name] = value
            continue
        try:
            copied = copies.copy(value, memo)
        except Exception as error:
            shadow.namespace[name] = value
            shadow.shared[name] = f"{type(error).__name__}: {error}"[:200]
            continue
        shadow.namespace[name] = copied
        shadow.originals[name] = value
        shadow.copies[name] = copied
    if "get_ipython" in shadow.namespace:
        shadow.namespace["get_ipython"] = _no_shell
    for name, function in functions:
        rebound = types.FunctionType(
            function.__code__,
            shadow.namespace,
            function.__name__,
            function.__defaults__,
            function.__closure__,
        )
        rebound.__kwdefaults__ = function.__kwdefaults__
        rebound.__qualname__ = function.__qualname__
        shadow.namespace[name] = rebound
        shadow.originals[name] = function
        shadow.copies[name] = rebound
    return shadow


def _no_shell() -> Any:
    """What ``get_ipython`` is in the shadow run: a magic or shell command in the cell (IPython
    turns ``%time ...`` and ``!ls`` into ``get_ipython().run_...``) would run for real, in the
    user's namespace."""
    raise SideEffect("runs an IPython magic or shell command (it would run for real)")


def _write_mode(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    mode = kwargs.get("mode", args[1] if len(args) > 1 else "r")
    return isinstance(mode, str) and any(flag in mode for flag in "wax+")


@contextlib.contextmanager
def no_file_writes() -> Iterator[None]:
    """Opening a file for writing raises :class:`SideEffect`, and so does ``torch.save`` (its
    zip writer opens the file in C++, past ``open``); reading is allowed."""
    import torch

    real_open, real_save = builtins.open, torch.save

    def guarded_open(*args: Any, **kwargs: Any) -> Any:
        if _write_mode(args, kwargs):
            target = args[0] if args else kwargs.get("file", "?")
            raise SideEffect(f"writes the file {str(target)!r}")
        return real_open(*args, **kwargs)

    def guarded_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        raise SideEffect(f"saves to {f if isinstance(f, str) else type(f).__name__!r} (torch.save)")

    builtins.open = io.open = guarded_open
    torch.save = torch.serialization.save = guarded_save
    try:
        yield
    finally:
        builtins.open = io.open = real_open
        torch.save = torch.serialization.save = real_save


def changed_containers(shadow: Shadow) -> list[str]:
    """Names of the user's lists, dicts and sets whose shadow copy the cell changed (appended
    to, updated): the real run would change the real one."""
    changed = []
    for name, original in shadow.originals.items():
        copied = shadow.copies.get(name)
        container = isinstance(original, (list, dict, set))
        if container and isinstance(copied, type(original)) and len(copied) != len(original):
            changed.append(name)
    return changed
