"""Where did my memory go: who holds it, what each cell added, and out-of-memory errors explained.

Pure core: no IPython, no ipywidgets, torch never imported here. Three things:

* :func:`holders` finds what keeps tensor memory alive *outside* the user's named variables:
  the last error's traceback (every frame of it keeps its locals), the output history
  (``Out[12]``, ``_``), autograd graphs kept alive by live results (``loss``, a list of losses),
  gradients and optimizer state of parameters no variable holds, closures and bound objects of
  hooks registered on modules (plus, given what the timeline knows, a second name still
  holding a deleted name's tensor). Objects holding tensors in attributes are walked by the
  scan itself: named, they are named variables; inside any of these holders, they are found. Each :class:`Holder`
  says where, on which device, how many bytes (storages counted once, minus what named
  variables hold anyway) and can :meth:`Holder.release` exactly that reference.
* :class:`Timeline` records, after each cell, the bytes held per device (named + holders, each
  storage once), the change, the names that grew or shrank, CUDA allocator figures, and
  notices holders that keep growing (a leak) -- reusing the scan the hook already made.
* :func:`explain_oom` explains ``torch.OutOfMemoryError`` and CPU allocation failures in the
  user's own names. It never frees anything by itself.

There is ONE walker of user objects (:func:`torchdevice_magic.scan`): everything here finds
*candidate* objects (a frame's locals, an ``Out`` entry, a hook's closure cells, the tensors an
autograd graph saved) and asks ``scan({label: obj})`` for their devices, bytes and storage keys
(:meth:`Inventory.storages`), then subtracts the storages of the named variables. The only
traversals here are of things that are not user objects: a traceback's frames, an autograd
graph's nodes (``next_functions``), a module tree's hook dicts; and a one-level look into a
top-level list/tuple/dict for tensors that carry a graph.

A :class:`Holder` never keeps a tensor alive: it holds the namespace, names, ids, and weak
references (to exceptions, modules, optimizers -- never to Parameters), and re-finds the
object when asked to release it.
"""

from __future__ import annotations

import contextlib
import functools
import html
import os
import re
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, is_, itemgetter
from typing import Any

from .scanner import Inventory, is_ipython_bookkeeping, scan
from .units import device_sort_key, format_bytes

StorageKey = tuple[Any, ...]
Keys = dict[StorageKey, tuple[str, int]]

#: Types that never hold a tensor: skipped without a look.
_NOTHING_TO_HOLD = frozenset({int, float, complex, bool, str, bytes, type(None), range})
#: Bumped by every release: the timeline re-measures what it tracks when it changed.
_RELEASES = [0]

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


# --------------------------------------------------------------------------------------------
# Holders


@dataclass
class Holder:
    """One reference that keeps tensor memory alive outside the named variables, on one device.

    ``bytes``: storages counted once, not counting storages a named variable holds anyway (for
    a ``second name`` holder: the bytes a deleted name left behind that only it still holds).
    """

    where: str
    device: str
    bytes: int
    kind: str
    fix: str = ""
    count: int = 0  # tensors / graphs / frames / entries behind it, where that means something
    _release: Callable[[], str] | None = field(default=None, repr=False)
    _keys: Keys = field(default_factory=dict, repr=False)
    _namespace: Any = field(default=None, repr=False)
    _last_error: Any = field(default=None, repr=False)
    released: bool = field(default=False, repr=False)
    note: str = ""

    def release(self) -> int:
        """Drop exactly this reference; return the bytes that are now freed (on every device
        the reference held: storages no named variable and no other holder still reaches)."""
        if self.released or self._release is None:
            return 0
        self.note = self._release()
        self.released = True
        _RELEASES[0] += 1
        still = _all_held_keys(self._namespace, self._last_error)
        return sum(nbytes for key, (_, nbytes) in self._keys.items() if key not in still)

    def line(self, index: int | None = None) -> str:
        head = f"[{index}] " if index is not None else ""
        text = f"{head}{self.where}: {format_bytes(self.bytes)} on {self.device}"
        return text + (f" -> {self.fix}" if self.fix else "")


@dataclass
class _Source:
    """What one reference holds, before the named storages are subtracted."""

    where: str
    kind: str
    keys: Keys
    release: Callable[[], str] | None
    fix: str = ""
    count: int = 0
    token: Any = None  # identity of what it measured (the timeline's leak check)
    key: str = ""  # stable among a name's holders (the timeline follows it between cells)
    #: what to subtract instead of the named storages (an optimizer's own state is "named"
    #: under its name, but releasing the orphaned part frees it; a second name: nothing)
    subtract: Keys | None = None


def _keys_of(parts: Mapping[str, Any]) -> tuple[Inventory, Keys]:
    inventory = scan(parts)
    return inventory, inventory.storages()


def _root_keys(inventory: Inventory, root: str) -> Keys:
    storages_of = getattr(inventory, "storages_of", None)  # O(1) where the scanner has it
    if storages_of is not None:
        return storages_of(root)
    return inventory.subset([root]).storages()


def _by_device(keys: Mapping[StorageKey, tuple[str, int]]) -> dict[str, int]:
    """{device: bytes}; meta storages occupy nothing (as in Inventory.totals). Column-wise
    (C-level sums): the timeline adds up every named storage after each cell."""
    if len(keys) < 16:  # small: a plain loop beats building columns
        totals: dict[str, int] = {}
        for device, nbytes in keys.values():
            if device != "meta":
                totals[device] = totals.get(device, 0) + nbytes
        return totals
    values = keys.values()
    devices = list(map(itemgetter(0), values))
    sizes = list(map(itemgetter(1), values))
    kinds = set(devices)
    if len(kinds) == 1:
        (device,) = kinds
        return {} if device == "meta" else {device: sum(sizes)}
    return {d: sum(compress(sizes, map(d.__eq__, devices))) for d in kinds if d != "meta"}


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _shallow_items(value: Any) -> list[tuple[Any, Any]]:
    """(key, element) of a top-level list/tuple/dict, with the base classes' iteration (never a
    subclass's override); anything else: none."""
    try:
        if isinstance(value, dict):
            return list(dict.items(value))
        if isinstance(value, list):
            return list(enumerate(list.__iter__(value)))
        if isinstance(value, tuple):
            return list(enumerate(tuple.__iter__(value)))
    except Exception:
        pass
    return []


# -- autograd graphs ---------------------------------------------------------------------------

_SAVED_ATTRIBUTES: dict[type, tuple[str, ...]] = {}


def _saved_names(node: Any) -> tuple[str, ...]:
    kind = type(node)
    names = _SAVED_ATTRIBUTES.get(kind)
    if names is None:
        try:
            names = tuple(n for n in dir(node) if n.startswith("_saved_"))
        except Exception:
            names = ()
        _SAVED_ATTRIBUTES[kind] = names
    return names


def graph_tensors(roots: Iterable[Any], limit: int = 200_000) -> list[Any]:
    """The tensors the autograd graphs of ``roots`` (tensors) keep alive: every node's saved
    tensors (``_saved_*``; freed after ``backward()``), custom Functions' ``saved_tensors``, and
    the leaves ``AccumulateGrad`` nodes hold. Walks graph nodes, not user objects."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = []
    for tensor in roots:
        try:
            node = tensor.grad_fn
        except Exception:
            node = None
        if node is not None:
            stack.append(node)
    torch = sys.modules.get("torch")
    tensor_type = torch.Tensor if torch is not None else ()
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for name in _saved_names(node):
            try:
                value = getattr(node, name)
            except Exception:  # freed by backward()
                continue
            if isinstance(value, tensor_type):
                found.append(value)
            elif isinstance(value, (tuple, list)):
                found.extend(v for v in value if isinstance(v, tensor_type))
        try:
            variable = getattr(node, "variable", None)  # AccumulateGrad: the leaf
            if isinstance(variable, tensor_type):
                found.append(variable)
        except Exception:
            pass
        if hasattr(type(node), "saved_tensors"):  # a custom autograd.Function's context
            with contextlib.suppress(Exception):
                found.extend(v for v in node.saved_tensors if isinstance(v, tensor_type))
        with contextlib.suppress(Exception):
            stack.extend(child for child, _ in node.next_functions if child is not None)
    return found


def _graph_roots(value: Any) -> list[Any]:
    """Tensors with a graph in ``value`` (a tensor, or one level of a list/tuple/dict)."""
    if _is_tensor(value):
        return [value] if _has_graph(value) else []
    return [v for _, v in _shallow_items(value) if _is_tensor(v) and _has_graph(v)]


def _tensor_count(value: Any) -> int:
    if _is_tensor(value):
        return 1
    return sum(1 for _, v in _shallow_items(value) if _is_tensor(v))


def _has_graph(tensor: Any) -> bool:
    try:
        return tensor.grad_fn is not None
    except Exception:
        return False


def _detach_graphs(namespace: Any, name: str, expected_id: int) -> str:
    value = namespace.get(name)
    if value is None or id(value) != expected_id:
        return f"{name} was rebound since: nothing released"
    if _is_tensor(value):
        if not _detach_in_place(value):
            namespace[name] = value.detach()
        return f"{name} no longer keeps its autograd graph (it was detached)"
    released = 0
    for key, element in _shallow_items(value):
        if _is_tensor(element) and _has_graph(element):
            if not _detach_in_place(element):
                if isinstance(value, tuple):
                    continue  # immutable: cannot swap the element
                value[key] = element.detach()
            released += 1
    return f"{name}: {released} tensors detached from their autograd graphs"


def _detach_in_place(tensor: Any) -> bool:
    try:
        tensor.detach_()
        return True
    except Exception:  # a view cannot be detached in place
        return False


def _graph_source(namespace: Any, name: str, value: Any) -> _Source | None:
    roots = _graph_roots(value)
    if not roots:
        return None
    saved = graph_tensors(roots)
    if not saved:
        return None
    _, keys = _keys_of({f"{name} (autograd graph)": saved})
    if not keys:
        return None
    if _is_tensor(value):
        where, fix = f"{name} (autograd graph)", f"{name} = {name}.detach() once backward() ran"
        count = 1
    else:
        count = len(roots)
        plural = "graph" if count == 1 else "graphs"
        where = f"{name}: {count} autograd {plural}"
        fix = "append loss.item() or loss.detach()"
    return _Source(
        where,
        "autograd graph",
        keys,
        functools.partial(_detach_graphs, namespace, name, id(value)),
        fix,
        count,
        token=id(value),
        key="graph",
    )


# -- the last error's traceback ----------------------------------------------------------------


ErrorGetter = Callable[[], Any]


def _last_exception() -> BaseException | None:
    exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return exc if isinstance(exc, BaseException) else None


def _last_errors(getter: ErrorGetter | None = None) -> list[BaseException]:
    """The errors whose tracebacks may still be held: the one ``getter`` names (the session
    passes the last cell's, which IPython keeps until the next cell ends even where
    ``sys.last_value`` is not set) and ``sys.last_exc`` / ``sys.last_value``."""
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
    for frame in frames.values():
        snapshot = frame.f_locals  # on Python < 3.13 a dict the frame keeps: empty it too
        try:
            frame.clear()
        except RuntimeError:
            continue  # still executing (or a suspended generator): leave it
        if isinstance(snapshot, dict):
            snapshot.clear()
        cleared += 1
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
    for frame in frames:
        function = frame.f_code.co_name
        for local, value in _frame_locals(frame).items():
            label = f"{function}() local {local!r}"
            if label in parts:  # recursion: the same function twice
                label += f" (frame {len(parts)})"
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
    sizes = {root: sum(n for _, n in keys.values()) for root, keys in own.items()}
    # name the locals that add storages nobody named yet: the user's `batch`, not the same
    # tensor again as `args` of torch's own wrappers further in
    ranked: list[str] = []
    covered: set[StorageKey] = set()
    for root in sorted((r for r in sizes if sizes[r]), key=lambda r: (-sizes[r], order[r])):
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


def _name_sources(namespace: Any, name: str, value: Any, named_keys: Keys) -> list[_Source]:
    """The holders a top-level name's object brings: its graphs, hooks, orphaned optimizer
    state, or attributes."""
    torch = sys.modules.get("torch")
    if torch is None or is_ipython_bookkeeping(name):
        return []
    try:
        if isinstance(value, torch.nn.Module):
            return _hook_sources(name, value)
        if isinstance(value, torch.optim.Optimizer):
            source = _optimizer_source(name, value, named_keys)
            return [source] if source is not None else []
        if isinstance(value, (torch.Tensor, list, tuple, dict)):
            source = _graph_source(namespace, name, value)
            return [source] if source is not None else []
        # an object holding tensors in attributes is walked by the scan: its tensors are
        # named (under its name); inside a hook, an Out entry or a frame it is found there
    except Exception:  # a hostile object: it is skipped, never fatal
        return []
    return []


def _maybe_orphaned(inventory: Inventory) -> set[str] | None:
    """Optimizers the scan says update parameters no name reaches (by object identity; cheap),
    or None where the inventory cannot tell: only those are measured storage by storage."""
    check = getattr(inventory, "orphaned_optimizers", None)
    if check is None:
        return None
    try:
        return {found[0] for found in check()}
    except Exception:
        return None


def _named_keys_without_optimizers(namespace: Any, inventory: Inventory) -> Keys:
    torch = sys.modules.get("torch")
    optimizer_type = torch.optim.Optimizer if torch is not None else ()
    names = [n for n in inventory.names() if not isinstance(namespace.get(n), optimizer_type)]
    return inventory.subset(names).storages()


def _candidates(namespace: Any) -> list[tuple[str, Any]]:
    """(name, value) of the names that may bring a holder: not plain values, not IPython's
    bookkeeping, not plain tensors without a graph (most of a namespace; picked out
    column-wise, in C)."""
    tensor_type = sys.modules["torch"].Tensor
    try:
        names = list(namespace)
        values = list(map(namespace.__getitem__, names))
    except Exception:
        return []
    kinds = list(map(type, values))
    plain = list(map(is_, kinds, repeat(tensor_type)))
    graphs = iter(map(attrgetter("grad_fn"), compress(values, plain)))
    found = []
    for name, value, kind, is_plain in zip(names, values, kinds, plain, strict=True):
        if is_plain:
            if next(graphs) is None:
                continue  # a plain tensor holds nothing beyond itself
        elif kind in _NOTHING_TO_HOLD:
            continue
        if not is_ipython_bookkeeping(name):
            found.append((name, value))
    return found


def _sources(
    namespace: Any,
    inventory: Inventory,
    named: Keys,
    forgotten: Mapping[str, Keys] | None = None,
    output_refs: Callable[[Any], None] | None = None,
    last_error: ErrorGetter | None = None,
) -> list[_Source]:
    sources: list[_Source] = []
    traceback = _traceback_source(_last_errors(last_error), named, last_error)
    if traceback is not None:
        sources.append(traceback)
    sources.extend(_out_sources(namespace, output_refs=output_refs))
    maybe_orphaned = _maybe_orphaned(inventory)
    # the named storages less the optimizers' own: only needed to look for orphans
    without_optimizers = (
        _named_keys_without_optimizers(namespace, inventory)
        if maybe_orphaned is None or maybe_orphaned
        else {}
    )
    for name, value in _candidates(namespace):
        reachable = maybe_orphaned is not None and name not in maybe_orphaned
        if reachable and isinstance(value, sys.modules["torch"].optim.Optimizer):
            continue  # the scan knows every parameter it updates is reachable
        sources.extend(_name_sources(namespace, name, value, without_optimizers))
    sources.extend(_global_hook_sources())
    if forgotten:
        sources.extend(_second_name_sources(namespace, inventory, forgotten))
    return sources


def _all_held_keys(namespace: Any, last_error: ErrorGetter | None = None) -> set[StorageKey]:
    inventory = scan(namespace)
    named = inventory.storages()
    held = set(named)
    for source in _sources(namespace, inventory, named, last_error=last_error):
        held.update(source.keys)
    return held


def holders(
    namespace: Mapping[str, Any],
    device: str | None = None,
    *,
    inventory: Inventory | None = None,
    forgotten: Mapping[str, Keys] | None = None,
    output_refs: Callable[[Any], None] | None = None,
    last_error: ErrorGetter | None = None,
) -> list[Holder]:
    """Who keeps tensor memory alive outside the named variables of ``namespace``, biggest
    first; ``device`` (``"cuda:0"``, or a type like ``"cuda"``) keeps only that device's.

    ``inventory``: a scan of ``namespace`` made just now (saves one); ``forgotten``: storage
    keys of names deleted or rebound recently (the session's timeline keeps them) -- a named
    variable still holding one is listed as a ``second name``; ``output_refs(obj)``: called
    when an ``Out`` entry is released, to drop the references a front end keeps besides the
    namespace (the session passes one for IPython's displayhook); ``last_error()``: the
    last failing cell's exception where ``sys.last_value`` may not name it (the session's
    short-traceback path), found besides ``sys.last_value``.
    """
    if "torch" not in sys.modules:
        return []
    if inventory is None:
        inventory = scan(namespace)
    named = inventory.storages()
    found: list[Holder] = []
    for source in _sources(namespace, inventory, named, forgotten, output_refs, last_error):
        subtract = named if source.subtract is None else source.subtract
        outside = {k: v for k, v in source.keys.items() if k not in subtract}
        for dev, nbytes in _by_device(outside).items():
            if nbytes <= 0 or not _device_matches(dev, device):
                continue
            found.append(
                Holder(
                    source.where,
                    dev,
                    nbytes,
                    source.kind,
                    source.fix,
                    source.count,
                    source.release,
                    outside,
                    namespace,
                    last_error,
                )
            )
    order = {d: device_sort_key(d) for d in {h.device for h in found}}
    found.sort(key=lambda h: (-h.bytes, order[h.device], h.where))
    return found


def _device_matches(device: str, wanted: str | None) -> bool:
    if not wanted:
        return True
    wanted = str(wanted)
    return device == wanted or (":" not in wanted and device.partition(":")[0] == wanted)


def held_outside(found: Iterable[Holder]) -> dict[str, int]:
    """{device: bytes} held outside named variables by these holders, each storage once."""
    keys: Keys = {}
    for holder in found:
        if holder.kind != "second name":
            keys.update(holder._keys)
    totals: dict[str, int] = {}
    for dev, nbytes in keys.values():
        totals[dev] = totals.get(dev, 0) + nbytes
    return {d: totals[d] for d in sorted(totals, key=device_sort_key) if totals[d]}


def holders_text(found: list[Holder]) -> str:
    if not found:
        return "Nothing holds tensor memory outside your named variables."
    totals = held_outside(found)
    lines = []
    if totals:
        lines.append("Held outside named variables:")
        lines.extend(f"  {device}: {format_bytes(n)}" for device, n in totals.items())
        lines.append("")
    lines.extend(holder.line(index) for index, holder in enumerate(found))
    lines.append("")
    lines.append("Release one: %devices --release N   (or holders = %devices --holders -o; ")
    lines[-1] += "holders[N].release())"
    return "\n".join(lines)


class HolderList(list[Holder]):
    """``%devices --holders -o``: a list of :class:`Holder` that prints as the text table."""

    def __repr__(self) -> str:
        return holders_text(list(self))

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


# --------------------------------------------------------------------------------------------
# Memory per cell


#: Names changed since the last cell above which the timeline counts the whole namespace again
#: (column-wise, ~40 ms at 100,000 names) instead of updating name by name
RECOUNT_ABOVE = 2000


@dataclass
class CellMemory:
    """One row of the timeline: a cell on a device."""

    cell: int
    device: str
    bytes: int
    delta: int
    peak: int | None = None
    allocated: int | None = None
    reserved: int | None = None
    changes: tuple[tuple[str, int], ...] = ()  # (name or holder, bytes it grew or shrank)
    note: str = ""
    #: of ``bytes``, what holders outside the named variables keep (the last error's
    #: traceback, Out[...]...): ``bytes - outside`` is what the device table's total shows
    outside: int = 0

    @property
    def grew(self) -> str:
        return ", ".join(f"{n} {_signed(b)}" for n, b in self.changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "device": self.device,
            "bytes": self.bytes,
            "delta": self.delta,
            "peak": self.peak,
            "allocated": self.allocated,
            "reserved": self.reserved,
            "grew": self.grew,
            "changes": [list(c) for c in self.changes],
            "note": self.note,
            "outside": self.outside,
        }


def _signed(nbytes: int) -> str:
    return ("+" if nbytes >= 0 else "-") + format_bytes(abs(nbytes))


class _Tracked:
    """A holder the timeline follows between cells: its keys and a short growth history."""

    __slots__ = ("source", "grew_in_row", "last_bytes", "warned")

    def __init__(self, source: _Source) -> None:
        self.source = source
        self.grew_in_row = 0
        self.last_bytes: dict[str, int] = {}
        self.warned = False


def _optimizer_names(namespace: Any) -> list[str]:
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    optimizer = torch.optim.Optimizer
    return [n for n, v in list(namespace.items()) if isinstance(v, optimizer)]


class Timeline:
    """Per-cell memory of one session. :meth:`record` takes the inventory the post-execute
    hook already made (no second walk); holders are re-measured only for what the cell
    touched (its names, a new ``Out`` entry, a new error), so a plain cell costs a dict merge."""

    def __init__(self, limit: int = 2000, last_error: ErrorGetter | None = None) -> None:
        #: the last failing cell's exception, where sys.last_value may not name it
        self.last_error = last_error
        self.rows: list[CellMemory] = []
        self.limit = limit
        self.forgotten: dict[str, Keys] = {}
        self._previous: Inventory | None = None
        self._totals: dict[str, int] = {}
        self._tracked: dict[str, _Tracked] = {}  # label -> what it holds
        self._out_keys: set[Any] = set()
        self._out_last: Any = None
        self._error_ids: tuple[int, ...] = ()
        self._releases = _RELEASES[0]
        self._module_ids: dict[str, int] = {}
        # the named variables' storages (each once), how many names reach each, per device
        self._named: Keys = {}
        self._counts: dict[StorageKey, int] | None = None
        self._named_totals: dict[str, int] = {}

    # -- recording ------------------------------------------------------------------------
    def record(
        self,
        cell: int,
        inventory: Inventory,
        namespace: Any,
        names: Iterable[str] = (),
        *,
        error: BaseException | None = None,
        cuda: Mapping[str, tuple[int | None, int | None, int | None]] | None = None,
    ) -> tuple[list[CellMemory], list[str]]:
        """Record the cell; return its rows and any leak warnings (one line each)."""
        if not inventory.torch_imported:
            return [], []
        names = [n for n in dict.fromkeys(names) if not is_ipython_bookkeeping(n)]
        previous = self._previous
        named = self._update_named(previous, inventory)
        if self._module_ids_changed(namespace, names, first=previous is None):
            # a module was deleted or rebound: its parameters may now be held only by an
            # optimizer, so measure the optimizers again
            names += [n for n in _optimizer_names(namespace) if n not in names]
        changed_holders = self._update_holders(namespace, inventory, names, named)
        totals = {d: n for d, n in self._named_totals.items() if n}
        extra: Keys = {}
        for tracked in self._tracked.values():
            extra.update(tracked.source.keys)
        outside = _by_device({k: v for k, v in extra.items() if k not in named})
        for dev, nbytes in outside.items():
            totals[dev] = totals.get(dev, 0) + nbytes
        changes, note = self._name_changes(previous, inventory, namespace, names, named)
        changes.extend(changed_holders)
        warnings = self._leaks(named)
        rows = []
        for dev in sorted(set(totals) | set(self._totals), key=device_sort_key):
            now, before = totals.get(dev, 0), self._totals.get(dev, 0)
            if not now and not before:
                continue
            figures = (cuda or {}).get(dev, (None, None, None))
            mine = [(label, d) for label, dv, d in changes if dv == dev and d]
            mine.sort(key=lambda c: -abs(c[1]))
            rows.append(
                CellMemory(
                    cell,
                    dev,
                    now,
                    now - before,
                    figures[2],
                    figures[0],
                    figures[1],
                    tuple(mine[:3]),
                    note.get(dev, ""),
                    outside.get(dev, 0),
                )  # fmt: skip
            )
        self._totals = totals
        self._previous = inventory
        self.rows.extend(rows)
        del self.rows[: max(0, len(self.rows) - self.limit)]
        return rows, warnings

    def _update_named(self, previous: Inventory | None, inventory: Inventory) -> Keys:
        """The storages the named variables hold, each once, and their per-device totals --
        kept up to date from the names whose entries changed since the last cell (the hook's
        rescan reused the others), so a cell costs what it changed, not the namespace."""
        counts = self._counts
        changed: list[str] = []
        if previous is not None and counts is not None and hasattr(inventory, "changed_since"):
            changed = inventory.changed_since(previous)
        if (
            previous is None
            or counts is None
            or not hasattr(inventory, "changed_since")
            # a full scan in between (a move, %devices...) changes every name: counting the
            # whole namespace column-wise beats updating it name by name
            or len(changed) > RECOUNT_ABOVE
        ):
            if not hasattr(inventory, "storages_of"):
                self._named, self._counts = inventory.storages(), None
                self._named_totals = _by_device(self._named)
                return self._named
            named, counts = inventory.named_storages()
            self._named, self._counts = named, counts
            self._named_totals = _by_device(named)
            return named
        named, totals = self._named, self._named_totals
        for name in changed:
            for key in previous.storages_of(name):
                left = counts.get(key, 0) - 1
                if left > 0:
                    counts[key] = left
                elif key in named:
                    del counts[key]
                    device, nbytes = named.pop(key)
                    if device != "meta":
                        totals[device] -= nbytes
            for key, value in inventory.storages_of(name).items():
                held = counts.get(key, 0)
                counts[key] = held + 1
                if not held:
                    named[key] = value
                    if value[0] != "meta":
                        totals[value[0]] = totals.get(value[0], 0) + value[1]
        return named

    def _module_ids_changed(self, namespace: Any, names: list[str], first: bool) -> bool:
        """Whether a name that held a module was deleted or rebound (tracked by id for the
        names cells touch; the whole namespace once, at the first record)."""
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        module = torch.nn.Module
        changed = False
        for name in list(namespace) if first else names:
            value = namespace.get(name)
            known = self._module_ids.get(name)
            if isinstance(value, module):
                changed |= known is not None and known != id(value)
                self._module_ids[name] = id(value)
            elif known is not None:
                del self._module_ids[name]
                changed = True
        return changed and not first

    def _name_changes(
        self,
        previous: Inventory | None,
        inventory: Inventory,
        namespace: Any,
        names: list[str],
        named: Keys,
    ) -> tuple[list[tuple[str, str, int]], dict[str, str]]:
        """(name, device, bytes it grew) for the names the cell touched (deleting one touches
        it); and a note per device when a deleted or rebound name's storages stay alive under
        another name (the timeline then remembers them: ``forgotten``)."""
        if previous is None:
            return [], {}
        changes: list[tuple[str, str, int]] = []
        notes: dict[str, str] = {}
        for name in names:
            old_keys = _root_keys(previous, name)
            new_keys = _root_keys(inventory, name)
            old, new = _by_device(old_keys), _by_device(new_keys)
            for dev in set(old) | set(new):
                delta = new.get(dev, 0) - old.get(dev, 0)
                if delta:
                    changes.append((name, dev, delta))
            left = {k: v for k, v in old_keys.items() if k not in new_keys and k in named}
            if left:
                if name not in namespace:
                    self.forgotten[name] = left  # holders() names the second name
                verb = "del" if name not in namespace else "rebinding"
                for dev, size in _by_device(left).items():
                    notes[dev] = (
                        f"{verb} {name} freed nothing of {format_bytes(size)}: "
                        "another name still holds it (%devices --holders)"
                    )
        # forget what is no longer held at all, or whose name is back
        for name in list(self.forgotten):
            keys = {k: v for k, v in self.forgotten[name].items() if k in named}
            if keys and name not in namespace:
                self.forgotten[name] = keys
            else:
                del self.forgotten[name]
        return changes, notes

    def _update_holders(
        self, namespace: Any, inventory: Inventory, names: list[str], named: Keys
    ) -> list[tuple[str, str, int]]:
        """Re-measure the holders this cell could have changed (its names, a new error, new
        ``Out`` entries; everything after a release); return (holder, device, growth)."""
        full = self._releases != _RELEASES[0]
        self._releases = _RELEASES[0]
        fresh: dict[str, _Source | None] = {}
        errors = _last_errors(self.last_error)
        ids = tuple(map(id, errors))
        if full or ids != self._error_ids:
            self._error_ids = ids
            fresh["error"] = _traceback_source(errors, named, self.last_error)
        out = namespace.get("Out") if hasattr(namespace, "get") else None
        out = out if isinstance(out, dict) else {}
        # IPython only ever adds at the end: same size and same last key means no change
        last = next(reversed(out)) if out else None
        if full or len(out) != len(self._out_keys) or last != self._out_last:
            current = set(out)
        else:
            current = self._out_keys
        self._out_last = last
        added = current if full else current - self._out_keys
        for key in (self._out_keys - current) | (added if full else set()):
            fresh[f"out:{key!r}"] = None
        self._out_keys = current
        if added:
            for entry in _out_sources(namespace, sorted(added, key=repr)):
                fresh[f"out:{entry.token[0]!r}"] = entry
        present = namespace.keys() if hasattr(namespace, "keys") else set()
        tracked_names = {
            label.split("\x00")[1] for label in self._tracked if label[:5] == "name\x00"
        }
        for name in tracked_names:
            if full or name not in present or name in names:
                for label in [k for k in self._tracked if k.startswith(f"name\x00{name}\x00")]:
                    fresh[label] = None
        optimizer_type = sys.modules["torch"].optim.Optimizer  # record() runs only with torch
        without_optimizers: Keys | None = None
        maybe_orphaned: set[str] | None = None
        for name in list(present) if full else names:
            if name not in present or is_ipython_bookkeeping(name):
                continue
            value = namespace.get(name)
            if type(value) in _NOTHING_TO_HOLD:
                continue
            if isinstance(value, optimizer_type):
                if not full and not inventory.objects_changed:
                    # no module or optimizer changed since the last scan: what it orphans
                    # is as it was (keep what is tracked for it)
                    for label in [k for k in fresh if k.startswith(f"name\x00{name}\x00")]:
                        del fresh[label]
                    continue
                if maybe_orphaned is None:
                    said = _maybe_orphaned(inventory)
                    maybe_orphaned = set(present) if said is None else said
                if name not in maybe_orphaned:
                    continue  # every parameter it updates is reachable: nothing orphaned
                if without_optimizers is None:
                    without_optimizers = _named_keys_without_optimizers(namespace, inventory)
            for brought in _name_sources(namespace, name, value, without_optimizers or {}):
                fresh[f"name\x00{name}\x00{brought.key}"] = brought
        changes: list[tuple[str, str, int]] = []
        for label, source in fresh.items():
            tracked = self._tracked.get(label)
            old = tracked.last_bytes if tracked is not None else {}
            if source is None:
                self._tracked.pop(label, None)
                new: dict[str, int] = {}
                shown = tracked.source.where if tracked is not None else label
            else:
                if tracked is None or tracked.source.token != source.token:
                    tracked = self._tracked[label] = _Tracked(source)
                tracked.source = source
                subtract = named if source.subtract is None else source.subtract
                new = _by_device({k: v for k, v in source.keys.items() if k not in subtract})
                grew = any(new.get(d, 0) > old.get(d, 0) for d in new)
                tracked.grew_in_row = tracked.grew_in_row + 1 if grew else 0
                tracked.last_bytes = new
                shown = source.where
            for dev in set(old) | set(new):
                if new.get(dev, 0) != old.get(dev, 0):
                    changes.append((shown, dev, new.get(dev, 0) - old.get(dev, 0)))
        return changes

    def _leaks(self, named: Keys) -> list[str]:
        warnings = []
        for tracked in self._tracked.values():
            source = tracked.source
            if source.kind not in {"autograd graph", "hook"}:
                continue
            if tracked.grew_in_row < 2 or tracked.warned:
                continue
            tracked.warned = True
            for dev, nbytes in sorted(tracked.last_bytes.items()):
                what = (
                    f"{source.count} autograd graph{'s' if source.count != 1 else ''}"
                    if source.kind == "autograd graph"
                    else f"{source.count} tensors"
                )
                holder = source.where.partition(":")[0].replace(" (autograd graph)", "")
                warnings.append(
                    f"{holder} keeps {what} alive, {format_bytes(nbytes)} on {dev}, "
                    f"more after every run: {source.fix}"
                )
        return warnings

    # -- reading ---------------------------------------------------------------------------
    def to_frame(self) -> Any:
        import pandas as pd

        columns = ["cell", "device", "bytes", "delta", "peak", "grew"]
        rows = [{c: row.to_dict()[c] for c in columns} for row in self.rows]
        frame = pd.DataFrame(rows, columns=columns)
        frame["peak"] = pd.array(frame["peak"].tolist(), dtype="Int64")
        return frame

    def text(self, last: int | None = None) -> str:
        rows = self.rows[-last:] if last else self.rows
        if not rows:
            return "No cells recorded yet (the timeline starts when torch is imported)."
        header = ("cell", "device", "held", "change", "peak", "grew / shrank")
        table = [header] + [
            (
                str(r.cell),
                r.device,
                format_bytes(r.bytes),
                _signed(r.delta),
                format_bytes(r.peak) if r.peak is not None else "",
                r.grew + (f"  ({r.note})" if r.note else ""),
            )
            for r in rows
        ]
        widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
        return "\n".join(
            "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True))
            + "  "
            + row[-1]
            for row in table
        ).rstrip()

    def to_json(self, last: int = 200) -> list[dict[str, Any]]:
        return [row.to_dict() for row in self.rows[-last:]]


def device_figures() -> dict[str, tuple[int | None, int | None, int | None]]:
    """{"cuda:N": (allocated, reserved, peak allocated)} for the accelerator's devices -- only
    when it is *already* initialised (reading them otherwise would initialise it)."""
    from .devices import accelerator_type, device_count, is_initialized, memory_figures

    kind = accelerator_type()
    if kind is None or not is_initialized(kind):
        return {}
    figures = {}
    for index in range(device_count(kind)):
        found = memory_figures(f"{kind}:{index}")
        if found.allocated is not None or found.reserved is not None:
            figures[f"{kind}:{index}"] = (found.allocated, found.reserved, found.peak)
    return figures


def reset_peaks() -> bool | None:
    """Reset the process-wide peak counters of the accelerator's devices
    (``reset_peak_memory_stats``) when it is already initialised; never initialises it.
    None: nothing initialised yet (a peak read later is the peak since then)."""
    from .devices import accelerator_type, device_count, is_initialized, reset_peak

    kind = accelerator_type()
    if kind is None or not is_initialized(kind):
        return None
    return all([reset_peak(f"{kind}:{i}") for i in range(device_count(kind))])


# --------------------------------------------------------------------------------------------
# Out of memory, explained

_SIZE = r"([\d.]+)\s*(bytes|B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)"
_UNIT = {
    "bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
    "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40,
}  # fmt: skip
_CPU_OOM = re.compile(
    r"DefaultCPUAllocator: can't allocate memory: you tried to allocate (\d+) bytes"
)
_ACCEL_OOM = re.compile(
    r"(CUDA|XPU|MLU|HIP) out of memory\. Tried to allocate "
    + _SIZE
    + r"\.? ?\(?(?:GPU|Device|MLU) (\d+)"
)
_OLD_CUDA = re.compile(
    r"Tried to allocate "
    + _SIZE
    + r" \(GPU (\d+); "
    + _SIZE
    + r" total capacity; "
    + _SIZE
    + r" already allocated; "
    + _SIZE
    + r" free; "
    + _SIZE
    + r" reserved in total"
)
_TOTAL = re.compile(r"total capac(?:i)?ty of " + _SIZE + r" of which " + _SIZE + r" is free")
_PROCESS = re.compile(r"this process has " + _SIZE + r" memory in use")
_OTHERS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_ALLOCATED = re.compile(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch")
_UNALLOCATED = re.compile(r"and " + _SIZE + r" is reserved by PyTorch but unallocated")
_PRIVATE = re.compile(r"with " + _SIZE + r" allocated in private pools")
_ALLOWED = re.compile(_SIZE + r" allowed;")
_MPS = re.compile(
    r"MPS backend out of memory \(MPS allocated: "
    + _SIZE
    + r", other allocations: "
    + _SIZE
    + r", max allowed: "
    + _SIZE
    + r"\)\. Tried to allocate "
    + _SIZE
)
_HUGE = re.compile(r"Tried to allocate more than 1EB memory")
_CUDA_ERROR = re.compile(r"CUDA error: out of memory")


def _size(number: str, unit: str) -> int:
    return int(round(float(number) * _UNIT[unit]))


@dataclass
class OOMFacts:
    """What an out-of-memory message says (sizes in bytes; None where it says nothing)."""

    device: str
    request: int | None
    total: int | None = None
    free: int | None = None
    process: int | None = None
    allocated: int | None = None
    reserved_unallocated: int | None = None
    other_processes: int | None = None
    private_pools: int | None = None
    allowed: int | None = None

    @property
    def non_pytorch(self) -> int | None:
        """Memory this process uses outside PyTorch's allocator (CUDA context, libraries)."""
        if self.process is None or self.allocated is None or self.reserved_unallocated is None:
            return None
        return max(0, self.process - self.allocated - self.reserved_unallocated)


def parse_oom(message: str) -> OOMFacts | None:
    """Parse torch's out-of-memory texts: the CPU allocator's, and the CUDA caching allocator's
    of torch 2.1-2.14 (and the older ``(GPU 0; ... total capacity; ...)`` form), XPU, MPS."""
    match = _CPU_OOM.search(message)
    if match:
        return OOMFacts("cpu", int(match.group(1)))
    match = _OLD_CUDA.search(message)
    if match:
        g = match.groups()
        facts = OOMFacts(f"cuda:{g[2]}", _size(g[0], g[1]), total=_size(g[3], g[4]))
        facts.allocated = _size(g[5], g[6])
        facts.free = _size(g[7], g[8])
        facts.reserved_unallocated = max(0, _size(g[9], g[10]) - facts.allocated)
        return facts
    match = _ACCEL_OOM.search(message)
    if match:
        backend, number, unit, index = match.groups()
        kind = {"CUDA": "cuda", "HIP": "cuda", "XPU": "xpu", "MLU": "mlu"}[backend]
        facts = OOMFacts(f"{kind}:{index}", _size(number, unit))
        if m := _TOTAL.search(message):
            facts.total, facts.free = _size(*m.groups()[:2]), _size(*m.groups()[2:])
        if m := _PROCESS.search(message):
            facts.process = _size(*m.groups())
        others = [_size(n, u) for _, n, u in _OTHERS.findall(message)]
        facts.other_processes = sum(others) if others else None
        if m := _ALLOCATED.search(message):
            facts.allocated = _size(*m.groups())
        if m := _UNALLOCATED.search(message):
            facts.reserved_unallocated = _size(*m.groups())
        if m := _PRIVATE.search(message):
            facts.private_pools = _size(*m.groups())
        if m := _ALLOWED.search(message):
            facts.allowed = _size(*m.groups())
        return facts
    match = _MPS.search(message)
    if match:
        g = match.groups()
        facts = OOMFacts("mps", _size(g[6], g[7]), allocated=_size(g[0], g[1]))
        facts.allowed = _size(g[4], g[5])
        return facts
    if _HUGE.search(message):
        return OOMFacts("cuda", None)
    if _CUDA_ERROR.search(message):
        return OOMFacts("cuda", None)
    return None


@dataclass
class OOMExplanation:
    """The automatic explanation of an out-of-memory error. Frees nothing by itself."""

    facts: OOMFacts
    biggest: list[tuple[str, int]]  # (name, bytes on that device)
    holders: list[Holder]
    steps: list[str]
    machine_memory: int | None = None
    live: dict[str, int] = field(default_factory=dict)  # allocator figures read just now

    def lines(self) -> list[str]:
        facts = self.facts
        request = format_bytes(facts.request) if facts.request is not None else "an unknown size"
        lines = [f"Out of memory on {facts.device}: the request was {request}."]
        if facts.total is not None:
            free = f", {format_bytes(facts.free)} free" if facts.free is not None else ""
            lines.append(f"  {facts.device} has {format_bytes(facts.total)} in all{free}.")
        if self.machine_memory and facts.device == "cpu":
            lines.append(f"  This machine has {format_bytes(self.machine_memory)} of memory.")
        if facts.allocated is not None:
            lines.append(f"  Allocated by PyTorch: {format_bytes(facts.allocated)}.")
        if facts.reserved_unallocated is not None:
            lines.append(
                "  Reserved by PyTorch but unallocated (cached blocks): "
                f"{format_bytes(facts.reserved_unallocated)}."
            )
        if facts.non_pytorch is not None:
            lines.append(
                "  This process outside PyTorch's allocator (CUDA context, libraries): "
                f"{format_bytes(facts.non_pytorch)}."
            )
        if facts.other_processes:
            lines.append(f"  Other processes on it: {format_bytes(facts.other_processes)}.")
        for label, value in self.live.items():
            lines.append(f"  Now {label}: {format_bytes(value)}.")
        if self.biggest:
            lines.append(f"Biggest named objects on {facts.device}:")
            lines.extend(f"  {name}: {format_bytes(size)}" for name, size in self.biggest)
        if self.holders:
            lines.append(f"Held outside named variables on {facts.device}:")
            lines.extend(
                f"  [{i}] {h.where}: {format_bytes(h.bytes)} -> %devices --release {i}"
                for i, h in enumerate(self.holders)
            )
        if self.steps:
            lines.append("Next steps (nothing was freed for you):")
            lines.extend(f"  - {step}" for step in self.steps)
        return lines

    def text(self) -> str:
        return "\n".join(self.lines())

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        body = html.escape(self.text())
        return (
            '<pre class="torchdevice-magic-oom" style="border-left:3px solid #c60;'
            f'padding-left:8px">{body}</pre>'
        )


def _machine_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def explain_oom(
    exc: BaseException,
    namespace: Mapping[str, Any],
    *,
    inventory: Inventory | None = None,
    forgotten: Mapping[str, Keys] | None = None,
    last_error: ErrorGetter | None = None,
    limit: int = 5,
) -> OOMExplanation | None:
    """Explain an out-of-memory error in the user's names, or None for any other error.

    Shows the request and device (from the message), the biggest named objects on that
    device, what holds memory there outside named variables (with the release call), on CUDA
    the reserved-but-unallocated and non-PyTorch memory, and safe next steps. Frees nothing.
    """
    message = str(exc) if isinstance(exc, BaseException) else ""
    facts = parse_oom(message)
    if facts is None:
        return None
    if "torch" not in sys.modules:
        return OOMExplanation(facts, [], [], [])
    if inventory is None:
        inventory = scan(namespace)
    device = facts.device
    sizes: dict[str, int] = {}
    for record in inventory.records:
        if record.hidden:
            continue
        for dev, nbytes in record.bytes_by_device.items():
            if _device_matches(dev, device) and nbytes:
                root = record.root or record.name
                sizes[root] = sizes.get(root, 0) + nbytes
    biggest = sorted(sizes.items(), key=lambda item: -item[1])[:limit]
    found = holders(
        namespace, device, inventory=inventory, forgotten=forgotten, last_error=last_error
    )[:limit]
    live: dict[str, int] = {}
    if device not in ("cpu", "meta"):
        from .devices import memory_figures

        figures = memory_figures(device if ":" in device else f"{device}:0")
        if figures.allocated is not None and figures.reserved is not None:
            live = {
                "allocated": figures.allocated,
                "reserved but unallocated": figures.reserved - figures.allocated,
            }
    machine = _machine_memory() if device == "cpu" else None
    steps = _next_steps(facts, biggest, found, machine)
    return OOMExplanation(facts, biggest, found, steps, machine, live)


def _next_steps(
    facts: OOMFacts,
    biggest: list[tuple[str, int]],
    found: list[Holder],
    machine: int | None,
) -> list[str]:
    steps = []
    capacity = facts.total or (machine if facts.device == "cpu" else None)
    if facts.request is not None and capacity is not None and facts.request > capacity:
        steps.append(
            f"the request alone ({format_bytes(facts.request)}) is more than "
            f"{facts.device} has ({format_bytes(capacity)}): freeing memory cannot help; "
            "make it smaller (a smaller batch or size, a smaller dtype, or chunks)"
        )
    if found:
        calls = ", ".join(f"%devices --release {i}" for i in range(len(found)))
        held = format_bytes(sum(h.bytes for h in found))
        steps.append(f"release what is held outside your variables ({held}): {calls}")
    if biggest:
        names = ", ".join(name for name, _ in biggest[:3])
        steps.append(f"del the names you no longer need (biggest: {names})")
    if facts.reserved_unallocated and facts.request and facts.reserved_unallocated >= facts.request:
        steps.append(
            "much memory is reserved but unallocated (fragmentation): torch.cuda.empty_cache(), "
            "or restart with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        )
    if not steps or not any("smaller" in s for s in steps):
        steps.append("then retry with a smaller batch")
    return steps


__all__ = [
    "Holder",
    "HolderList",
    "holders",
    "held_outside",
    "holders_text",
    "graph_tensors",
    "CellMemory",
    "Timeline",
    "device_figures",
    "reset_peaks",
    "OOMFacts",
    "OOMExplanation",
    "parse_oom",
    "explain_oom",
]
