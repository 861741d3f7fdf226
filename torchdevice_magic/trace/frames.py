"""What a tensor is called where an op ran, and which lines of a cell sit in a loop.

The name a frame gives a tensor (a local, a module's parameter/buffer/attribute, the base of a
view), the name the namespace gives a module, and which lines of a cell sit in a loop. Read
only when the recorder notes an interesting op, and when the report is built. Standard library
only; ``torch.nn`` is looked up in ``sys.modules``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from types import FrameType
from typing import Any


def name_in_frame(frame: FrameType, tensor: Any, modules: list[tuple[str, Any]]) -> str | None:
    """The name that holds ``tensor`` (by identity) seen from ``frame``: a local variable, a
    parameter/buffer/tensor attribute of the module the op runs in (``model.fc.weight``) or
    of a module the frame holds (``self.scale``); a view is named after its base."""
    name = _holder_name(frame, tensor, modules)
    if name is None:
        base = getattr(tensor, "_base", None)  # a view: x.t(), x[0], x.view(...)
        if base is not None:
            name = _holder_name(frame, base, modules)
            if name is not None:
                name = f"{name} (a view)"
    return name


def _holder_name(frame: FrameType, tensor: Any, modules: list[tuple[str, Any]]) -> str | None:
    try:
        scope = frame.f_locals
    except Exception:
        return None
    nn_module = getattr(sys.modules.get("torch.nn"), "Module", None)
    private = None
    holders = [modules[-1]] if modules else []
    for name, value in scope.items():
        if value is tensor:
            if not name.startswith("_"):
                return name
            private = private or name  # _ / _12 / __x only when nothing better holds it
        elif nn_module is not None and issubclass(type(value), nn_module):
            holders.append((name, value))
    for prefix, module in holders:
        found = _name_in_module(module, tensor)
        if found is not None:
            return f"{prefix}.{found}"
    return private


def _name_in_module(module: Any, tensor: Any) -> str | None:
    # parameters and buffers through torch's own accessors; plain tensor attributes through
    # the instance dict (never calling properties of the user's object)
    for name, value in module.named_parameters():
        if value is tensor:
            return name
    for name, value in module.named_buffers():
        if value is tensor:
            return name
    try:
        attributes = vars(module)
    except TypeError:
        return None
    for name, value in attributes.items():
        if value is tensor:
            return name
    return None


def module_path(namespace: Mapping[str, Any], module: Any) -> str | None:
    """The namespace's name for a module: ``model`` or ``model.encoder.layers.3`` (the first
    top-level module holding it); None when no name reaches it."""
    nn_module = sys.modules["torch.nn"].Module
    roots = []
    for name, value in list(namespace.items()):
        if name.startswith("_"):
            continue
        if value is module:
            return name
        if issubclass(type(value), nn_module):  # type(), not isinstance: no __class__ read
            roots.append((name, value))
    for root_name, root in roots:
        try:
            for path, sub in root.named_modules():
                if sub is module:
                    return f"{root_name}.{path}"
        except Exception:  # a module of the user's that cannot be walked: not this one
            continue
    return None


def _nodes(source: str) -> list[ast.AST]:
    """Every node of ``source`` parsed (none when it does not parse)."""
    try:
        return list(ast.walk(ast.parse(source)))
    except SyntaxError:
        return []


def loop_lines(source: str) -> set[int]:
    """Lines of ``source`` inside a for/while loop (or a comprehension)."""
    lines: set[int] = set()
    for node in _nodes(source):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def names_bound_in_loops(source: str) -> set[str]:
    """Names a for/while loop of ``source`` (or a comprehension) binds: its targets and what
    its body assigns. A name copied in a loop but bound outside every loop is the same tensor
    each time round (``mask.to(dev)`` in the loop moves one tensor again and again)."""
    bound: set[str] = set()
    for node in _nodes(source):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.comprehension)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Name) and isinstance(inner.ctx, (ast.Store, ast.Del)):
                    bound.add(inner.id)
    return bound
