"""What the user's code says, read without running any of it: a function's source (through
linecache, notebook cells included) and its parsed tree, a frame's arguments, the names its
``for`` loops bind and the statement it was running, the instance a method runs on, the
``torch.zeros(...)`` that made a local (and the same statement with ``device=``). Standard library only.
"""

from __future__ import annotations

import ast
import re
from typing import Any


def argument_names(code: Any) -> set[str]:
    try:
        n = code.co_argcount + code.co_kwonlyargcount
        return set(code.co_varnames[:n])
    except Exception:
        return set()


_PASS_THROUGH = frozenset({"UNPACK_SEQUENCE", "UNPACK_EX", "EXTENDED_ARG", "CACHE", "NOP"})


def method_instance(code: Any, local_items: list[tuple[str, Any]]) -> Any:
    """The instance a method runs on: ``self``, or a first argument called otherwise
    (``def forward(this, x)``) when the function is that object's class's own method (read from
    the classes' ``__dict__``: no user code runs). None for a plain function."""
    try:
        if not code.co_argcount:
            return None
        first = code.co_varnames[0]
        obj = next((v for k, v in local_items if k == first), None)
        if obj is None:
            return None
        if first == "self":
            return obj
        for klass in type(obj).__mro__:
            func = klass.__dict__.get(code.co_name)
            if getattr(func, "__code__", None) is code:
                return obj
    except Exception:
        return None
    return None


def loop_locals(code: Any) -> set[str]:
    """Names a function's ``for`` loops bind (``for batch_X in xs``, ``for x, y in loader``):
    the stores right after each FOR_ITER in its bytecode (no source needed)."""
    import dis

    names: set[str] = set()
    try:
        after_for = False
        for ins in dis.get_instructions(code):
            if ins.opname == "FOR_ITER":
                after_for = True
            elif after_for and ins.opname in ("STORE_FAST", "STORE_NAME", "STORE_DEREF"):
                names.add(str(ins.argval))
            elif after_for and ins.opname in _PASS_THROUGH:
                continue
            else:
                after_for = False
    except Exception:
        return set()
    return names


def names_in_running_line(frame: Any) -> set[str]:
    """Names the statement a (finished) frame was running when the error came reads -- the
    whole statement, where a call spans lines (``self.lstm(\\n e, (h0, c0))``)."""
    import linecache

    try:
        code, lineno = frame.f_code, frame.f_lineno
    except Exception:
        return set()
    found = function_tree(code)
    if found is not None:
        tree, first = found
        rel = lineno - first + 1
        best = None
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.stmt)
                and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node.lineno <= rel <= (node.end_lineno or node.lineno)
                and (best is None or node.lineno >= best.lineno)
            ):
                best = node
        if best is not None:
            return {n.id for n in ast.walk(best) if isinstance(n, ast.Name)}
    try:
        line = linecache.getline(code.co_filename, lineno)
    except Exception:
        return set()
    return set(re.findall(r"[A-Za-z_]\w*", line))


def function_tree(code: Any) -> tuple[ast.AST, int] | None:
    """A function's source parsed (read with linecache, notebook cells included) and the
    file line of its first line; None when the source is not available."""
    found = function_source(code)
    if found is None:
        return None
    try:
        return ast.parse(found[0]), found[1]
    except Exception:
        return None


def function_source(code: Any) -> tuple[str, int] | None:
    """A function's source, dedented (read with linecache, notebook cells included), and the
    file line of its first line; None when the source is not available."""
    import linecache

    try:
        lines = linecache.getlines(code.co_filename)
        start = code.co_firstlineno - 1
        first = lines[start]
    except Exception:
        return None
    indent = len(first) - len(first.lstrip())
    body = [first]
    for line in lines[start + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
    return "".join(line[indent:] if len(line) > indent else line for line in body), start + 1


#: torch factories that make a tensor on the default device unless given ``device=`` (the
#: ``*_like`` ones follow their argument's device)
_FACTORIES = frozenset(
    {
        "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm", "arange",
        "linspace", "logspace", "eye", "tensor", "as_tensor",
    }
)  # fmt: skip


def creation_on_device(code: Any, name: str, device_expr: str) -> str | None:
    """``name = torch.zeros(...)`` in the function of ``code`` with no ``device=``: the same
    statement making it on ``device_expr``. None where the local is made otherwise."""
    found = function_tree(code)
    if found is None:
        return None
    tree, _ = found
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if not (isinstance(target, ast.Name) and target.id == name):
            continue
        call = node.value
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "torch"
            and call.func.attr in _FACTORIES
            and not any(k.arg == "device" for k in call.keywords)
        ):
            continue
        new = ast.Assign(
            targets=[target],
            value=ast.Call(
                func=call.func,
                args=call.args,
                keywords=[
                    *call.keywords,
                    ast.keyword("device", ast.parse(device_expr, mode="eval").body),
                ],
            ),
        )
        return ast.unparse(ast.fix_missing_locations(new))
    return None


def running_codes(err: BaseException) -> frozenset[Any]:
    """The code objects on ``err``'s traceback."""
    codes: list[Any] = []
    tb = getattr(err, "__traceback__", None)
    while tb is not None and len(codes) < 10_000:
        try:
            codes.append(tb.tb_frame.f_code)
            tb = tb.tb_next
        except Exception:
            break
    return frozenset(codes)
