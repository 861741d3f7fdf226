"""A cell parsed once, for every consumer (the hook's rescan, ``%%devicecheck``, diagnosis).

With a shell, IPython's own ``shell.transform_cell`` turns magics and ``!`` lines into Python
first (the code IPython really ran, so traceback line numbers match the tree); without one a
conservative stand-in keeps the line count. Then ``ast.parse``. Pure: no IPython import.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import re
import types
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .. import objects

__all__ = ["Cell", "Creation", "parse_cell"]

_MAGIC_LINE = re.compile(r"^(\s*)(%%?|!)\s*\w*\s*")
_CACHE: OrderedDict[tuple[int, str], Cell] = OrderedDict()
_CACHE_SIZE = 16

#: ``torch.<name>(...)`` calls that create a tensor on ``device=`` (cpu when not given).
FACTORIES = frozenset(
    [
        "tensor",
        "as_tensor",
        "asarray",
        "ones",
        "zeros",
        "empty",
        "full",
        "rand",
        "randn",
        "randint",
        "randperm",
        "arange",
        "linspace",
        "logspace",
        "eye",
        "empty_strided",
        "sparse_coo_tensor",
        "complex",
        "polar",
        "tril_indices",
        "triu_indices",
        "bartlett_window",
        "hann_window",
        "hamming_window",
        "blackman_window",
        "kaiser_window",
        "normal",
        "scalar_tensor",
    ]
)


def _fallback_transform(cell: str) -> str:
    """Without IPython: blank a leading ``%%magic`` line, turn ``%time expr`` into ``expr`` and
    ``!cmd`` into ``pass`` -- line numbers stay where they were."""
    lines = cell.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        lines[0] = ""
    fixed = []
    for line in lines:
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith("!"):
            fixed.append(indent + "pass")
        elif stripped.startswith("%"):
            rest = _MAGIC_LINE.sub(r"\1", line)
            fixed.append(rest if rest.strip() else indent + "pass")
        else:
            fixed.append(line)
    return "\n".join(fixed)


def parse_cell(source: Any, shell: Any = None) -> Cell:
    """The :class:`Cell` for ``source`` (cached: the hook and a diagnosis share one parse)."""
    if not isinstance(source, str):
        source = ""
    key = (id(shell) if shell is not None else 0, source)
    cell = _CACHE.get(key)
    if cell is not None:
        _CACHE.move_to_end(key)
        return cell
    cell = Cell._make(source, shell)
    _CACHE[key] = cell
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return cell


def chain_of(node: ast.AST) -> str | None:
    """``a.b.c`` for an attribute chain on a name, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


@dataclass(frozen=True)
class Creation:
    """An expression in a line that creates a tensor nobody named (``torch.ones(3)``)."""

    node: ast.expr = field(compare=False, repr=False)
    text: str
    device: str | None  # statically known device, None when unknown
    device_expr: str | None  # the ``device=`` argument as written, e.g. ``dev``
    #: the call's result is moved (``make_mask(3).to(dev)``) instead of made on the device: a
    #: user function's result, whose insides the cell cannot change
    wrap: bool = False


@dataclass(frozen=True, eq=False)
class Cell:
    source: str
    code: str  # the Python IPython ran (after transform_cell), or the source
    tree: ast.Module | None
    #: the shell whose ``transform_cell`` made ``code`` (None: the stand-in did)
    shell: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def _make(cls, source: str, shell: Any) -> Cell:
        candidates: list[str] = []
        if shell is not None:
            with contextlib.suppress(Exception):
                candidates.append(shell.transform_cell(source))
        candidates += [source, _fallback_transform(source)]
        for code in candidates:
            try:
                return cls(source, code, ast.parse(code), shell)
            except Exception:
                continue
        return cls(source, source, None, shell)

    # -- names --------------------------------------------------------------------------------
    @cached_property
    def names_read(self) -> tuple[str, ...]:
        """Top-level names the cell reads (the roots of ``model.fc.weight`` count as ``model``)."""
        if self.tree is None:
            return ()
        seen: dict[str, None] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                seen.setdefault(node.id)
        return tuple(seen)

    @cached_property
    def global_names(self) -> tuple[str, ...]:
        """The global names the cell's code mentions (reads, binds, deletes, and attribute
        names), its generator expressions, lambdas and nested functions included (a
        ``list(model.half() for _ in ...)`` reaches ``model`` from nested code): what the hook
        rescans. From the compiled code, like ``co_names``."""
        if self.tree is None:
            return ()
        try:
            code = compile(self.tree, "<torchdevice_magic>", "exec", dont_inherit=True)
        except Exception:
            return ()
        found: dict[str, None] = dict.fromkeys(code.co_names)
        nested = [const for const in code.co_consts if isinstance(const, types.CodeType)]
        while nested:
            inner = nested.pop()
            found.update(dict.fromkeys(inner.co_names))
            nested += (const for const in inner.co_consts if isinstance(const, types.CodeType))
        return tuple(found)

    @cached_property
    def reads(self) -> tuple[tuple[str, int, int], ...]:
        """Names and attribute chains read (Load context only: an assignment target is never
        an input), with their first position, in source order."""
        if self.tree is None:
            return ()
        found: dict[str, tuple[int, int]] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                chain = chain_of(node)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                chain = node.id
            else:
                continue
            if chain is None:
                continue
            pos = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
            if chain not in found or pos < found[chain]:
                found[chain] = pos
        ordered = sorted(found, key=lambda k: (found[k], k.count(".")))
        return tuple((k, *found[k]) for k in ordered[:300])

    @cached_property
    def attributes_set(self) -> tuple[str, ...]:
        """The names whose attributes the cell sets or deletes (``model.mask = ...``,
        ``net.pos.pe = ...``): an object changed in a way no cheap signature sees."""
        if self.tree is None:
            return ()
        found: dict[str, None] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                chain = chain_of(node)
                if chain is not None:
                    found.setdefault(chain.split(".", 1)[0])
        return tuple(found)

    @cached_property
    def loop_vars(self) -> frozenset[str]:
        out: set[str] = set()
        if self.tree is None:
            return frozenset()
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.For, ast.AsyncFor)):
                for target in ast.walk(node.target):
                    if isinstance(target, ast.Name):
                        out.add(target.id)
        return frozenset(out)

    def loader_batches(self, namespace: Any) -> frozenset[str]:
        """The targets of the cell's ``for`` loops over a DataLoader of ``namespace``
        (``for x, y in loader``, ``enumerate(loader)``, ``tqdm(loader)``, ``zip(...)``): batches
        on the host, where the loader makes them, which the loop body moves."""
        if self.tree is None:
            return frozenset()
        T = objects.TorchTypes.current()
        if T is None:
            return frozenset()
        found: set[str] = set()
        for node in ast.walk(self.tree):
            if not isinstance(node, (ast.For, ast.AsyncFor)):
                continue
            iterated = [n.id for n in ast.walk(node.iter) if isinstance(n, ast.Name)]
            if not any(_is_loader(T, namespace, name) for name in iterated):
                continue
            found.update(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
        return frozenset(found)

    def moved_only(self, namespace: Any) -> frozenset[str]:
        """Names and chains the cell reads only to move them (``x.to(dev)``, ``x.cuda()``,
        ``x.cpu()``, the device known): no op of the cell sees them where they are, only the
        copy the move makes (which a wrong target makes the culprit, as a creation)."""
        if self.tree is None:
            return frozenset()
        parents = {
            id(child): node for node in ast.walk(self.tree) for child in ast.iter_child_nodes(node)
        }
        moved: set[str] = set()
        used: set[str] = set()
        for node in ast.walk(self.tree):
            if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(
                getattr(node, "ctx", None), ast.Load
            ):
                continue
            chain = chain_of(node)
            if chain is None:
                continue
            parent = parents.get(id(node))
            if isinstance(node, ast.Attribute) and _moves_to_device(node, parent, namespace):
                continue  # the ``x.to`` of ``x.to(dev)``: the method, not a read
            if isinstance(parent, ast.Attribute) and _moves_to_device(
                parent, parents.get(id(parent)), namespace
            ):
                moved.add(chain)
            else:
                used.add(chain)
        return frozenset(moved - used)

    def reads_in_line(self, lineno: int | None) -> frozenset[str]:
        stmt = self.statement_at(lineno)
        if stmt is None:
            return frozenset()
        out = set()
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(
                getattr(node, "ctx", None), ast.Load
            ):
                chain = chain_of(node)
                if chain:
                    out.add(chain)
        return frozenset(out)

    # -- lines ----------------------------------------------------------------------------------
    def top_statement(self, lineno: int | None) -> int | None:
        """The index of the cell's top-level statement that holds line ``lineno`` (the cell
        runs them in order: a failure in one means no later one ran)."""
        if self.tree is None or lineno is None:
            return None
        for index, stmt in enumerate(self.tree.body):
            if stmt.lineno <= lineno <= (stmt.end_lineno or stmt.lineno):
                return index
        return None

    def statement_at(self, lineno: int | None) -> ast.stmt | None:
        """The innermost simple statement covering ``lineno`` (1-based, in :attr:`code`)."""
        if self.tree is None or not lineno:
            return None
        best: ast.stmt | None = None
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.stmt):
                continue
            start, end = node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno
            inside = start <= lineno <= end and not _is_compound(node)
            if inside and (best is None or node.lineno >= best.lineno):
                best = node
        return best

    def line_text(self, lineno: int | None) -> str:
        stmt = self.statement_at(lineno)
        return ast.get_source_segment(self.code, stmt) or "" if stmt is not None else ""

    def creations_in(self, lineno: int | None, namespace: Any = None) -> list[Creation]:
        """Tensor-creating expressions in the statement at ``lineno`` that are not names:
        ``torch.ones(3)``, ``torch.zeros(2, device=dev)``, ``x.to("meta")``."""
        stmt = self.statement_at(lineno)
        if stmt is None:
            return []
        out: list[Creation] = []
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            found = _creation(node, namespace)
            if found is not None:
                out.append(found)
        out.sort(key=lambda c: (c.node.lineno, c.node.col_offset))
        return out

    def rewrite(self, lineno: int | None, creations: list[Creation], device: str) -> str | None:
        """The statement at ``lineno`` with each of ``creations`` made on ``device``."""
        stmt = self.statement_at(lineno)
        if stmt is None or not creations:
            return None
        targets = {id(c.node): c for c in creations}
        new_stmt = copy.deepcopy(stmt)
        placed = 0
        for old, new in zip(ast.walk(stmt), ast.walk(new_stmt), strict=False):
            if id(old) in targets:
                # the deep copy walks in the same order: new is the copy of a creating Call
                # (ast.walk yields AST, the helpers take that Call)
                if targets[id(old)].wrap:
                    _move_result(new, device)  # type: ignore[arg-type]  # a Call, see above
                else:
                    _place_on(new, device)  # type: ignore[arg-type]  # a Call, see above
                placed += 1
        if placed == 0:
            return None
        try:
            return ast.unparse(new_stmt)
        except Exception:
            return None

    # -- what the cell asks for ---------------------------------------------------------------
    def to_target(self) -> str | None:
        """The device the cell's ``.to(...)``/``.cuda()`` asked for (meta copy errors)."""
        if self.tree is None:
            return None
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            attr = node.func.attr
            if attr in ("cuda", "cpu") and not node.args:
                return attr
            if attr not in ("to", "to_empty"):
                continue
            values = list(node.args[:1]) + [k.value for k in node.keywords if k.arg == "device"]
            for value in values:
                text = _constant_device(value)
                if text:
                    return text
        return None

    def out_argument(self, lineno: int | None) -> str | None:
        """The ``out=`` argument of a call in the statement at ``lineno``, as written."""
        stmt = self.statement_at(lineno)
        if stmt is None:
            return None
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "out":
                        try:
                            return ast.unparse(kw.value)
                        except Exception:
                            return None
        return None


def _is_loader(T: Any, namespace: Any, name: str) -> bool:
    try:
        value = namespace.get(name)
    except Exception:
        return False
    return value is not None and objects.kind_of(T, value) == objects.Kind.DATALOADER


def _is_compound(node: ast.stmt) -> bool:
    return isinstance(
        node,
        (
            ast.For,
            ast.AsyncFor,
            ast.While,
            ast.If,
            ast.With,
            ast.AsyncWith,
            ast.Try,
            ast.FunctionDef,
            ast.AsyncFunctionDef,
            ast.ClassDef,
        ),
    ) or type(node).__name__ in ("TryStar", "Match")


def _constant_device(value: ast.AST) -> str | None:
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    if (
        isinstance(value, ast.Call)
        and chain_of(value.func) in ("torch.device", "device")
        and value.args
        and isinstance(value.args[0], ast.Constant)
        and isinstance(value.args[0].value, str)
    ):
        return value.args[0].value
    return None


def _device_value(value: ast.AST, namespace: Any) -> tuple[str | None, str | None]:
    """(device, as written) for a ``device=`` argument."""
    try:
        written = ast.unparse(value)
    except Exception:
        written = None
    const = _constant_device(value)
    if const is not None:
        return const, written
    if isinstance(value, ast.Name) and namespace is not None:
        try:
            bound = namespace.get(value.id, None)
        except Exception:
            bound = None
        if isinstance(bound, str):
            return bound, written
        if type(bound).__name__ == "device" and type(bound).__module__ == "torch":
            return str(bound), written
    return None, written


def _creation(node: ast.Call, namespace: Any) -> Creation | None:
    func = node.func
    chain = chain_of(func)
    try:
        text = ast.unparse(node)
    except Exception:
        return None
    if chain is not None and chain.startswith("torch.") and chain.count(".") == 1:
        name = chain.split(".", 1)[1]
        if name not in FACTORIES:
            return None
        for kw in node.keywords:
            if kw.arg == "device":
                device, written = _device_value(kw.value, namespace)
                return Creation(node, text, device, written)
        return Creation(node, text, "cpu", None)
    if isinstance(func, ast.Attribute) and func.attr in ("to", "cuda", "cpu"):
        if func.attr == "cpu":
            return Creation(node, text, "cpu", '"cpu"')
        if func.attr == "cuda":
            return Creation(node, text, "cuda", '"cuda"')
        values = list(node.args[:1]) + [k.value for k in node.keywords if k.arg == "device"]
        for value in values:
            device, written = _device_value(value, namespace)
            if device is not None or written:
                return Creation(node, text, device, written)
    return None


def _moves_to_device(method: ast.Attribute, call: ast.AST | None, namespace: Any) -> bool:
    """Whether ``method`` is the ``.to``/``.cuda``/``.cpu`` of a ``call`` that moves its
    receiver to a known device (``.to(torch.float16)`` only changes the dtype)."""
    if not isinstance(call, ast.Call) or call.func is not method:
        return False
    if method.attr in ("cuda", "cpu"):
        return True
    if method.attr != "to":
        return False
    values = list(call.args[:1]) + [k.value for k in call.keywords if k.arg == "device"]
    return any(_device_value(value, namespace)[0] is not None for value in values)


def _move_result(node: ast.Call, device: str) -> None:
    """``f(a)`` becomes ``f(a).to(device)`` (in place: the node keeps its identity)."""
    inner = ast.Call(func=node.func, args=node.args, keywords=node.keywords)
    node.func = ast.Attribute(value=inner, attr="to", ctx=ast.Load())
    node.args = [ast.Constant(device)]
    node.keywords = []


def user_function_calls(
    stmt: ast.stmt | None, namespace: Any, is_user: Any, running: frozenset[Any] = frozenset()
) -> list[Creation]:
    """Calls in ``stmt`` of plain functions the user defined (``make_mask(3)``): where a tensor
    nobody named comes from when no torch factory in the line made it. Functions whose code
    was ``running`` when the error came are left out: the error is inside them, not in what
    they returned."""
    out: list[Creation] = []
    if stmt is None or namespace is None:
        return out
    for node in ast.walk(stmt):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        try:
            func = namespace.get(node.func.id)
            if type(func) is not types.FunctionType or not is_user(func.__code__.co_filename):
                continue
            if func.__code__ in running:
                continue
            text = ast.unparse(node)
        except Exception:
            continue
        out.append(Creation(node, text, None, None, wrap=True))
    return out


def _place_on(node: ast.Call, device: str) -> None:
    """Make the creating call ``node`` produce its tensor on ``device`` (in place)."""
    const = ast.Constant(device)
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in ("cuda", "cpu"):
        func.attr = "to"
        node.args = [const]
        return
    if isinstance(func, ast.Attribute) and func.attr == "to":
        for kw in node.keywords:
            if kw.arg == "device":
                kw.value = const
                return
        if node.args:
            node.args[0] = const
            return
        node.args = [const]
        return
    for kw in node.keywords:
        if kw.arg == "device":
            kw.value = const
            return
    node.keywords.append(ast.keyword(arg="device", value=const))
