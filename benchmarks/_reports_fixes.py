"""Typing a diagnosis' fix into a case's cells as a user would (for benchmarks/reports.py).

A fix line says where it goes: ``cell`` (above the cell's statement that failed), ``loop``
(top of the loop body around the failing line), ``line N`` (rewrite that line of the cell),
``frame f`` (inside the user's function ``f``: a fresh creation rewrites the line that made the
name, a move goes above the failing line) or ``class C.__init__`` (rewrite ``self.attr = ...``).
Places are found in the cells as the user typed them and the edits applied bottom up. A place
in library code cannot be edited by the user: :class:`FixNotApplicable`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any


class FixNotApplicable(Exception):
    """The fix names a place the user cannot edit (a library) or that does not exist."""


@dataclass(frozen=True)
class CellFrame:
    cell: int  # index of the cell the frame's code is in
    function: str  # the frame's function name (``<module>`` for the cell itself)
    line: int  # 1-based line within that cell


def cell_frames(error: BaseException, numbers: dict[int, int]) -> list[CellFrame]:
    """The traceback's frames that run code of the case's cells, outermost first; a frame of
    library code appears as cell -1."""
    by_prefix = {f"<ipython-input-{n}-": index for index, n in numbers.items()}
    frames = []
    tb = error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        cell = next((i for p, i in by_prefix.items() if code.co_filename.startswith(p)), None)
        if cell is not None:
            frames.append(CellFrame(cell, code.co_name, tb.tb_lineno))
        elif "site-packages" in code.co_filename and "reports-" in code.co_filename:
            frames.append(CellFrame(-1, code.co_name, tb.tb_lineno))
        tb = tb.tb_next
    return frames


@dataclass(frozen=True)
class _Edit:
    """Lines ``start..end`` of a cell (as the user typed it) replaced by ``text``; an insertion
    above line ``start`` has ``end == start - 1``."""

    start: int
    end: int
    text: str
    order: int


def apply_fix_lines(
    cells: list[str], failing: int, frames: list[CellFrame], fix_lines: list[Any]
) -> tuple[list[str], int]:
    """The cells with every fix line typed in; and the first cell edited (re-run from there).
    Places are found in the cells as typed; the edits are applied afterwards, bottom up, so
    one fix line never shifts the place of another."""
    edits: dict[int, list[_Edit]] = {}
    cell_frame = next((f for f in frames if f.cell == failing and f.function == "<module>"), None)
    for order, fix in enumerate(fix_lines):
        index, edit = _place_fix(cells, failing, frames, cell_frame, fix.where, fix.source, order)
        edits.setdefault(index, []).append(edit)
    edited = list(cells)
    for index, cell_edits in edits.items():
        lines = edited[index].splitlines()
        # bottom up; at one place a replacement goes first, then insertions in reverse order
        for edit in sorted(
            cell_edits, key=lambda e: (e.start, e.end >= e.start, e.order), reverse=True
        ):
            lines[edit.start - 1 : edit.end] = [edit.text]
        edited[index] = "\n".join(lines)
    return edited, min([failing, *edits])


def _place_fix(
    cells: list[str],
    failing: int,
    frames: list[CellFrame],
    cell_frame: CellFrame | None,
    where: str,
    source: str,
    order: int,
) -> tuple[int, _Edit]:
    if where in ("cell", "loop") or where.startswith("line "):
        if cell_frame is None:
            raise FixNotApplicable(f"no line of the failing cell on the traceback for {where}")
        lines = cells[failing].splitlines()
        if where.startswith("line "):
            return failing, _replacement(lines, int(where.split()[1]), source, order)
        if where == "loop":
            return failing, _insertion(lines, cell_frame.line, source, True, order)
        # "cell": above the cell's own statement that holds the failing line, not inside it
        return failing, _insertion(
            lines, _top_statement(lines, cell_frame.line), source, False, order
        )
    if where.startswith("frame "):
        name = where.removeprefix("frame ")
        frame = next((f for f in reversed(frames) if f.function == name), None)
        if frame is None or frame.cell < 0:
            raise FixNotApplicable(f"{name}() is library code, not the user's")
        lines = cells[frame.cell].splitlines()
        target = _assigned_name(source)
        at = _assignment_line(lines, target, frame.line) if target else None
        if target and at is not None and not _reads(source, target):
            # a fresh creation (``H = torch.zeros(..., device=...)``) rewrites the old one
            return frame.cell, _replacement(lines, at, source, order)
        return frame.cell, _insertion(lines, frame.line, source, False, order)
    if where.startswith("class "):
        cls = where.removeprefix("class ").partition(".")[0]
        index = next((i for i, c in enumerate(cells) if f"class {cls}" in c), None)
        if index is None:
            raise FixNotApplicable(f"class {cls} is not defined in a cell")
        lines = cells[index].splitlines()
        attribute = source.split('"')[1] if '"' in source else ""
        at = next((n for n, text in enumerate(lines, 1) if f"self.{attribute} =" in text), None)
        if at is None:
            raise FixNotApplicable(f"no `self.{attribute} = ...` in class {cls}")
        return index, _replacement(lines, at, source, order)
    raise FixNotApplicable(f"unknown place {where!r}")


def _statement_at(lines: list[str], line: int) -> ast.stmt | None:
    """The innermost statement of the code ``lines`` that spans ``line``."""
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return None
    best = None
    for node in ast.walk(tree):  # breadth first: a later match is a deeper one
        spans = isinstance(node, ast.stmt) and node.lineno <= line <= (
            node.end_lineno or node.lineno
        )
        if spans and (best is None or node.lineno >= best.lineno):
            best = node
    return best


def _top_statement(lines: list[str], line: int) -> int:
    """The first line of the cell's top-level statement that spans ``line``."""
    try:
        body = ast.parse("\n".join(lines)).body
    except SyntaxError:
        return line
    for node in body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            return node.lineno
    return line


def _indent(lines: list[str], line: int) -> int:
    return len(lines[line - 1]) - len(lines[line - 1].lstrip())


def _insertion(lines: list[str], line: int, source: str, in_loop: bool, order: int) -> _Edit:
    if in_loop:
        loops = [
            n
            for n in ast.walk(ast.parse("\n".join(lines)))
            if isinstance(n, (ast.For, ast.While))
            and n.lineno <= line <= (n.end_lineno or n.lineno)
        ]
        if not loops:
            raise FixNotApplicable("the failing line is in no loop")
        body = max(loops, key=lambda n: n.lineno).body[0]
        at, indent = body.lineno, body.col_offset
    else:
        node = _statement_at(lines, line)
        at = line if node is None else node.lineno
        indent = _indent(lines, at)
    return _Edit(at, at - 1, " " * indent + source, order)


def _replacement(lines: list[str], line: int, source: str, order: int) -> _Edit:
    node = _statement_at(lines, line)
    start, end = (line, line) if node is None else (node.lineno, node.end_lineno or node.lineno)
    return _Edit(start, end, " " * _indent(lines, start) + source, order)


def _assigned_name(source: str) -> str | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    if tree.body and isinstance(tree.body[0], ast.Assign):
        target = tree.body[0].targets[0]
        if isinstance(target, ast.Name):
            return target.id
    return None


def _reads(source: str, name: str) -> bool:
    """Whether the statement ``source`` reads ``name`` (a move of the old value)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True
    return any(
        isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
        for n in ast.walk(tree)
    )


def _assignment_line(lines: list[str], name: str, before: int) -> int | None:
    """The last line before ``before`` that assigns ``name`` (alone or in a tuple), within the
    innermost function around ``before``."""
    try:
        tree: ast.AST = ast.parse("\n".join(lines))
    except SyntaxError:
        return None
    functions = [
        n
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.lineno <= before <= (n.end_lineno or n.lineno)
    ]
    if functions:
        tree = max(functions, key=lambda n: n.lineno)
    found = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and node.lineno <= before:
            for target in node.targets:
                names = [target] if isinstance(target, ast.Name) else getattr(target, "elts", [])
                assigns = any(isinstance(n, ast.Name) and n.id == name for n in names)
                if assigns and (found is None or node.lineno > found):
                    found = node.lineno
    return found
