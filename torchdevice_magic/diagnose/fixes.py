"""The fix: one statement per mover, the notes that go with it, the one-click move.

For each mover (chosen by :mod:`.policy`) the statement that moves it without losing values: modules in place, optimizer state after its parameters, trainable leaves kept leaves,
containers rebuilt; meta modules materialised with ``to_empty`` and reloaded (from a
checkpoint in the namespace when there is one); a tensor a method makes without a device made
on its input's device; a plain tensor attribute registered as a buffer. Also the notes that
go with the fix, the one-click :class:`MoveAction` where the fix is a plain move of namespace
names, and the :class:`Culprit` rows shown.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .candidates import Candidate, is_type, on_target, quote_device
from .cells import Cell
from .explain import Culprit, FixLine, MoveAction
from .frames import is_user_filename
from .schema import MessageMatch, Rule
from .sources import creation_on_device, function_tree

__all__ = [
    "FixDraft",
    "add_notes",
    "buffer_in_class",
    "fallback_fix",
    "fix_location",
    "make_on_input_device",
    "materialise_meta_module",
    "move_statement",
    "names_bound_before",
    "one_click_move",
    "recreate_meta_tensors",
    "rebuild_attribute_container",
    "register_attribute_as_buffer",
    "to_culprit",
]

# --------------------------------------------------------------------------------------------
# The fix, one statement per mover
# --------------------------------------------------------------------------------------------


def move_statement(c: Candidate, target: str | None, dtype: str | None = None) -> str:
    """The statement that moves one candidate to ``target`` (and/or converts to ``dtype``)."""
    name = c.alias or c.name
    dev = quote_device(target) if target else None
    to_args = ", ".join(a for a in (dev, f"torch.{dtype}" if dtype else None) if a)
    if not to_args:
        return ""
    info = c.info
    if info.category == "object":
        # an object holding modules (a trainer): move its modules in place, so an optimizer
        # that holds their Parameters stays valid; an object with its own .to() (a
        # BatchEncoding) moves as a whole; other objects: no one-line move
        if dev is not None and not dtype and not info.modules and info.moves_itself:
            return f"{name} = {name}.to({dev})"
        if dev is None or dtype or not info.modules:
            return ""
        return "; ".join(
            f"{name}{path}.to({dev})"
            for path, devices in info.modules
            if not on_target(devices, target or "")
        )
    if info.category == "module":
        if dev is None:
            return ""
        return f"{name}.to({dev})"  # modules move in place: Parameters keep their identity
    if info.category == "optimizer":
        if dev is None:
            return ""
        return (
            f"for s in {name}.state.values(): s.update({{k: v.to({dev}) for k, v in s.items() "
            f'if torch.is_tensor(v) and k != "step"}})'
        )
    if info.category == "container":
        guard = "" if info.all_tensors else " if torch.is_tensor(t) else t"
        if info.container == "dict":
            return f"{name} = {{k: t.to({to_args}){guard} for k, t in {name}.items()}}"
        if info.container == "tuple":
            return f"{name} = tuple(t.to({to_args}){guard} for t in {name})"
        return f"{name} = [t.to({to_args}){guard} for t in {name}]"
    if info.trainable_leaf:
        # ``w.to()`` on a trainable leaf returns a non-leaf copy whose ``.grad`` stays None;
        # keep it a leaf (and a Parameter if it was one).
        if info.is_parameter:
            moved = f"torch.nn.Parameter({name}.detach().to({to_args}))"
        else:
            moved = f"{name}.detach().to({to_args}).requires_grad_()"
        if info.optimized:
            # an optimizer updates this very object: a new one bound to the name would leave
            # it training the old tensor; swapping keeps the object (works across devices)
            return f"torch.utils.swap_tensors({name}, {moved})"
        return f"{name} = {moved}"
    return f"{name} = {name}.to({to_args})"


def _checkpoint_name(
    namespace: Mapping[str, Any] | None, module: Any, torch: Any
) -> tuple[str, str] | None:
    """A state dict for ``module`` in the namespace: (variable, expression to load), e.g.
    (``ckpt``, ``ckpt["model"]``). Matched by keys only; no tensor is read."""
    if namespace is None or module is None:
        return None
    try:
        wanted = set(torch.nn.Module.state_dict(module, keep_vars=True).keys())
    except Exception:
        return None
    if not wanted:
        return None
    try:
        items = list(dict.items(namespace) if isinstance(namespace, dict) else namespace.items())
    except Exception:
        return None

    def fits(d: Any) -> bool:
        try:
            keys = {k for k in dict.keys(d) if isinstance(k, str)}
        except Exception:
            return False
        return len(keys & wanted) >= max(1, len(wanted) // 2)

    for name, value in items[:20_000]:
        if not isinstance(name, str) or name.startswith("_") or not is_type(value, dict):
            continue
        if fits(value):
            return name, name
        try:
            for key in list(dict.keys(value))[:50]:
                inner = dict.get(value, key)
                if isinstance(key, str) and is_type(inner, dict) and fits(inner):
                    return name, f"{name}[{key!r}]".replace("'", '"')
        except Exception:
            continue
    return None


def _init_assignment(cls: Any, attr: str) -> tuple[str, str] | None:
    """(``Class.__init__``, ``self.attr = <expr>`` as written) from the class's source, read
    with linecache (notebook cells included). None when the source is not available or is not
    the user's (a library's class: its file is not theirs to edit). The instance is
    ``__init__``'s first parameter (``self``, or however the class calls it)."""
    try:
        code = cls.__dict__.get("__init__").__code__
        me = code.co_varnames[0] if code.co_argcount else "self"
    except Exception:
        return None
    if not is_user_filename(code.co_filename):
        return None
    found = function_tree(code)
    if found is None:
        return None
    for node in ast.walk(found[0]):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == me
                    and target.attr == attr
                ):
                    return f"{cls.__name__}.__init__", ast.unparse(node.value)
    return None


@dataclass
class FixDraft:
    """The fix while it is being written, before it becomes a :class:`~.explain.Diagnosis`."""

    #: the statements, each with where it goes
    fix_lines: list[FixLine] = field(default_factory=list)
    #: what the user should know (duplicates are dropped when shown)
    notes: list[str] = field(default_factory=list)
    #: False when no safe fix exists; ``why`` says why
    safe: bool = True
    why: str = ""
    #: tensors a method makes without a device: (name, Class.method, where to make them)
    made_here: list[tuple[str, str, str]] = field(default_factory=list)


def materialise_meta_module(
    c: Candidate,
    dest: str,
    namespace: Mapping[str, Any] | None,
    obj: Any,
    torch: Any,
    draft: FixDraft,
) -> None:
    name = c.alias or c.name
    draft.fix_lines.append(
        FixLine(fix_location(c), f"{name}.to_empty(device={quote_device(dest)})")
    )
    on_meta = _meta_tensor_names(obj, torch)
    if on_meta:
        draft.notes.append(f"{name} holds tensors on meta (no data): {on_meta}.")
    found = _checkpoint_name(namespace, obj, torch)
    if found is not None:
        draft.fix_lines.append(FixLine(fix_location(c), f"{name}.load_state_dict({found[1]})"))
        draft.notes.append(
            f"{name} has tensors on the meta device, which hold no data, so .to() cannot "
            f"copy them: to_empty(device={quote_device(dest)}) allocates real storage (uninitialised) "
            f"and load_state_dict({found[1]}) puts the weights back."
        )
    else:
        draft.notes.append(
            f"{name} has tensors on the meta device, which hold no data, so .to() cannot "
            f"copy them: use {name}.to_empty(device={quote_device(dest)}) and then reload the "
            f"weights, e.g. {name}.load_state_dict(torch.load(PATH)) (to_empty leaves every "
            "parameter uninitialised)."
        )


def _meta_tensor_names(module: Any, torch: Any, shown: int = 6) -> str:
    """Which of a module's tensors are on meta, parameters and buffers said apart:
    ``parameters proj.weight, proj.bias; buffers inv_freq``."""
    if module is None:
        return ""
    parts = []
    for label, named in (
        ("parameters", torch.nn.Module.named_parameters),
        ("buffers", torch.nn.Module.named_buffers),
    ):
        try:
            names = [n for n, t in list(named(module))[:10_000] if t.is_meta]
        except Exception:
            continue
        if names:
            more = f" and {len(names) - shown} more" if len(names) > shown else ""
            parts.append(f"{label} {', '.join(names[:shown])}{more}")
    return "; ".join(parts)


def fix_location(c: Candidate) -> str:
    if c.alias:
        return "cell"
    if c.where == "cell" and c.loop_var:
        return "loop"
    if c.where.startswith("attribute "):
        return "cell"
    return c.where


def make_on_input_device(
    c: Candidate, code: Any, dest: str, cands: list[Candidate], draft: FixDraft
) -> bool:
    """A tensor a Module method makes itself without a device (``h0 = torch.zeros(...)`` in
    forward()): make it on the device of the method's input (``device=idx.device``), which
    is right for every call wherever the model goes; the device itself where no argument is
    there. False where the local is not made by a torch factory in that method."""
    by_id = {k.obj_id: k for k in cands}
    arg = next(
        (
            name
            for name, obj_id in c.tensor_args
            if (k := by_id.get(obj_id)) is not None and on_target(k.info.devices, dest)
        ),
        None,
    )
    new = creation_on_device(code, c.name, f"{arg}.device" if arg else quote_device(dest))
    if new is None:
        return False
    func = c.where.removeprefix("frame ")
    qualname = str(getattr(code, "co_qualname", "") or func)  # Tagger.forward (3.11+)
    draft.fix_lines.append(FixLine(c.where, new))
    draft.made_here.append((c.name, qualname, f"{arg}.device" if arg else dest))
    return True


def buffer_in_class(c: Candidate, draft: FixDraft) -> None:
    attr, cls = c.attr or "", c.cls
    c.cls = None
    found = _init_assignment(cls, attr)
    name = c.alias or c.name
    if found is not None:
        where, expr = found
        draft.fix_lines.append(FixLine(f"class {where}", f'self.register_buffer("{attr}", {expr})'))
        draft.notes.append(
            f"{name} is a plain tensor attribute, so .to() on its module left it behind: in "
            f'{where} replace `self.{attr} = {expr}` with `self.register_buffer("{attr}", '
            f"{expr})` and it moves (and is saved) with the module."
        )
    else:
        draft.notes.append(
            f"{name} is a plain tensor attribute, so .to() on its module left it behind: "
            f'create it with self.register_buffer("{attr}", ...) in __init__.'
        )


def rebuild_attribute_container(
    c: Candidate, dest: str, draft: FixDraft, torch_bound: bool = True
) -> None:
    """A plain list/tuple/dict a module keeps as an attribute: ``module.to()`` never sees what
    it holds. Modules in it become an ``nn.ModuleList``/``nn.ModuleDict`` (registered, so they
    move and save with the module from then on); tensors in it are moved. ``torch_bound``:
    the namespace's ``torch`` is torch (else the statement imports it first)."""
    attr, owner, kind = c.attr or "", c.owner, c.info.container
    c.cls = None
    name = f"{owner}.{attr}" if owner else f"self.{attr}"
    dev = quote_device(dest)
    if c.holds_modules:
        holder = "ModuleDict" if kind == "dict" else "ModuleList"
        statement = f"{name} = torch.nn.{holder}({name}).to({dev})"
        if not torch_bound:
            statement = f"import torch; {statement}"
        draft.notes.append(
            f"{name} is a plain Python {kind} of modules, so .to() on its module never moved "
            f"them (nor does state_dict() save them): make it a torch.nn.{holder} in __init__ "
            "and they move with the module."
        )
    else:
        statement = move_statement(c, dest)
        draft.notes.append(
            f"{name} is a plain Python {kind} of tensors, so .to() on its module never moved "
            "them: register each as a buffer (and read them through the module), or move the "
            f"{kind} with the module."
        )
    if not owner:
        draft.safe = False
        draft.why = f"self.{attr} is not reachable from a variable: move it where it is made."
        return
    draft.fix_lines.append(FixLine("cell", statement.replace(c.alias or c.name, name)))


def register_attribute_as_buffer(c: Candidate, dest: str, draft: FixDraft) -> None:
    attr = c.attr or ""
    cls = c.cls
    c.cls = None
    owner = c.owner
    if owner and c.root_name and c.siblings > 1:
        # every module of that class was left behind, not only the one that failed first
        draft.notes.append(
            f"{c.siblings} {getattr(cls, '__name__', 'such')} modules in {c.root_name} hold "
            f"{attr} as a plain tensor attribute: the fix moves all of them."
        )
        draft.fix_lines.append(
            FixLine(
                "cell",
                f"for m in [m for m in {c.root_name}.modules() if type(m) is type({owner}) and "
                f'"{attr}" in vars(m)]: m.register_buffer("{attr}", vars(m).pop("{attr}")'
                f".to({quote_device(dest)}))",
            )
        )
    elif owner:
        draft.fix_lines.append(
            FixLine(
                "cell",
                # pop() with a default: right also once the class registers it itself
                f'{owner}.register_buffer("{attr}", vars({owner}).pop("{attr}", {owner}.{attr})'
                f".to({quote_device(dest)}))",
            )
        )
    found = _init_assignment(cls, attr) if cls is not None else None
    if found is not None:
        where, expr = found
        draft.fix_lines.append(FixLine(f"class {where}", f'self.register_buffer("{attr}", {expr})'))
        draft.notes.append(
            f"self.{attr} is a plain tensor attribute, so module.to() does not move it: in "
            f'{where} replace `self.{attr} = {expr}` with `self.register_buffer("{attr}", '
            f"{expr})` and it moves (and is saved) with the module."
        )
    else:
        draft.notes.append(
            f"self.{attr} is a plain tensor attribute, so module.to() does not move it: create "
            f'it with self.register_buffer("{attr}", ...) in __init__.'
        )
    if not owner and found is None:
        draft.safe = False
        draft.why = f"self.{attr} is not reachable from a variable: register it as a buffer."


def recreate_meta_tensors(
    no_data: list[Candidate], cell: Cell, dest: str, draft: FixDraft
) -> set[str]:
    """Meta tensors the cell itself creates (``x = torch.randn(3, device="meta")``): rewrite
    that line to create them on ``dest``. Returns the names handled."""
    done: set[str] = set()
    if cell.tree is None:
        return done
    for c in no_data:
        if c.where != "cell" or c.info.category not in ("tensor", "container"):
            continue
        for node in ast.walk(cell.tree):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            t = node.targets[0]
            if not (isinstance(t, ast.Name) and t.id == c.name):
                continue
            creations = [
                k for k in cell.creations_in(node.lineno) if k.device and "meta" in k.device
            ]
            if creations:
                new = cell.rewrite(node.lineno, creations, dest)
                if new:
                    draft.fix_lines.append(FixLine(f"line {node.lineno}", new))
                    done.add(c.name)
                    break
    return done


def add_notes(
    draft: FixDraft,
    rule: Rule,
    match: MessageMatch,
    relevant: list[Candidate],
    movers: list[Candidate],
    dest: str | None,
    user_target: str | None,
    meta_ok: bool,
) -> None:
    if dest == "meta":
        meta_mods = [c for c in relevant if c.info.category == "module" and c.info.meta_params]
        if meta_mods:
            m0 = meta_mods[0].alias or meta_mods[0].name
            draft.notes.append(
                "meta tensors hold no data: moving to meta makes the error go away but "
                f"computes nothing; to run for real, materialise {m0} on a real device with "
                f'{m0}.to_empty(device="cpu") and load its weights ({m0}.load_state_dict(...)).'
            )
        else:
            draft.notes.append(
                "meta tensors hold no data: moving to meta makes the error go away but "
                "computes nothing; to run for real, create the meta tensors on a real device."
            )
    elif any("meta" in c.info.by_device for c in relevant) and not meta_ok and rule.says_meta_stays:
        draft.notes.append(
            "meta tensors hold no data, so nothing is moved to meta (that would throw real "
            "values away and compute nothing)."
        )
    if rule.converts_dtype and match.dtype_mismatch:
        types = " and ".join(match.types)
        draft.notes.append(
            f"this message also covers dtype mismatches: {types} differ in dtype "
            f"({match.dtypes[0]} vs {match.dtypes[1]}); convert the input with "
            f'.to("{dest}", torch.{match.dtypes[1]}).'
        )
    opt = next((c for c in movers if c.info.category == "optimizer"), None)
    if opt is not None:
        draft.notes.append(
            f"{opt.alias or opt.name}'s state is not where its parameters are: "
            "optimizer.load_state_dict() puts the state on the parameters' device at the time "
            "of loading, so load it after model.to(device) (or move the state as above)."
        )
    if any(c.info.trainable_leaf and not c.info.optimized and c in movers for c in relevant):
        draft.notes.append(
            "a trainable leaf tensor gets a new object when moved: rebuild any optimizer that "
            "holds the old one."
        )
    if not user_target and dest == "cpu" and rule.offers_accelerator:
        others = [d for c in relevant for d in c.info.by_device if d not in ("cpu", "meta")] + [
            d for d in match.devices if d not in ("cpu", "meta")
        ]
        if others:
            alt = "; ".join(
                src
                for c in relevant
                if c.info.category != "expression"
                and not on_target(c.info.devices, others[0])
                and (src := move_statement(c, others[0]))
            )
            if alt:
                draft.notes.append(f"to run on {others[0]} instead: {alt}")


def one_click_move(
    draft: FixDraft,
    movers: list[Candidate],
    dest: str | None,
    meta_ok: bool,
    namespace: Mapping[str, Any] | None,
    rebound: frozenset[str] = frozenset(),
) -> MoveAction | None:
    """The fix as a plain move of namespace names, for the one-click button; None when the fix
    is anything else (a rewrite, to_empty, a buffer, moving a loop's batch variable) or when
    the failing cell itself binds a mover before the failing line (``rebound``): its re-run
    would make it again where it was, so the move would fix nothing."""
    if not draft.safe or dest is None or not movers or namespace is None:
        return None
    if dest == "meta" and not meta_ok:
        return None
    names: list[str] = []
    for c in movers:
        if c.info.category == "expression" or c.where.startswith("attribute "):
            return None
        if "meta" in c.info.by_device and dest != "meta":
            return None  # meta data cannot be copied
        if c.loop_var or (c.where != "cell" and not c.alias):
            return None  # the next iteration / call makes a new one: the code must change
        name = c.alias or c.name
        if "." in name or "[" in name:
            return None  # the move engine moves top-level names
        if name in rebound:
            return None
        try:
            if name not in namespace:
                return None
        except Exception:
            return None
        names.append(name)
    return MoveAction(tuple(dict.fromkeys(names)), dest)


def names_bound_before(cell: Cell, lineno: int | None) -> frozenset[str]:
    """The names the cell's own code binds (assigns, imports, loops over) at or before
    ``lineno`` (anywhere where the failing line is unknown): a re-run of the cell makes them
    anew, so moving them in the namespace does not survive it."""
    if cell.tree is None:
        return frozenset()
    bound: set[str] = set()
    for node in ast.walk(cell.tree):
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)):
            continue
        if lineno is None or node.lineno <= lineno:
            bound.add(node.id)
    return frozenset(bound)


def fallback_fix(rule: Rule, match: MessageMatch, dest: str | None) -> str:
    """No culprit found: the rule's own fallback, or say what to do in a comment (still valid
    Python source)."""
    if rule.fallback_fix:
        return rule.text_for(rule.fallback_fix, match, dest)
    if dest is None:
        return "# move every tensor and module of this operation to one device with .to(device)"
    what = f"the tensor passed as '{match.argument}'" if match.argument else "every input"
    op = f" of {match.operator}" if match.operator else ""
    return f'# move {what}{op} to "{dest}": x = x.to("{dest}")'


def to_culprit(c: Candidate) -> Culprit:
    return Culprit(
        name=c.name,
        where=c.where,
        kind=c.info.kind,
        devices=c.info.devices,
        bytes=c.info.actual,
        needed_bytes=c.info.needed,
        bytes_by_device=dict(c.info.by_device),
        dtype=c.info.dtype,
        alias=c.alias,
    )
