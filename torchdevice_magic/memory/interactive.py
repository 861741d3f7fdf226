"""What an interactive shell keeps besides the names of its namespace: the references a
release must drop too, found from the namespace alone.

IPython keeps a displayed value in ``Out[n]`` and ``_n`` and, through
``shell.push(..., interactive=False)``, in ``user_ns_hidden`` as well; its display hook keeps
the last three (``_``, ``__``, ``___``) as attributes, and the last execution result keeps the
cell's value. It keeps the last failing cell's exception in ``last_execution_result``, and its
traceback (for ``%debug``) in ``sys.last_traceback`` and the traceback formatter. Every one of
them keeps the tensor alive: a release that drops only the namespace's names frees nothing.

The shell is found without importing IPython: IPython puts ``get_ipython`` (a method bound to
the shell) into every namespace it runs cells in, and the shell's ``user_ns`` is that very
namespace. So ``holders(get_ipython().user_ns)``, ``%devices --holders`` and ``--release`` all
see, and drop, the same references.

Pure core: no IPython, no ipywidgets, torch never imported here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .base import ErrorGetter

#: the display hook's names for the last three values it showed
_UNDERS = ("_", "__", "___")


def shell_of(namespace: Any) -> Any | None:
    """The interactive shell whose namespace this is (``user_ns``), or None (a plain dict)."""
    getter = namespace.get("get_ipython") if isinstance(namespace, dict) else None
    shell = getattr(getter, "__self__", None)
    if shell is None or getattr(shell, "user_ns", None) is not namespace:
        return None
    return shell


def kept_error(shell: Any) -> BaseException | None:
    """The last failing cell's exception while the shell keeps it in its last execution
    result (its frames hold the failed function's locals)."""
    result = getattr(shell, "last_execution_result", None)
    error = getattr(result, "error_in_exec", None)
    return error if isinstance(error, BaseException) else None


def drop_output_references(shell: Any, value: Any) -> None:
    """Drop what the shell keeps of a released output besides the namespace's names: its
    display hook's ``_``/``__``/``___``, ``user_ns_hidden`` and the last execution result."""
    hook = getattr(shell, "displayhook", None)
    for attribute in _UNDERS:
        if getattr(hook, attribute, None) is value:
            setattr(hook, attribute, "")  # what IPython starts them with
    hidden = getattr(shell, "user_ns_hidden", None)
    if isinstance(hidden, dict):
        for name in [n for n, v in hidden.items() if v is value]:
            del hidden[name]
    for result in (
        getattr(shell, "last_execution_result", None),
        getattr(hook, "exec_result", None),
    ):
        if result is not None and getattr(result, "result", None) is value:
            result.result = None


def shell_references(
    namespace: Any,
) -> tuple[Callable[[Any], None] | None, ErrorGetter | None]:
    """``(output_refs, last_error)`` for :func:`holders` when ``namespace`` is a shell's: how to
    drop what it keeps of a released output, and how to find the error it keeps; (None, None)
    for a plain namespace."""
    shell = shell_of(namespace)
    if shell is None:
        return None, None
    return (
        functools.partial(drop_output_references, shell),
        functools.partial(kept_error, shell),
    )


__all__ = ["drop_output_references", "kept_error", "shell_of", "shell_references"]
