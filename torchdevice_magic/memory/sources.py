"""The holders of each kind, before the named storages are subtracted: the last error's
traceback, the output history (``Out``, ``_``), optimizer state of parameters no variable
holds, hooks' closures and bound objects, a second name of a deleted name's tensor; and what
a top-level name brings (:func:`_name_sources`). Each finds candidate objects and asks
``scan()`` for their storages.

Pure core: no IPython, no ipywidgets, torch never imported here.
"""

from __future__ import annotations

import functools
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..names import is_ipython_bookkeeping
from ..scan import Inventory, scan
from ..sourcefiles import code_owner
from .base import (
    _NOTHING_TO_HOLD,
    ErrorGetter,
    Keys,
    StorageKey,
    _is_tensor,
    _keys_of,
    _root_keys,
    _shallow_items,
    _Source,
)
from .closures import empty_dead_cells, frame_cells
from .graphs import (
    KeyMemo,
    _attribute_graph_sources,
    _graph_roots,
    _graph_source,
    _tensor_count,
    graph_tensors,
)

_CO_OPTIMIZED = 0x0001  # a function frame (fast locals), not a module or class body
_HOOK_DICTS = (
    ("_forward_hooks", "forward hook"),
    ("_forward_pre_hooks", "forward pre-hook"),
    ("_backward_hooks", "backward hook"),
    ("_backward_pre_hooks", "backward pre-hook"),
)
_GLOBAL_HOOKS = (
    ("_global_forward_hooks", "global forward hook"),
    ("_global_forward_pre_hooks", "global forward pre-hook"),
    ("_global_backward_hooks", "global backward hook"),
    ("_global_backward_pre_hooks", "global backward pre-hook"),
)


# -- the last error's traceback ----------------------------------------------------------------


def _last_exception() -> BaseException | None:
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return exc if isinstance(exc, BaseException) else None


def _last_errors(getter: ErrorGetter | None = None) -> list[BaseException]:
    """The errors whose tracebacks may still be held: the one ``getter`` names (for a shell's
    namespace, the one its last execution result keeps: :mod:`.interactive`) and
    ``sys.last_exc`` / ``sys.last_value``."""
    found: list[BaseException] = []
    if getter is not None:
        try:
            hint = getter()
        except Exception:
            hint = None
        if isinstance(hint, BaseException):
            found.append(hint)
    exc = _last_exception()
    if exc is not None and all(exc is not f for f in found):
        found.append(exc)
    return found


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        chain.append(link)
        link = link.__cause__ or link.__context__
    return chain


def _traceback_frames(exc: BaseException) -> list[types.FrameType]:
    frames: list[types.FrameType] = []
    seen: set[int] = set()
    for link in _exception_chain(exc):
        tb = link.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if id(frame) not in seen and frame.f_code.co_flags & _CO_OPTIMIZED:
                seen.add(id(frame))
                frames.append(frame)
            tb = tb.tb_next
    return frames


def _frame_locals(frame: types.FrameType) -> dict[str, Any]:
    try:
        return dict(frame.f_locals)
    except Exception:
        return {}


def _clear_frames(exc_ids: frozenset[int], getter: ErrorGetter | None) -> str:
    # exceptions can't be weakly referenced: find them again among the last errors, by id
    errors = [e for e in _last_errors(getter) if id(e) in exc_ids]
    if not errors:
        return "the last error is no longer that one: nothing released"
    cleared = 0
    frames = {id(f): f for e in errors for f in _traceback_frames(e)}
    cells = frame_cells(frames.values())
    for frame in frames.values():
        snapshot = frame.f_locals  # on Python < 3.13 a dict the frame keeps: empty it too
        try:
            frame.clear()
        except RuntimeError:
            continue  # still executing (or a suspended generator): leave it
        if isinstance(snapshot, dict):
            snapshot.clear()
        cleared += 1
    empty_dead_cells(cells, set(frames))
    return f"cleared the locals of {cleared} frames of the last error (%debug can't show them now)"


def _traceback_source(
    errors: list[BaseException], named: Keys | None = None, getter: ErrorGetter | None = None
) -> _Source | None:
    """The last errors' frames; ``where`` names the locals that hold the most memory no
    variable holds (the batch, the activations)."""
    if not errors:
        return None
    exc = errors[0]
    frames = list({id(f): f for e in errors for f in _traceback_frames(e)}.values())
    parts: dict[str, Any] = {}
    libraries: set[str] = set()  # the labels of library frames' locals (torch's included)
    for frame in frames:
        function = frame.f_code.co_name
        owner = code_owner(frame.f_code.co_filename).name  # "" for the user's code
        for local, value in _frame_locals(frame).items():
            label = f"{function}() local {local!r}"
            if label in parts:  # recursion: the same function twice
                label += f" (frame {len(parts)})"
            if owner:
                label += f" (in {owner})"
                libraries.add(label)
            parts[label] = value
    if not parts:
        return None
    inventory, keys = _keys_of(parts)
    if not keys:
        return None
    named = named or {}
    order = {label: index for index, label in enumerate(parts)}  # outermost frame first
    own: dict[str, Keys] = {}
    for root in inventory.names():
        own[root] = {k: v for k, v in _root_keys(inventory, root).items() if k not in named}
    # meta tensors hold no memory: a wrapper's ``args`` with the meta weights beside the
    # batch is no bigger than the user's own ``batch`` local, which then names the holder
    sizes = {
        root: sum(n for device, n in keys.values() if device != "meta")
        for root, keys in own.items()
    }
    # name the locals that add storages nobody named yet: the user's `batch`, not the same
    # tensor again as `args` of torch's (or a library's) wrappers around it, named only when
    # no frame of the user's holds what they hold
    ranked: list[str] = []
    covered: set[StorageKey] = set()
    rank = {r: (-sizes[r], r in libraries, order[r]) for r in sizes if sizes[r]}
    for root in sorted(rank, key=rank.__getitem__):
        if not own[root].keys() <= covered:
            ranked.append(root)
            covered.update(own[root])
    shown = ", ".join(ranked[:3]) + (f" and {len(ranked) - 3} more" if len(ranked) > 3 else "")
    return _Source(
        f"last error ({type(exc).__name__}): {shown or 'its frames'}",
        "traceback",
        keys,
        functools.partial(_clear_frames, frozenset(map(id, errors)), getter),
        "release it (clears those frames' locals; %debug can no longer show them)",
        len(frames),
        token=tuple(map(id, errors)),
    )


# -- the output history ------------------------------------------------------------------------


def _out_aliases(namespace: Any, key: Any, value: Any) -> list[str]:
    numbered = f"_{key}"
    aliases = [numbered] if isinstance(key, int) and namespace.get(numbered) is value else []
    return aliases + [a for a in ("_", "__", "___") if namespace.get(a) is value]


def _drop_output(
    namespace: Any, key: Any, expected_id: int, output_refs: Callable[[Any], None] | None
) -> str:
    out = namespace.get("Out")
    value = out.get(key) if isinstance(out, dict) else None
    if value is None or id(value) != expected_id:
        return f"Out[{key!r}] changed since: nothing released"
    aliases = _out_aliases(namespace, key, value)
    del out[key]
    if output_refs is not None:  # what the front end keeps besides (IPython's displayhook)
        output_refs(value)
    for alias in aliases:
        if alias.strip("_"):
            namespace.pop(alias, None)  # _12
        else:
            namespace[alias] = ""  # _, __, ___: what IPython starts them with
    return f"deleted Out[{key!r}]" + (f" and {', '.join(aliases)}" if aliases else "")


def _out_sources(
    namespace: Any,
    only: Iterable[Any] | None = None,
    output_refs: Callable[[Any], None] | None = None,
) -> list[_Source]:
    out = namespace.get("Out") if hasattr(namespace, "get") else None
    if not isinstance(out, dict) or not out:
        return []
    try:
        items = list(dict.items(out)) if only is None else [(k, out[k]) for k in only if k in out]
    except Exception:
        return []
    labels = {
        f"Out[{key!r}]": (key, value)
        for key, value in items
        if type(value) not in _NOTHING_TO_HOLD  # most outputs are text and numbers
    }
    inventory = scan({label: value for label, (_, value) in labels.items()})
    tensor_type = sys.modules["torch"].Tensor
    unders = [(a, namespace.get(a)) for a in ("_", "__", "___")]
    sources = []
    for label, (key, value) in labels.items():
        graph = [] if type(value) is tensor_type and value.grad_fn is None else _graph_roots(value)
        keys = _root_keys(inventory, label)
        if not keys and not graph:
            continue
        if graph:
            keys.update(_keys_of({label: graph_tensors(graph)})[1])
        if not keys:
            continue
        aliases = [f"_{key}"] if namespace.get(f"_{key}") is value else []
        aliases += [a for a, v in unders if v is value]
        where = label + (f" (also {', '.join(aliases)})" if aliases else "")
        sources.append(
            _Source(
                where,
                "output history",
                keys,
                functools.partial(_drop_output, namespace, key, id(value), output_refs),
                "end the cell with ; (or assign the result) so it is not kept",
                1,
                token=(key, id(value)),
            )
        )
    return sources


# -- optimizers of parameters no variable holds -----------------------------------------------


def _optimizer_params(optimizer: Any) -> list[Any]:
    params = []
    for group in optimizer.param_groups:
        params.extend(group["params"])
    return params


def _orphans(optimizer: Any, named_keys: Keys) -> list[Any]:
    params = [p for p in _optimizer_params(optimizer) if _is_tensor(p)]
    if not params:
        return []
    labels = {f"p{i}": p for i, p in enumerate(params)}
    inventory = scan(labels)
    orphans = []
    for label, param in labels.items():
        keys = _root_keys(inventory, label)
        own = [k for k, (device, _) in keys.items() if device != "meta"] or list(keys)
        if own and not any(map(named_keys.__contains__, own)):
            orphans.append(param)
    return orphans


def _drop_orphan_state(optimizer_ref: Any, orphan_ids: frozenset[int], name: str) -> str:
    optimizer = optimizer_ref()
    if optimizer is None:
        return f"{name} is gone already"
    dropped = 0
    for group in optimizer.param_groups:
        kept = [p for p in group["params"] if id(p) not in orphan_ids]
        dropped += len(group["params"]) - len(kept)
        group["params"] = kept
    for param in [p for p in optimizer.state if id(p) in orphan_ids]:
        del optimizer.state[param]
    return (
        f"{name} no longer updates (or keeps state for) {dropped} parameters no variable held; "
        "make a new optimizer for the model you train now"
    )


def _optimizer_source(name: str, optimizer: Any, named_keys: Keys) -> _Source | None:
    orphans = _orphans(optimizer, named_keys)
    if not orphans:
        return None
    parts: dict[str, Any] = {f"{name} parameters": orphans}
    state = []
    for param in orphans:
        try:
            value = optimizer.state.get(param)
        except Exception:
            value = None
        if isinstance(value, dict):
            state.append(dict(value))
    parts[f"{name} state"] = state
    _, keys = _keys_of(parts)
    if not keys:
        return None
    return _Source(
        f"{name}: state of parameters no variable holds",
        "optimizer",
        keys,
        functools.partial(
            _drop_orphan_state, weakref.ref(optimizer), frozenset(map(id, orphans)), name
        ),
        f"make {name} again for the current model (or del {name})",
        len(orphans),
        token=id(optimizer),
        key="optimizer",
        subtract=named_keys,
    )


# -- hooks on modules ----------------------------------------------------------------------------


def _callable_parts(function: Any, label: str) -> dict[str, Any]:
    """What a hook callable keeps alive: closure cells, defaults, a bound object's attributes,
    a partial's arguments, a callable object's attributes."""
    parts: dict[str, Any] = {}
    if isinstance(function, functools.partial):
        parts[f"{label} partial arguments"] = [*function.args, *function.keywords.values()]
        function = function.func
    if isinstance(function, types.MethodType):
        owner = function.__self__
        attributes = _attributes(owner)
        if attributes:
            parts[f"{label} bound {type(owner).__name__}"] = attributes
        function = function.__func__
    if isinstance(function, types.FunctionType):
        cells = function.__closure__ or ()
        for variable, cell in zip(function.__code__.co_freevars, cells, strict=False):
            try:
                parts[f"{label} closure {variable!r}"] = cell.cell_contents
            except ValueError:  # an empty cell
                continue
        if function.__defaults__:
            parts[f"{label} defaults"] = list(function.__defaults__)
    elif not isinstance(function, types.BuiltinFunctionType):
        attributes = _attributes(function)
        if attributes:
            parts[f"{label} {type(function).__name__} object"] = attributes
    return parts


def _attributes(obj: Any) -> dict[str, Any]:
    try:
        attributes = object.__getattribute__(obj, "__dict__")
    except Exception:
        return {}
    return dict(attributes) if type(attributes) is dict else {}


def _remove_hook(module_ref: Any, attribute: str, hook_id: Any, where: str) -> str:
    module = module_ref() if module_ref is not None else None
    hooks = _global_hook_dict(attribute) if module_ref is None else None
    if module is not None:
        hooks = _attributes(module).get(attribute)
    if not isinstance(hooks, dict) or hook_id not in hooks:
        return f"{where}: the hook is gone already"
    del hooks[hook_id]
    hook = where.rpartition(" closure")[0] or where
    return f"removed the {hook} (register it again storing output.detach() if you need it)"


def _global_hook_dict(attribute: str) -> Any:
    module = sys.modules.get("torch.nn.modules.module")
    return getattr(module, attribute, None) if module is not None else None


def _hook_sources(name: str, module: Any) -> list[_Source]:
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    sources = []
    try:
        submodules = list(torch.nn.Module.named_modules(module, prefix=name))
    except Exception:
        return []
    for path, submodule in submodules:
        attributes = _attributes(submodule)
        for attribute, kind in _HOOK_DICTS:
            hooks = attributes.get(attribute)
            if not hooks:
                continue
            for hook_id, function in list(hooks.items()):
                where = f"{path} {kind} closure"
                source = _callable_source(
                    where, function, weakref.ref(submodule), attribute, hook_id
                )
                if source is not None:
                    sources.append(source)
    return sources


def _global_hook_sources() -> list[_Source]:
    sources = []
    for attribute, kind in _GLOBAL_HOOKS:
        hooks = _global_hook_dict(attribute)
        if isinstance(hooks, dict):
            for hook_id, function in list(hooks.items()):
                source = _callable_source(f"{kind} closure", function, None, attribute, hook_id)
                if source is not None:
                    sources.append(source)
    return sources


def _callable_source(
    where: str, function: Any, module_ref: Any, attribute: str, hook_id: Any
) -> _Source | None:
    parts = _callable_parts(function, where)
    if not parts:
        return None
    # stashed outputs keep their graphs (the activations they saved)
    graphs = [t for value in parts.values() for t in _graph_roots(value)]
    tensors = sum(_tensor_count(value) for value in parts.values())
    if graphs:
        parts[f"{where} (autograd graphs)"] = graph_tensors(graphs)
    _, keys = _keys_of(parts)
    if not keys:
        return None
    return _Source(
        where,
        "hook",
        keys,
        functools.partial(_remove_hook, module_ref, attribute, hook_id, where),
        "store output.detach() (or .cpu()) in the hook, or remove it: handle.remove()",
        tensors,
        token=(id(function), hook_id),
        key=f"hook {where} {hook_id}",
    )


# -- a second name of a deleted name's tensor ---------------------------------------------------


def _drop_name(namespace: Any, root: str, expected_id: int) -> str:
    if id(namespace.get(root, None)) != expected_id:
        return f"{root} was rebound since: nothing released"
    del namespace[root]
    return f"deleted {root}"


def _drop_element(namespace: Any, root: str, container_id: int, key: Any, element_id: int) -> str:
    container = namespace.get(root)
    if id(container) != container_id:
        return f"{root} was rebound since: nothing released"
    items = dict(_shallow_items(container))
    if key not in items or id(items[key]) != element_id:
        return f"{root}[{key!r}] changed since: nothing released"
    if isinstance(container, dict):
        del container[key]
        return f"deleted {root}[{key!r}]"
    container[key] = None  # a list: keep the other indices where they are
    return f"set {root}[{key!r}] = None"


def _second_name_sources(
    namespace: Any, inventory: Inventory, forgotten: Mapping[str, Keys]
) -> list[_Source]:
    wanted: Keys = {}
    for keys in forgotten.values():
        wanted.update(keys)
    if not wanted:
        return []
    sources = []
    for root in inventory.names():
        if _root_keys(inventory, root).keys().isdisjoint(wanted):
            continue
        value = namespace.get(root)
        candidates: list[tuple[str, Keys, Callable[[], str], int]] = []
        release: Callable[[], str]
        if isinstance(value, (dict, list)):
            items = {f"{root}[{k!r}]": (k, v) for k, v in _shallow_items(value)}
            elements = scan({label: v for label, (_, v) in items.items()})
            for label in elements.names():
                key, element = items[label]
                keys = _root_keys(elements, label)
                release = functools.partial(
                    _drop_element, namespace, root, id(value), key, id(element)
                )
                candidates.append((label, keys, release, id(element)))
        if not candidates:  # a tensor, a module, a tuple: the name itself
            keys = _root_keys(inventory, root)
            release = functools.partial(_drop_name, namespace, root, id(value))
            candidates.append((root, keys, release, id(value)))
        for label, keys, drop, token in candidates:
            shared = {k: v for k, v in keys.items() if k in wanted}
            if not shared:
                continue
            gone = [n for n, k in forgotten.items() if not shared.keys().isdisjoint(k)]
            sources.append(
                _Source(
                    f"{label} (second name: still holds deleted {', '.join(gone)})",
                    "second name",
                    shared,
                    drop,
                    f"del {label} too (or rebind it)",
                    1,
                    token=token,
                    key=f"second {label}",
                    subtract={},
                )
            )
    return sources


# -- all together ----------------------------------------------------------------------------------


def _name_sources(
    namespace: Any, name: str, value: Any, named_keys: Keys, memo: KeyMemo | None = None
) -> list[_Source]:
    """The holders a top-level name's object brings: its graphs, hooks, orphaned optimizer
    state, or attributes. ``memo``: the graph tensors already keyed in this measurement."""
    torch = sys.modules.get("torch")
    if torch is None or is_ipython_bookkeeping(name):
        return []
    try:
        if isinstance(value, torch.nn.Module):
            # a module's own attributes may keep a graph too (``self.hidden``, a cached output)
            return _hook_sources(name, value) + _attribute_graph_sources(
                namespace, name, value, memo
            )
        if isinstance(value, torch.optim.Optimizer):
            source = _optimizer_source(name, value, named_keys)
            return [source] if source is not None else []
        if isinstance(value, (torch.Tensor, list, tuple, dict)):
            source = _graph_source(namespace, name, value, memo)
            return [source] if source is not None else []
        # an object holding tensors in attributes is walked by the scan: its tensors are
        # named (under its name), the graphs they keep are not
        return _attribute_graph_sources(namespace, name, value, memo)
    except Exception:  # a hostile object: it is skipped, never fatal
        return []
    return []
