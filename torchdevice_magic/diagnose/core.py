"""diagnose(): the rule that matches, the culprits, the fix.

Culprits are found in three places: the names the failing cell reads (looked up in the user's
namespace), the locals of the innermost *user* frames of the traceback (the mismatch usually
happens inside ``train(model, loader)``), and -- when a tensor nobody named is the odd one --
the expression in the failing line that creates it. What each candidate is and where its bytes
live comes from ``torchdevice_magic.scan()`` (the one walker); this module never walks objects.

A fix moves data toward a real compute device and never loses values: nothing real is moved to
``meta`` unless the user said meta is a target (``allow_meta``, or ``target="meta"``); meta
parameters are materialised with ``to_empty`` and reloaded (from the checkpoint in the namespace
when there is one); where no safe one-line fix exists the diagnosis says so and why.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .candidates import (
    _Candidate,
    _expression_candidates,
    _is_type,
    _normalize_target,
    _on_target,
    _quote,
    _same_device,
    _torch,
)
from .cells import Cell, parse_cell, user_function_calls
from .collect import _collect, _resolve, frame_creations
from .collect import _submodule_expr as _submodule_expr  # re-exported: tests import it from here
from .explain import Culprit, Diagnosis, FixLine, MoveAction
from .rules import MessageMatch, parse_message, rule_for
from .sources import (
    _failing_line,
    _function_tree,
    _local_creation,
    _running_codes,
)

__all__ = ["diagnose"]


# --------------------------------------------------------------------------------------------
# Candidates
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Where to, and who moves
# --------------------------------------------------------------------------------------------


def _relevant(c: _Candidate, devices: tuple[str, ...]) -> bool:
    if not c.info.by_device:
        return False
    if not devices:
        return True
    return any(_same_device(d, m) for d in c.info.by_device for m in devices)


def _choose_target(cands: list[_Candidate], match: MessageMatch) -> tuple[str | None, str]:
    """Where the bigger side is: (device, reason)."""
    # The side holding model parameters is the big thing: a model is moved once and on
    # purpose, batches every step, and optimizer state follows its parameters. Between two
    # parts of a split model, or between plain tensors, bytes decide.
    totals: dict[str, int] = {}
    stateful: dict[str, int] = {}
    for c in cands:
        for dev, n in c.info.by_device.items():
            totals[dev] = totals.get(dev, 0) + n
        for dev, n in c.info.anchor.items():
            stateful[dev] = stateful.get(dev, 0) + n + 1  # +1: a parameterless anchor counts
    if len(totals) >= 2:
        best = max(totals, key=lambda d: (stateful.get(d, 0), totals[d], d != "cpu", d))
        return best, "move the small thing to where the big thing is"
    if match.expected:
        return match.expected, "move it to the device the operation expected"
    non_cpu = [d for d in match.devices if d != "cpu"]
    if totals and match.devices:
        (only,) = totals
        others = [d for d in match.devices if not _same_device(d, only)]
        if others:
            return others[0], "move it to the other device in the message"
    if non_cpu:
        return non_cpu[0], "move everything to one device"
    if match.devices:
        return match.devices[0], "move everything to one device"
    return None, ""


def _real_device(cands: list[_Candidate], match: MessageMatch, asked: str | None) -> str:
    """A device that keeps data, for things that are on meta now."""
    if asked and asked != "meta":
        return asked
    for d in [*match.devices, *(d for c in cands for d in c.info.by_device)]:
        if d != "meta":
            return d
    return "cpu"


# --------------------------------------------------------------------------------------------
# The fix, one statement per mover
# --------------------------------------------------------------------------------------------


def _move_source(c: _Candidate, target: str | None, dtype: str | None = None) -> str:
    """The statement that moves one candidate to ``target`` (and/or converts to ``dtype``)."""
    name = c.alias or c.name
    dev = _quote(target) if target else None
    to_args = ", ".join(a for a in (dev, f"torch.{dtype}" if dtype else None) if a)
    if not to_args:
        return ""
    info = c.info
    if info.category == "object":
        # an object holding modules (a trainer): move its modules in place, so an optimizer
        # that holds their Parameters stays valid; other objects: no one-line move
        if dev is None or dtype or not info.modules:
            return ""
        return "; ".join(
            f"{name}{path}.to({dev})"
            for path, devices in info.modules
            if not _on_target(devices, target or "")
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
            return f"{name} = torch.nn.Parameter({name}.detach().to({to_args}))"
        return f"{name} = {name}.detach().to({to_args}).requires_grad_()"
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
        if not isinstance(name, str) or name.startswith("_") or not _is_type(value, dict):
            continue
        if fits(value):
            return name, name
        try:
            for key in list(dict.keys(value))[:50]:
                inner = dict.get(value, key)
                if isinstance(key, str) and _is_type(inner, dict) and fits(inner):
                    return name, f"{name}[{key!r}]".replace("'", '"')
        except Exception:
            continue
    return None


def _init_assignment(cls: Any, attr: str) -> tuple[str, str] | None:
    """(``Class.__init__``, ``self.attr = <expr>`` as written) from the class's source, read
    with linecache (notebook cells included). None when the source is not available. The
    instance is ``__init__``'s first parameter (``self``, or however the class calls it)."""
    try:
        code = cls.__dict__.get("__init__").__code__
        me = code.co_varnames[0] if code.co_argcount else "self"
    except Exception:
        return None
    found = _function_tree(code)
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
class _Plan:
    fix_lines: list[FixLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    safe: bool = True
    why: str = ""
    #: tensors a method makes without a device: (name, Class.method, where to make them)
    made_here: list[tuple[str, str, str]] = field(default_factory=list)


def _meta_module_fix(
    c: _Candidate, dest: str, namespace: Mapping[str, Any] | None, obj: Any, torch: Any, plan: _Plan
) -> None:
    name = c.alias or c.name
    plan.fix_lines.append(FixLine(_place(c), f"{name}.to_empty(device={_quote(dest)})"))
    found = _checkpoint_name(namespace, obj, torch)
    if found is not None:
        plan.fix_lines.append(FixLine(_place(c), f"{name}.load_state_dict({found[1]})"))
        plan.notes.append(
            f"{name} has parameters on the meta device, which hold no data, so .to() cannot "
            f"copy them: to_empty(device={_quote(dest)}) allocates real storage (uninitialised) "
            f"and load_state_dict({found[1]}) puts the weights back."
        )
    else:
        plan.notes.append(
            f"{name} has parameters on the meta device, which hold no data, so .to() cannot "
            f"copy them: use {name}.to_empty(device={_quote(dest)}) and then reload the "
            f"weights, e.g. {name}.load_state_dict(torch.load(PATH)) (to_empty leaves every "
            "parameter uninitialised)."
        )


def _place(c: _Candidate) -> str:
    if c.alias:
        return "cell"
    if c.where == "cell" and c.loop_var:
        return "loop"
    if c.where.startswith("attribute "):
        return "cell"
    return c.where


# --------------------------------------------------------------------------------------------
# diagnose()
# --------------------------------------------------------------------------------------------


def _exception_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo and len(chain) < 20:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        chain.append(e)
        for nxt in (getattr(e, "__cause__", None), getattr(e, "__context__", None)):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    return chain


def _message_of(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        try:
            text = str(exc.args[0]) if exc.args else ""
        except Exception:
            text = ""
    return text


def find_match(exc: BaseException) -> tuple[BaseException, str, MessageMatch] | None:
    """The first exception in ``exc``'s cause/context chain whose message a rule matches."""
    try:
        if not isinstance(exc, BaseException):
            return None
        for e in _exception_chain(exc):
            text = _message_of(e)
            match = parse_message(text)
            if match is not None:
                return e, text, match
    except Exception:
        return None
    return None


def diagnose(
    exc: BaseException,
    namespace: Mapping[str, Any] | None = None,
    cell: str | Cell | None = None,
    *,
    target: str | None = None,
    shell: Any = None,
    allow_meta: bool = False,
    target_reason: str = "as asked",
) -> Diagnosis | None:
    """Explain a device-mismatch error, or return ``None`` if ``exc`` is not one.

    ``namespace`` is the user's namespace (IPython's ``user_ns``), ``cell`` the failing cell's
    source (or its parsed :class:`Cell`), ``shell`` the IPython shell (its ``transform_cell``
    turns magics into Python), ``target`` a device the user asked for (``%%devicecheck -d``):
    then the fix moves everything there; ``target_reason`` says why that device (``"as asked"``
    for ``-d``; the configured default says so). ``allow_meta``: meta may be suggested as a target
    (the user said it stands in for an accelerator); otherwise nothing real moves to meta.
    Never raises.
    """
    found = find_match(exc)
    if found is None:
        return None
    err, text, match = found
    chain = _exception_chain(exc)
    try:
        parsed = cell if isinstance(cell, Cell) else parse_cell(cell, shell)
    except Exception:
        parsed = parse_cell("")
    try:
        return _diagnose(
            err, chain, text, match, namespace, parsed, target, allow_meta, target_reason
        )
    except Exception:
        # Analysis failed on something hostile: still say what the message means.
        try:
            return _diagnose(
                err, [], text, match, None, parse_cell(""), target, allow_meta, target_reason
            )
        except Exception:
            return None


def _diagnose(
    err: BaseException,
    chain: list[BaseException],
    text: str,
    match: MessageMatch,
    namespace: Mapping[str, Any] | None,
    cell: Cell,
    target: str | None,
    allow_meta: bool,
    target_reason: str = "as asked",
) -> Diagnosis:
    torch = _torch()
    rule = rule_for(match.kind)
    cands: list[_Candidate] = []
    objects: dict[int, Any] = {}
    if torch is not None:
        cands = _collect(err, chain, namespace, cell, torch)
        # the few objects a fix needs to look at again (meta modules, attribute owners)
        if namespace is not None:
            for c in cands:
                if c.info.category == "module" and c.info.meta_params:
                    ok, obj = _resolve(namespace, c.alias or c.name, torch)
                    if ok and id(obj) == c.obj_id:
                        objects[c.obj_id] = obj
    lineno = _failing_line(err, chain)

    if (rule.movers == "index" and match.kind == "indices_device") or rule.movers == "meta":
        # the message names one device only (the indexed tensor's; meta): list who is where
        relevant = [c for c in cands if c.info.by_device]
    else:
        relevant = [c for c in cands if _relevant(c, match.devices)]

    # objects that merely hold tensors (loader, dataset, trainer) only where nothing more
    # direct (a tensor, module, optimizer, container) is on their devices
    direct = {d for c in relevant if c.info.category != "object" for d in c.info.by_device}
    relevant = [
        c for c in relevant if c.info.category != "object" or not set(c.info.by_device) <= direct
    ]

    # -- anonymous operands: a device in the message that no named candidate of this line has
    plan_notes: list[str] = []
    if torch is not None and lineno is not None and match.devices:
        in_line = cell.reads_in_line(lineno)
        covered = {
            d
            for c in relevant
            if c.where != "cell" or c.name in in_line or c.name.split(".")[0] in in_line
            for d in c.info.by_device
        }
        missing = [d for d in match.devices if not any(_same_device(d, x) for x in covered)]
        if missing:
            creations = cell.creations_in(lineno, namespace)
            if not creations:
                # no torch factory in the line: the one user function called there made it
                from .frames import is_user_filename

                calls = user_function_calls(
                    cell.statement_at(lineno), namespace, is_user_filename, _running_codes(err)
                )
                if len(calls) == 1:
                    creations = [replace(calls[0], device=missing[0])]
                    plan_notes.append(
                        f"{calls[0].text} is the only call in line {lineno} that can make a "
                        f"tensor no variable holds, so its result is the one on {missing[0]}; "
                        f"better still, make it on the right device inside "
                        f"{calls[0].text.split('(')[0]}()."
                    )
            if not creations:
                frame_creations(err, chain, missing, relevant)
            relevant.extend(_expression_candidates(creations, missing, f"line {lineno}", 0, lineno))

    user_target = _normalize_target(target) if target else None
    meta_ok = allow_meta or user_target == "meta"
    plan = _Plan()
    plan.notes.extend(plan_notes)
    note = rule.note_for(match)
    if note:
        plan.notes.append(note)

    # -- an out= tensor in the failing line: its values are overwritten, so it is the one that
    # moves, to where the inputs are (whatever the message's wording)
    out_name = cell.out_argument(lineno) if lineno is not None else None
    out_cands = [c for c in relevant if out_name is not None and c.name == out_name]
    out_ids: set[int] = set()
    others = [c for c in relevant if c not in out_cands]
    input_devices = {d for c in others for d in c.info.by_device}
    out_target = None
    if out_cands and len(input_devices) == 1 and not user_target:
        (only,) = input_devices
        if not _on_target(out_cands[0].info.devices, only):
            out_target = only

    # -- which device --------------------------------------------------------------------------
    dest: str | None
    reason = ""
    if user_target:
        dest, reason = user_target, f"move everything to {user_target}, {target_reason}"
    elif out_target is not None and (out_target != "meta" or meta_ok):
        dest, reason = out_target, "an out= tensor goes where its inputs are"
    elif rule.target == "none":
        dest = None
    elif rule.target == "cpu":
        dest, reason = "cpu", f"{match.argument or 'it'} must be on the CPU"
    elif rule.target == "real":
        asked = cell.to_target()
        dest = _normalize_target(asked) if asked else _real_device(relevant, match, None)
        reason = "meta tensors hold no data: allocate real storage, then load the weights"
    elif rule.target == "expected" and match.expected and relevant:
        dest, reason = match.expected, "move it to the device the operation expected"
        if match.kind in ("indices_device", "value_device"):
            reason = "move the index tensor to the indexed tensor's device"
        if match.kind == "data_parallel":
            reason = "DataParallel needs the module on device_ids[0]"
    elif rule.target == "expected" and match.expected:
        dest, reason = match.expected, "move it to the device the operation expected"
    else:
        dest, reason = _choose_target(relevant, match)
    if dest is not None and dest == "meta" and not meta_ok:
        # meta keeps no data: computing there makes the error go away and computes nothing
        dest = _real_device(relevant, match, None)
        reason = "meta holds no data: run on a real device"

    # -- who moves -------------------------------------------------------------------------------
    movers: list[_Candidate] = []
    if rule.movers == "meta":
        movers = [c for c in relevant if c.info.category == "module" and c.info.meta_params]
        if not movers:
            movers = [c for c in relevant if "meta" in c.info.by_device]
    elif rule.target == "none":
        movers = []
    elif dest is not None:
        movers = [c for c in relevant if not _on_target(c.info.devices, dest) and not c.covered]
        if not user_target:
            if rule.movers == "modules":
                movers = [c for c in movers if c.info.category == "module"] or movers
            elif rule.movers == "index":
                idx = [
                    c
                    for c in movers
                    if c.info.category in ("tensor", "expression")
                    and (c.info.dtype or "int").startswith(("int", "uint", "bool"))
                ]
                movers = idx or [c for c in movers if c.info.category == "tensor"] or movers
            elif rule.movers == "out":
                named = [c for c in movers if c.name == out_name]
                odd = [
                    c
                    for c in movers
                    if match.argument_device
                    and any(_same_device(d, match.argument_device) for d in c.info.by_device)
                ]
                movers = named or odd or movers
                out_ids = {id(c) for c in (named or odd)}
        if out_target is not None and dest == out_target:
            movers = out_cands
            out_ids = {id(c) for c in out_cands}
        # ``x, y = batch`` inside ``trainer.step(batch)``: the locals are the cell's ``batch``
        # (same storage); moving it at its source fixes them, one line instead of three
        sources = {c.label for c in movers if c.where == "cell" or c.alias}
        inside = [c for c in movers if c.where != "cell" and not c.alias and c.shares & sources]
        if inside and len(inside) < len(movers):
            movers = [c for c in movers if c not in inside]
            where = inside[0].where.removeprefix("frame ")
            lines = "; ".join(
                src for c in inside if c.where == inside[0].where and (src := _move_source(c, dest))
            )
            # (not for a model's forward(): its caller moves the inputs, not the model)
            if lines and not inside[0].module_method:
                plan.notes.append(f"to fix it for every call, inside {where}(): {lines}")
        # an attribute culprit: only the attribute moves (its module is where it should be)
        attrs = [c for c in movers if c.where.startswith("attribute ")]
        if attrs:
            movers = attrs
            if not user_target:
                reason = "a plain tensor attribute: .to() on its module does not move it"
        # a named expression on the odd device beats moving the other side around it
    exprs = [c for c in relevant if c.info.category == "expression"]
    if exprs and dest is not None and not user_target:
        odd_exprs = [c for c in exprs if not _on_target(c.info.devices, dest)]
        if odd_exprs:
            movers = [m for m in movers if m.info.category == "expression"] or odd_exprs

    # conv ``Input type (torch.HalfTensor) and weight type (torch.cuda.FloatTensor)``: the
    # input also needs the layer's dtype, even where its device is right
    dtype = match.dtypes[1] if match.kind == "conv_type" and match.dtype_mismatch else None
    in_dtype = match.dtypes[0] if dtype else "-"
    if dtype:
        for c in relevant:
            if c.info.category == "tensor" and c.info.dtype == in_dtype and c not in movers:
                movers.append(c)

    # -- fix lines ---------------------------------------------------------------------------------
    rewrote: set[tuple[int, int | None]] = set()
    no_data: list[_Candidate] = []
    for c in sorted(movers, key=lambda c: c.order):
        if dest is None:
            break
        if c.info.category == "expression" and c.creation is not None:
            if (id(c.src_cell), c.lineno) in rewrote:
                continue
            same_line = [
                k.creation
                for k in movers
                if k.creation is not None and k.lineno == c.lineno and k.src_cell is c.src_cell
            ]
            new = (c.src_cell or cell).rewrite(c.lineno, same_line, dest)
            if new:
                rewrote.add((id(c.src_cell), c.lineno))
                where = c.where if c.src_cell is not None else f"line {c.lineno}"
                plan.fix_lines.append(FixLine(where, new))
            continue
        if c.where.startswith("attribute ") and c.attr:
            _attribute_fix(c, dest, plan)
            continue
        if c.code is not None:
            code, c.code = c.code, None
            if _made_here_fix(c, code, dest, cands, plan):
                continue
        if (
            id(c) in out_ids
            and c.info.category == "tensor"
            and "meta" in c.info.by_device
            and dest != "meta"
        ):
            # an out= tensor's values are overwritten: a fresh one on dest loses nothing
            name = c.alias or c.name
            plan.fix_lines.append(
                FixLine(_place(c), f"{name} = torch.empty_like({name}, device={_quote(dest)})")
            )
            continue
        if "meta" in c.info.by_device and dest != "meta":
            if c.info.category == "module" and c.info.meta_params:
                _meta_module_fix(c, dest, namespace, objects.get(c.obj_id), torch, plan)
                continue
            if not meta_ok or rule.movers == "meta":
                # meta holds no values: .to() would raise "Cannot copy out of meta tensor".
                # (Where meta stands in for an accelerator -- allow_meta -- it is moved like one.)
                no_data.append(c)
                continue
        src = _move_source(c, dest, dtype if c.info.dtype == in_dtype else None)
        if src:
            plan.fix_lines.append(FixLine(_place(c), src))
    # A plain tensor attribute on another device than its module, which does not move (meta
    # where meta is no target, a device the user did not ask for): the cause is still that
    # module.to() never moves it, and the class fix (a buffer) is safe wherever it goes.
    for c in relevant:
        if c.where.startswith("attribute ") and c.attr and c.cls is not None and c not in movers:
            owner_devices = {
                d for k in relevant if k.info.category == "module" for d in k.info.by_device
            }
            if owner_devices and not set(c.info.by_device) <= owner_devices:
                _class_buffer_fix(c, plan)
    if plan.made_here:
        names = " and ".join(n for n, _, _ in plan.made_here)
        _, where, on = plan.made_here[0]
        plan.notes.append(
            f"{names} {'is' if len(plan.made_here) == 1 else 'are'} made in {where}() without "
            f"a device, so on the default device (cpu) whatever the input: make "
            f"{'it' if len(plan.made_here) == 1 else 'them'} with device={on}, right on every "
            "device the model goes to."
        )
        reason = "tensors made inside the model follow its input"
    if no_data:
        rewritten = _recreate_meta_tensors(no_data, cell, dest or "cpu", plan)
        left = [c for c in no_data if c.name not in rewritten]
        if left:
            names = ", ".join(c.alias or c.name for c in left)
            plan.safe = False
            plan.why = (
                f"{names} {'is a meta tensor' if len(left) == 1 else 'are meta tensors'}: "
                "meta holds shapes but no values, so there is nothing to move; create "
                f"{'it' if len(left) == 1 else 'them'} on {dest} (where it is made, with "
                f"device={_quote(dest or 'cpu')}) or load the real values."
            )

    if rule.movers == "meta" and not movers:
        plan.safe = False
        plan.why = (
            "meta tensors hold no data, so .to() has nothing to copy: create the tensor on a "
            "real device, or for a module use to_empty(device=...) and load its weights."
        )
    if rule.target == "none" and match.kind == "generator_device":
        dev = match.expected or "cpu"
        plan.fix_lines = [
            FixLine(
                "cell",
                f"generator = torch.Generator(device={_quote(dev)})  # pass generator=generator",
            )
        ]
        plan.notes.append(
            f"a torch.Generator lives on one device; the operation (often a shuffling "
            f"DataLoader or randperm under torch.set_default_device) wanted one on "
            f'{match.expected}: pass generator=torch.Generator(device="{match.expected}").'
        )

    if not plan.fix_lines and plan.safe:
        plan.fix_lines = [FixLine("cell", _fallback_fix(match, dest))]
    fix = "; ".join(line.source for line in plan.fix_lines)

    _more_notes(plan, match, relevant, movers, dest, user_target, meta_ok)

    action = _action(plan, movers, dest, meta_ok, namespace)
    # intermediates a method made that are already where they should be say nothing
    # and so do a method's inputs already there (``h`` in forward()) when something else is
    # the culprit: the list is who is where that matters
    shown = [
        c
        for c in relevant
        if not (
            dest
            and _on_target(c.info.devices, dest)
            and (c.made_here or (c.module_method and not c.alias and movers))
        )
    ]
    culprits = [_to_culprit(c) for c in shown]
    return Diagnosis(
        message=text,
        kind=match.kind,
        devices=match.devices,
        argument=match.argument,
        operator=match.operator,
        culprits=culprits,
        fix=fix,
        note=" ".join(dict.fromkeys(n for n in plan.notes if n)),
        target=dest,
        fix_lines=plan.fix_lines,
        reason=reason,
        match=match,
        safe=plan.safe,
        why_no_fix=plan.why,
        action=action,
    )


def _made_here_fix(
    c: _Candidate, code: Any, dest: str, cands: list[_Candidate], plan: _Plan
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
            if (k := by_id.get(obj_id)) is not None and _on_target(k.info.devices, dest)
        ),
        None,
    )
    new = _local_creation(code, c.name, f"{arg}.device" if arg else _quote(dest))
    if new is None:
        return False
    func = c.where.removeprefix("frame ")
    qualname = str(getattr(code, "co_qualname", "") or func)  # Tagger.forward (3.11+)
    plan.fix_lines.append(FixLine(c.where, new))
    plan.made_here.append((c.name, qualname, f"{arg}.device" if arg else dest))
    return True


def _class_buffer_fix(c: _Candidate, plan: _Plan) -> None:
    attr, cls = c.attr or "", c.cls
    c.cls = None
    found = _init_assignment(cls, attr)
    name = c.alias or c.name
    if found is not None:
        where, expr = found
        plan.fix_lines.append(FixLine(f"class {where}", f'self.register_buffer("{attr}", {expr})'))
        plan.notes.append(
            f"{name} is a plain tensor attribute, so .to() on its module left it behind: in "
            f'{where} replace `self.{attr} = {expr}` with `self.register_buffer("{attr}", '
            f"{expr})` and it moves (and is saved) with the module."
        )
    else:
        plan.notes.append(
            f"{name} is a plain tensor attribute, so .to() on its module left it behind: "
            f'create it with self.register_buffer("{attr}", ...) in __init__.'
        )


def _attribute_fix(c: _Candidate, dest: str, plan: _Plan) -> None:
    attr = c.attr or ""
    cls = c.cls
    c.cls = None
    owner = c.owner
    if owner and c.root_name and c.siblings > 1:
        # every module of that class was left behind, not only the one that failed first
        plan.notes.append(
            f"{c.siblings} {getattr(cls, '__name__', 'such')} modules in {c.root_name} hold "
            f"{attr} as a plain tensor attribute: the fix moves all of them."
        )
        plan.fix_lines.append(
            FixLine(
                "cell",
                f"for m in [m for m in {c.root_name}.modules() if type(m) is type({owner}) and "
                f'"{attr}" in vars(m)]: m.register_buffer("{attr}", vars(m).pop("{attr}")'
                f".to({_quote(dest)}))",
            )
        )
    elif owner:
        plan.fix_lines.append(
            FixLine(
                "cell",
                f'{owner}.register_buffer("{attr}", vars({owner}).pop("{attr}").to({_quote(dest)}))',
            )
        )
    found = _init_assignment(cls, attr) if cls is not None else None
    if found is not None:
        where, expr = found
        plan.fix_lines.append(FixLine(f"class {where}", f'self.register_buffer("{attr}", {expr})'))
        plan.notes.append(
            f"self.{attr} is a plain tensor attribute, so module.to() does not move it: in "
            f'{where} replace `self.{attr} = {expr}` with `self.register_buffer("{attr}", '
            f"{expr})` and it moves (and is saved) with the module."
        )
    else:
        plan.notes.append(
            f"self.{attr} is a plain tensor attribute, so module.to() does not move it: create "
            f'it with self.register_buffer("{attr}", ...) in __init__.'
        )
    if not owner and found is None:
        plan.safe = False
        plan.why = f"self.{attr} is not reachable from a variable: register it as a buffer."


def _recreate_meta_tensors(
    no_data: list[_Candidate], cell: Cell, dest: str, plan: _Plan
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
                    plan.fix_lines.append(FixLine(f"line {node.lineno}", new))
                    done.add(c.name)
                    break
    return done


def _more_notes(
    plan: _Plan,
    match: MessageMatch,
    relevant: list[_Candidate],
    movers: list[_Candidate],
    dest: str | None,
    user_target: str | None,
    meta_ok: bool,
) -> None:
    if dest == "meta":
        meta_mods = [c for c in relevant if c.info.category == "module" and c.info.meta_params]
        if meta_mods:
            m0 = meta_mods[0].alias or meta_mods[0].name
            plan.notes.append(
                "meta tensors hold no data: moving to meta makes the error go away but "
                f"computes nothing; to run for real, materialise {m0} on a real device with "
                f'{m0}.to_empty(device="cpu") and load its weights ({m0}.load_state_dict(...)).'
            )
        else:
            plan.notes.append(
                "meta tensors hold no data: moving to meta makes the error go away but "
                "computes nothing; to run for real, create the meta tensors on a real device."
            )
    elif (
        any("meta" in c.info.by_device for c in relevant)
        and not meta_ok
        and match.kind not in ("meta_copy",)
    ):
        plan.notes.append(
            "meta tensors hold no data, so nothing is moved to meta (that would throw real "
            "values away and compute nothing)."
        )
    if match.kind == "conv_type" and match.dtype_mismatch:
        types = " and ".join(match.types)
        plan.notes.append(
            f"this message also covers dtype mismatches: {types} differ in dtype "
            f"({match.dtypes[0]} vs {match.dtypes[1]}); convert the input with "
            f'.to("{dest}", torch.{match.dtypes[1]}).'
        )
    opt = next((c for c in movers if c.info.category == "optimizer"), None)
    if opt is not None:
        plan.notes.append(
            f"{opt.alias or opt.name}'s state is not where its parameters are: "
            "optimizer.load_state_dict() puts the state on the parameters' device at the time "
            "of loading, so load it after model.to(device) (or move the state as above)."
        )
    if any(c.info.trainable_leaf and c in movers for c in relevant):
        plan.notes.append(
            "a trainable leaf tensor gets a new object when moved: rebuild any optimizer that "
            "holds the old one."
        )
    if not user_target and dest == "cpu" and match.kind not in ("meta_copy", "indices_device"):
        others = [d for c in relevant for d in c.info.by_device if d not in ("cpu", "meta")] + [
            d for d in match.devices if d not in ("cpu", "meta")
        ]
        if others:
            alt = "; ".join(
                src
                for c in relevant
                if c.info.category != "expression"
                and not _on_target(c.info.devices, others[0])
                and (src := _move_source(c, others[0]))
            )
            if alt:
                plan.notes.append(f"to run on {others[0]} instead: {alt}")


def _action(
    plan: _Plan,
    movers: list[_Candidate],
    dest: str | None,
    meta_ok: bool,
    namespace: Mapping[str, Any] | None,
) -> MoveAction | None:
    """The fix as a plain move of namespace names, for the one-click button; None when the fix
    is anything else (a rewrite, to_empty, a buffer, moving a loop's batch variable)."""
    if not plan.safe or dest is None or not movers or namespace is None:
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
        try:
            if name not in namespace:
                return None
        except Exception:
            return None
        names.append(name)
    return MoveAction(tuple(dict.fromkeys(names)), dest)


def _fallback_fix(match: MessageMatch, dest: str | None) -> str:
    """No culprit found: say what to do in a comment (still valid Python source)."""
    if match.kind == "meta_copy":
        return f'model.to_empty(device="{dest or "cpu"}")  # then load_state_dict(...)'
    if dest is None:
        return "# move every tensor and module of this operation to one device with .to(device)"
    what = f"the tensor passed as '{match.argument}'" if match.argument else "every input"
    op = f" of {match.operator}" if match.operator else ""
    return f'# move {what}{op} to "{dest}": x = x.to("{dest}")'


def _to_culprit(c: _Candidate) -> Culprit:
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
