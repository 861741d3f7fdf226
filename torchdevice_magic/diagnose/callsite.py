"""Fixes at the call site: a model's input that no variable holds is moved where the cell's
failing line makes it; a tensor a library makes without ``device=`` is made on the right
device by running the user's call under ``torch.device(...)``.

``h, c = cell(x, cell.init_hidden(2))``: inside ``forward(self, input, cur_state)`` the odd
tensor is the argument ``cur_state``, and moving it inside ``forward()`` comes too late for
what the method unpacked from it (``h_cur, c_cur = cur_state``). The expression that made it
is in the cell, so the fix moves its result there, once, before the call:
``cell(x, tuple(t.to(dev) for t in cell.init_hidden(2)))``.
"""

from __future__ import annotations

import ast
import copy

from .candidates import Candidate, quote_device
from .cells import Cell
from .explain import FixLine
from .fixes import FixDraft

__all__ = ["arguments_moved_at_call", "move_argument_at_call", "outside_libraries"]


def _moved(expr: ast.expr, container: str | None, device: str) -> ast.expr | None:
    """``expr`` with its result moved to ``device`` (each item of a tuple/list result)."""
    dev = quote_device(device)
    inner = ast.unparse(expr)
    if container == "tuple":
        text = f"tuple(t.to({dev}) for t in {inner})"
    elif container == "list":
        text = f"[t.to({dev}) for t in {inner}]"
    elif container is None:
        text = f"({inner}).to({dev})" if not isinstance(expr, ast.Call) else f"{inner}.to({dev})"
    else:
        return None
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None


def _argument_nodes(stmt: ast.stmt, c: Candidate) -> list[tuple[ast.Call, int | str]]:
    """The calls of ``stmt`` that pass ``c``'s parameter as an expression no variable names:
    (call, positional index or keyword)."""
    if c.arg_position is None:
        return []
    index = c.arg_position - 1  # a bound method: ``self`` is not passed
    found: list[tuple[ast.Call, int | str]] = []
    for node in ast.walk(stmt):
        if not isinstance(node, ast.Call):
            continue
        args = node.args
        if 0 <= index < len(args) and not any(isinstance(a, ast.Starred) for a in args[:index]):
            if isinstance(args[index], ast.Call):
                found.append((node, index))
            continue
        for keyword in node.keywords:
            if keyword.arg == c.name and isinstance(keyword.value, ast.Call):
                found.append((node, c.name))
    return found


def move_argument_at_call(cell: Cell, lineno: int | None, c: Candidate, device: str) -> str | None:
    """The cell's failing statement with the expression passed as ``c`` (a Module method's
    argument no variable holds) moved to ``device``; None where that expression cannot be
    found unambiguously (then the fix stays inside the method)."""
    stmt = cell.statement_at(lineno)
    if stmt is None or c.alias or not c.module_method:
        return None
    found = _argument_nodes(stmt, c)
    if len(found) != 1:
        return None
    call, slot = found[0]
    new_stmt = copy.deepcopy(stmt)
    for old, new in zip(ast.walk(stmt), ast.walk(new_stmt), strict=False):
        if old is not call or not isinstance(new, ast.Call):
            continue
        if isinstance(slot, int):
            moved = _moved(new.args[slot], c.info.container, device)
            if moved is None:
                return None
            new.args[slot] = moved
        else:
            keyword = next(k for k in new.keywords if k.arg == slot)
            moved = _moved(keyword.value, c.info.container, device)
            if moved is None:
                return None
            keyword.value = moved
        try:
            return ast.unparse(new_stmt)
        except Exception:
            return None
    return None


def arguments_moved_at_call(
    cell: Cell, lineno: int | None, movers: list[Candidate], device: str
) -> tuple[list[tuple[str, str]], set[int]]:
    """Every mover that is a Module method's argument made by an expression of the failing
    statement: ([(where, new statement)], ids of the movers that fix handles -- the argument
    and what the method unpacked from it, which shares its storage)."""
    stmt = cell.statement_at(lineno)
    if stmt is None:
        return [], set()
    lines: list[tuple[str, str]] = []
    handled: set[int] = set()
    for c in movers:
        new = move_argument_at_call(cell, lineno, c, device)
        if new is None or lines:
            continue  # one statement can be rewritten once
        lines.append((f"line {stmt.lineno}", new))
        handled.add(id(c))
        handled.update(id(m) for m in movers if c.label in m.shares or m.label in c.shares)
    return lines, handled


def outside_libraries(
    cell: Cell, lineno: int | None, movers: list[Candidate], dest: str, draft: FixDraft
) -> tuple[list[Candidate], str]:
    """A library's own locals are named but never moved: the user cannot edit that line.
    Where the user's objects also move, they suffice; where only library locals are off the
    destination, there is no safe one-line fix: say which line makes them, and the user-side
    workaround (factory calls without ``device=`` follow ``with torch.device(...)``)."""
    inside = [c for c in movers if c.library and not c.alias]
    if not inside:
        return movers, ""
    rest = [c for c in movers if c not in inside]
    if rest:
        return rest, ""
    unique = list(dict.fromkeys(c.name for c in inside))  # (one name in two frames: once)
    names = ", ".join(unique)
    lines = ", ".join(dict.fromkeys(c.library for c in inside))
    one = len(unique) == 1
    passed = all(c.arg_position is not None for c in inside)
    if passed:  # the library got it from the call: made by an expression of that statement
        made = (
            f"{names} {'is' if one else 'are'} passed into library code ({lines}) from your "
            f"call, which made {'it' if one else 'them'} without device=, so on the default "
            "device"
        )
        later = (
            f"or give device={quote_device(dest)} where your call makes {'it' if one else 'them'}"
        )
    else:
        made = (
            f"{names} {'is' if one else 'are'} made inside library code ({lines}) without "
            "device=, so on the default device whatever the input; that line is not yours "
            "to edit"
        )
        later = "a later release of the library may fix it for good"
    stmt = cell.statement_at(lineno)
    simple = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr)
    if isinstance(stmt, simple) and stmt.lineno == stmt.end_lineno:
        # the cell's own call into the library, run with dest as the default device: the
        # library's factory calls without device= make their tensors there; nothing existing
        # moves, and only that statement is affected
        draft.fix_lines.append(
            FixLine(
                f"line {stmt.lineno}",
                f"with torch.device({quote_device(dest)}): {ast.unparse(stmt)}",
            )
        )
        draft.notes.append(
            f"{made}: the fix runs your call under torch.device({quote_device(dest)}), so "
            f"tensors made there without a device land on {dest}; {later}."
        )
        return [], "what a library makes without a device follows torch's default device"
    draft.safe = False
    draft.why = (
        f"{made}. Work around it by running the call under "
        f"`with torch.device({quote_device(dest)}):` (factory calls without device= then make "
        f"their tensors on {dest}), by passing the tensor yourself where the library accepts "
        "it, or by upgrading the library if a later release fixed it."
    )
    return [], ""
