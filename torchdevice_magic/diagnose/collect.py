"""Where candidates are found, and what they are called.

Three places: the names the failing cell reads (looked up in the user's namespace with plain
getattr, as the cell did, never through a tensor), the locals of the innermost *user* frames
of the traceback (and the plain tensor attributes a Module method reads, which ``.to()``
never moved), and a tensor nobody named made in the failing line of a user function. A
candidate the namespace also holds is named after that binding (``model.enc[0]``), so the fix
is something a cell can run. Objects are read only through ``__dict__``/``_modules`` and
identity; what they hold comes from the scan (:mod:`.candidates`).
"""

from __future__ import annotations

import keyword
import linecache
import re
import types
from collections.abc import Callable, Mapping
from typing import Any

from .. import objects
from .candidates import (
    Candidate,
    CandidateFacts,
    Collector,
    expression_candidates,
    is_type,
    quote_device,
)
from .cells import Cell, parse_cell
from .frames import library_frames, user_frames
from .sources import (
    argument_names,
    function_source,
    loop_locals,
    method_instance,
    names_in_running_line,
)

_STEP = re.compile(r'\.([A-Za-z_]\w*)|\[(\d+)\]|\["([^"\\]*)"\]')


def resolve_chain(namespace: Mapping[str, Any], chain: str, torch: Any) -> tuple[bool, Any]:
    """Look ``a.b.c`` up with plain getattr, as the cell itself did; never through a tensor
    (``x.T``, ``x.grad``, ``x.data`` are views or parts of ``x``, which is listed itself).
    ``model[2].scale`` / ``model["enc"]`` (the fix's own spelling of a submodule) are read from
    the module's ``_modules`` dict, so no ``__getitem__`` of the user's runs."""
    head, sep, tail = chain.partition(".")
    bracket = head.find("[")
    if bracket > 0:
        head, tail, sep = head[:bracket], chain[bracket:], ""
    steps: list[tuple[str, str]] = []
    rest = (sep and "." + tail) or tail
    pos = 0
    while pos < len(rest):
        m = _STEP.match(rest, pos)
        if m is None:
            return False, None
        attr, index, key = m.groups()
        steps.append(("attr", attr) if attr is not None else ("item", index or key or ""))
        pos = m.end()
    try:
        if head not in namespace:
            return False, None
        obj = namespace[head]
    except Exception:
        return False, None
    for how, attr in steps:
        if torch is not None and is_type(obj, torch.Tensor):
            return False, None
        if is_type(obj, types.ModuleType):
            # ``torch.nn.functional`` etc.: library modules hold no user data
            return False, None
        try:
            if how == "item":
                if torch is None or not is_type(obj, torch.nn.Module):
                    return False, None
                children = object.__getattribute__(obj, "_modules")
                if attr not in children:
                    return False, None
                obj = children[attr]
            else:
                obj = getattr(obj, attr)
        except Exception:
            return False, None
    return True, obj


def submodule_expression(root_name: str, root: Any, path: str, torch: Any) -> str:
    """Python for the submodule that ``named_modules()`` calls ``path`` (``"2"``, ``"enc.0"``):
    ``model[2]``, ``model.enc[0]``, ``model["a-b"]`` -- something a cell can run, unlike the
    dotted name. Read from each module's ``_modules`` dict (no user code runs)."""
    nn = torch.nn
    fallback = f"{root_name}.get_submodule({quote_device(path)})"
    expr, mod = root_name, root
    for part in path.split("."):
        try:
            children = object.__getattribute__(mod, "_modules")
            child = children[part]
        except Exception:
            return fallback
        if part.isidentifier() and not keyword.iskeyword(part) and part not in type(mod).__dict__:
            expr += f".{part}"
        elif part.isdigit() and is_type(mod, (nn.Sequential, nn.ModuleList)):
            expr += f"[{part}]"
        elif is_type(mod, nn.ModuleDict):
            expr += f"[{quote_device(part)}]"
        else:
            return fallback
        mod = child
    return expr


def _is_namespace_dict(value: Any) -> bool:
    try:
        return type(value) is dict and "__builtins__" in value
    except Exception:
        return False


def _module_attribute_tensors(self_obj: Any, code: Any, torch: Any) -> list[tuple[str, Any]]:
    """Plain tensor attributes of a module that its method reads (``self.scale``), and plain
    lists, tuples and dicts of tensors or modules (``self.heads = []``, criteria with class
    weights): in the instance dict, so ``module.to()`` never moved them. Read from
    ``__dict__`` only: no property or ``__getattr__`` of the user's class runs."""
    try:
        instance = object.__getattribute__(self_obj, "__dict__")
        names = set(code.co_names)
    except Exception:
        return []
    out = []
    for name in sorted(names):
        try:
            value = dict.get(instance, name)
        except Exception:
            continue
        plain_tensor = is_type(value, torch.Tensor) and not is_type(value, torch.nn.Parameter)
        if plain_tensor or _plain_holder_of(value, torch) is not None:
            out.append((name, value))
    return out


def _plain_holder_of(value: Any, torch: Any) -> str | None:
    """``"modules"`` or ``"tensors"`` for a plain list/tuple/dict (exactly those types) whose
    items are modules or tensors; None for anything else."""
    if type(value) is dict:
        items = list(dict.values(value))[:1000]
    elif type(value) in (list, tuple):
        items = list(value)[:1000]
    else:
        return None
    if items and all(is_type(v, torch.nn.Module) for v in items):
        return "modules"
    if any(is_type(v, torch.Tensor) for v in items):
        return "tensors"
    return None


def collect_candidates(
    err: BaseException,
    chain: list[BaseException],
    namespace: Mapping[str, Any] | None,
    cell: Cell,
    torch: Any,
    lineno: int | None = None,
) -> list[Candidate]:
    """Every candidate of an error, each named as the user can write it, parts of another
    candidate dropped. ``lineno``: the cell's failing line, where known."""
    collector = Collector(torch)
    if cell.tree is not None and namespace is not None:
        _add_cell_reads(collector, namespace, cell, torch, lineno)
    _add_frame_locals(collector, err, chain, torch)
    _add_library_frames(collector, err, chain, torch)
    cands = collector.candidates()
    # Frame objects that the namespace also holds (e.g. ``self`` in forward() is ``model``):
    # name the fix after the namespace binding, which the user can run in a cell.
    if namespace is not None:
        _find_aliases(cands, collector, namespace, torch)
    collector.keepalive.clear()
    drop = _parts_of_others(cands)
    _mark_covered(cands)
    return [c for c in cands if c.label not in drop]


def _add_cell_reads(
    collector: Collector,
    namespace: Mapping[str, Any],
    cell: Cell,
    torch: Any,
    lineno: int | None,
) -> None:
    """What the cell reads, looked up in the namespace; not what only statements after the
    failing one read (``opt.step()`` after a forward that failed never ran)."""
    loop_vars = cell.loop_vars
    moved_only = cell.moved_only(namespace)
    failing = cell.top_statement(lineno)
    for chain_name, first_line, _ in cell.reads:
        if failing is not None and (cell.top_statement(first_line) or 0) > failing:
            continue
        try:
            ok, obj = resolve_chain(namespace, chain_name, torch)
            if ok and chain_name in moved_only and _moves_without_error(obj, torch):
                continue  # only its moved copy reaches an op (``xb = x.to(dev)``)
            if ok:
                collector.add(chain_name, "cell", obj, loop_var=chain_name in loop_vars)
        except Exception:
            pass  # a hostile object is skipped, not fatal
        obj = None


def _moves_without_error(obj: Any, torch: Any) -> bool:
    """A tensor whose ``.to(device)`` cannot be what raised: not a meta tensor (copying one
    out raises, and the diagnosis names it)."""
    try:
        return is_type(obj, torch.Tensor) and obj.device.type != "meta"
    except Exception:
        return False


def _add_frame_locals(
    collector: Collector, err: BaseException, chain: list[BaseException], torch: Any
) -> None:
    """Locals of the innermost user frames (outermost of them first, so a tensor that is
    ``batch_X`` in train() is not renamed ``x`` from forward())."""
    frames: list[Any] = []
    try:
        frames = _first_frames(err, chain, user_frames)
        for frame in frames:
            _add_one_frame(collector, frame, torch)
    finally:
        frames = []


def _add_library_frames(
    collector: Collector, err: BaseException, chain: list[BaseException], torch: Any
) -> None:
    """Below the user's last frame, a library's own frames: the tensors their failing line
    reads (``H`` a library made without ``device=``) and the plain tensor attributes their
    module methods read (``m.phase_advance``), which ``m.to()`` never moved. Only what the
    running line reads: a library function's other locals are not the user's business."""
    frames: list[Any] = []
    try:
        frames = _first_frames(err, chain, library_frames)
        for frame in frames:
            _add_one_library_frame(collector, frame, torch)
    finally:
        frames = []


def _first_frames(
    err: BaseException, chain: list[BaseException], pick: Callable[[Any], list[Any]]
) -> list[Any]:
    """``pick``'s frames of the error's traceback, else of the first error of its chain that
    has any (a re-raised error's own traceback may hold none of them)."""
    for error in [err, *[c for c in chain if c is not err]]:
        frames = pick(getattr(error, "__traceback__", None))
        if frames:
            return frames
    return []


def _add_one_library_frame(collector: Collector, frame: Any, torch: Any) -> None:
    try:
        code = frame.f_code
        local_items = list(dict(frame.f_locals).items())
        where = f"{'/'.join(code.co_filename.split('/')[-2:])}:{frame.f_lineno}"
        text = linecache.getline(code.co_filename, frame.f_lineno).strip()
    except Exception:
        return
    if text:
        where = f"{where}: `{text[:120]}`"  # the line itself: torch.arange(m) is named
    self_obj = method_instance(code, local_items)
    line_names = names_in_running_line(frame)
    args = argument_names(code)
    for name, value in local_items[:2000]:
        if isinstance(name, str) and name in line_names and is_type(value, torch.Tensor):
            # an argument came from the caller (the user's call, through the library): it
            # was not made in the library, whatever the library did with it since
            position = _position(code, name) if name in args else None
            collector.add(
                name, f"frame {code.co_name}", value, library=where, arg_position=position
            )
    if is_type(self_obj, torch.nn.Module):
        _add_attributes_read(collector, self_obj, code, torch)


def _position(code: Any, name: str) -> int | None:
    try:
        return int(code.co_varnames.index(name))
    except Exception:
        return None


def _add_one_frame(collector: Collector, frame: Any, torch: Any) -> None:
    try:
        code = frame.f_code
        func = code.co_name
        local_items = list(dict(frame.f_locals).items())
    except Exception:
        return
    args = argument_names(code)
    loops = loop_locals(code)
    self_obj = method_instance(code, local_items)
    in_module_method = is_type(self_obj, torch.nn.Module)
    line_names = names_in_running_line(frame) if in_module_method else set()
    tensor_args = tuple(
        (k, id(v)) for k, v in local_items if k in args and is_type(v, torch.Tensor)
    )
    for name, value in local_items[:2000]:
        if not isinstance(name, str) or name.startswith("."):
            continue
        if _is_namespace_dict(value):
            continue  # a globals()/user_ns passed around (exec), not data
        # Inside a Module method, non-argument locals are intermediates computed from the
        # arguments and parameters (fixing the inputs fixes them) -- except what the failing
        # line reads that the method made itself: ``torch.zeros(...)`` without a device (an
        # LSTM's h0) is made on the cpu whatever the input.
        if in_module_method and name not in args:
            if name in line_names and is_type(value, torch.Tensor):
                collector.add(name, f"frame {func}", value, code=code, tensor_args=tensor_args)
            continue
        try:
            position = code.co_varnames.index(name) if name in args else None
        except Exception:
            position = None
        collector.add(
            name,
            f"frame {func}",
            value,
            loop_var=name in loops,
            module_method=in_module_method,
            arg_position=position,
        )
    if in_module_method:
        _add_attributes_read(collector, self_obj, code, torch)


def _add_attributes_read(collector: Collector, module: Any, code: Any, torch: Any) -> None:
    """The plain tensor attributes (and plain holders of modules) a module method reads: what
    ``module.to()`` never moved, named ``self.attr``."""
    for attr, value in _module_attribute_tensors(module, code, torch):
        collector.add(
            f"self.{attr}",
            f"attribute {type(module).__name__}",
            value,
            attr=attr,
            owner=id(module),
            cls=type(module),
            holds_modules=_plain_holder_of(value, torch) == "modules",
        )


def _parts_of_others(cands: list[Candidate]) -> set[str]:
    """A submodule the cell also reaches through its parent (``model`` and ``model.fc``) adds
    nothing if it is on the same devices: keep the parent. Likewise a parameter
    (``model.fc.weight``) next to its module. Storage sharing (from the scan) says who is part
    of whom. Returns the labels to drop."""
    by_label = {c.label: c for c in cands}
    drop: set[str] = set()
    for c in cands:
        if c.where.startswith("attribute"):
            continue
        for other_label in c.shares:
            parent = by_label.get(other_label)
            if parent is None or parent.label in drop:
                continue
            if parent.info.category == "module" and c.info.category == "module":
                # ``model`` and ``model.fc``: the bigger (or, equal, the first) is the parent
                part = parent.info.needed > c.info.needed or (
                    parent.info.needed == c.info.needed and parent.order < c.order
                )
            else:
                # a parameter of a module, the state dict of an optimizer (``opt.state``)
                part = parent.info.category in ("module", "optimizer") and c.info.category in (
                    "tensor",
                    "container",
                    "object",
                )
            if part and set(c.info.by_device) <= set(parent.info.by_device):
                drop.add(c.label)
                break
    return drop


def _mark_covered(cands: list[Candidate]) -> None:
    by_label = {c.label: c for c in cands}
    # ``for batch_X in xs: model(batch_X)``: moving the batch where it is used beats moving
    # the whole list, so the list is listed but not moved.
    # (not a module's own list: each call reads its items from it again)
    for c in cands:
        if c.where.startswith("attribute "):
            continue
        if c.info.category == "container" and any(
            by_label.get(label) is not None
            and by_label[label].info.category == "tensor"
            and (by_label[label].where == "cell" or by_label[label].loop_var)
            for label in c.shares
        ):
            c.covered = True


def _find_aliases(
    cands: list[Candidate], collector: Collector, namespace: Mapping[str, Any], torch: Any
) -> None:
    wanted = {c.obj_id: c for c in cands if c.where != "cell"}
    owners = {c.owner_id: c for c in cands if c.owner_id is not None}
    if not wanted and not owners:
        return
    try:
        items = list(dict.items(namespace) if isinstance(namespace, dict) else namespace.items())
    except Exception:
        return
    owner_names: dict[int, str] = {}
    owner_roots: dict[int, tuple[str, Any]] = {}  # owner id -> (namespace name, module)
    for name, value in items[:20_000]:
        if not isinstance(name, str) or name.startswith("_"):
            continue
        hit = wanted.get(id(value))
        if hit is not None and hit.alias is None:
            hit.alias = name
        if not (wanted or owners):
            continue
        for root_name, root in _modules_at(name, value, torch):
            if id(root) in owners and id(root) not in owner_names:
                owner_names[id(root)] = root_name
                owner_roots[id(root)] = (root_name, root)
            try:
                # names only (identity lookups), as torch itself enumerates submodules
                for n, (sub_name, sub) in enumerate(torch.nn.Module.named_modules(root)):
                    if n > 100_000:
                        break
                    if not sub_name:
                        continue
                    hit = wanted.get(id(sub))
                    in_owners = id(sub) in owners and id(sub) not in owner_names
                    if (hit is not None and hit.alias is None) or in_owners:
                        expr = submodule_expression(root_name, root, sub_name, torch)
                        if hit is not None and hit.alias is None:
                            hit.alias = expr
                        if in_owners:
                            owner_names[id(sub)] = expr
                            owner_roots[id(sub)] = (root_name, root)
            except Exception:
                continue
    for c in cands:
        if c.owner_id is not None:
            root = owner_roots.get(c.owner_id)
            owner = owner_names.get(c.owner_id)
            c.owner = owner
            if owner is not None:
                c.alias = f"{owner}.{c.attr}"
            if root is not None and c.cls is not None and c.attr:
                c.root_name = root[0]
                c.siblings = _left_behind_count(root[1], c.cls, c.attr, torch)


def _modules_at(name: str, value: Any, torch: Any) -> list[tuple[str, Any]]:
    """The modules a name reaches: itself, or those an object holds in its own attributes
    (``trainer.model``: a trainer's model is named through it). Instance dicts only."""
    if is_type(value, torch.nn.Module):
        return [(name, value)]
    own = objects.instance_dict(value)
    if not own:
        return []
    return [
        (f"{name}.{attr}", held)
        for attr, held in list(own.items())[:64]
        if isinstance(attr, str) and attr.isidentifier() and is_type(held, torch.nn.Module)
    ]


def _left_behind_count(root: Any, cls: Any, attr: str, torch: Any) -> int:
    """How many modules of ``cls`` in ``root`` hold ``attr`` as a plain tensor attribute
    (every ``Attn`` of a ModuleList was left behind by ``.to()``, not only the failing one)."""
    count = 0
    try:
        for n, module in enumerate(torch.nn.Module.modules(root)):
            if n > 100_000:
                break
            if type(module) is not cls:
                continue
            value = dict.get(object.__getattribute__(module, "__dict__"), attr)
            if is_type(value, torch.Tensor):
                count += 1
    except Exception:
        return count
    return count


def frame_creations(
    err: BaseException,
    chain: list[BaseException],
    missing: list[str],
    relevant: list[Candidate],
) -> None:
    """A tensor nobody named, made in the line of the innermost user function that failed
    (``return model(x) * torch.ones(3, 4)`` inside ``train()``): a candidate whose fix
    rewrites that line of the function."""
    frames: list[Any] = []
    for e in [err, *chain]:
        frames = user_frames(getattr(e, "__traceback__", None), limit=1)
        if frames:
            break
    if not frames:
        return
    try:
        frame = frames[-1]
        code, lineno, namespace = frame.f_code, frame.f_lineno, frame.f_globals
    except Exception:
        return
    frames = []
    found = function_source(code)
    if found is None:
        return
    source, first = found
    fcell = parse_cell(source)
    rel = lineno - first + 1
    relevant.extend(
        expression_candidates(
            fcell.creations_in(rel, namespace), missing, f"frame {code.co_name}", 100, rel, fcell
        )
    )


def unloaded_meta_buffers(name: str, module: Any, torch: Any, order: int) -> list[Candidate]:
    """The buffers of a module that are on meta and in no state dict (``persistent=False``):
    ``load_state_dict`` never fills them and ``to_empty`` leaves them uninitialised, so each
    is a culprit of its own (``m.inv_freq``), not just "parameters on meta"."""
    try:
        saved = set(torch.nn.Module.state_dict(module, keep_vars=True).keys())
        buffers = list(torch.nn.Module.named_buffers(module))[:1000]
    except Exception:
        return []
    out: list[Candidate] = []
    for path, buffer in buffers:
        try:
            on_meta = bool(buffer.is_meta)
            nbytes = int(buffer.numel()) * int(buffer.element_size())
        except Exception:
            continue
        if not on_meta or path in saved:
            continue
        facts = CandidateFacts(
            kind=type(buffer).__name__,
            category="tensor",
            by_device={"meta": nbytes},
            actual=0,
            dtype=str(buffer.dtype).removeprefix("torch."),
        )
        out.append(
            Candidate(f"{name}.{path}", "cell", id(buffer), facts, order=order, unsaved_buffer=True)
        )
    return out
