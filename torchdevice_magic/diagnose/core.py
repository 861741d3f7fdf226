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

This module is the orchestration, in the order the steps run: gather the candidates
(:mod:`.collect`), keep those the message involves, name the tensors nobody named, choose where
to and who moves (the rule's policy, :mod:`.policy`), write one statement per mover
(:mod:`.fixes`), and build the :class:`~.explain.Diagnosis`. It never asks which family an
error is: what differs between families is a field of its :class:`~.schema.Rule`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..devices import same_device
from .callsite import arguments_moved_at_call, outside_libraries
from .candidates import (
    Candidate,
    expression_candidates,
    loaded_torch,
    mark_optimized,
    normalize_target,
    on_target,
    quote_device,
)
from .cells import Cell, parse_cell, user_function_calls
from .collect import (
    collect_candidates,
    frame_creations,
    resolve_chain,
    unloaded_meta_buffers,
)
from .explain import Diagnosis, FixLine
from .fixes import (
    FixDraft,
    add_notes,
    buffer_in_class,
    fallback_fix,
    fix_location,
    make_on_input_device,
    materialise_meta_module,
    move_statement,
    names_bound_before,
    one_click_move,
    rebuild_attribute_container,
    recreate_meta_tensors,
    register_attribute_as_buffer,
    to_culprit,
)
from .frames import is_user_filename
from .messages import exception_chain, find_match, rule_for
from .policy import DESTINATIONS, MOVER_CHOICES, involved_in, off_target, real_device
from .schema import MessageMatch, Rule
from .sources import running_codes
from .wrappers import CellRun, unwrap_run

__all__ = ["diagnose", "find_match"]


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
    chain = exception_chain(exc)
    try:
        run = unwrap_run(err, chain, _source_of(cell), namespace)
        parsed = _parsed(run, cell, shell)
    except Exception:
        run, parsed = CellRun("", None, namespace), parse_cell("")
    user_target = normalize_target(target) if target else None
    try:
        case = _gather(err, chain, text, match, run, parsed, user_target, allow_meta)
        return _explain(case, target_reason)
    except Exception:
        # Analysis failed on something hostile: still say what the message means.
        try:
            bare = CellRun("", None, None)
            case = _gather(err, [], text, match, bare, parse_cell(""), user_target, allow_meta)
            return _explain(case, target_reason)
        except Exception:
            return None


def _source_of(cell: str | Cell | None) -> str:
    if isinstance(cell, Cell):
        return cell.source
    return cell if isinstance(cell, str) else ""


def _parsed(run: CellRun, cell: str | Cell | None, shell: Any) -> Cell:
    """The user's code parsed: the cell as given where no magic wrapped it (one parse shared
    with the hook), else the unwrapped code (or the script) with the same shell."""
    if isinstance(cell, Cell):
        return cell if run.source == cell.source else parse_cell(run.source, cell.shell or shell)
    return parse_cell(run.source, shell)


@dataclass
class _ErrorCase:
    """One error being explained: what its message says and what the code around it holds."""

    err: BaseException
    chain: list[BaseException]
    text: str
    match: MessageMatch
    rule: Rule
    namespace: Mapping[str, Any] | None
    cell: Cell
    #: how a line of the cell is named after its number ("" or `` of train.py`` for a script)
    in_file: str
    #: what the magic the cell ran under means for the fix, or ""
    run_note: str
    #: the device the user asked for (``%%devicecheck -d``), normalised
    user_target: str | None
    #: meta may be a destination (the user said so, or asked for meta)
    meta_ok: bool
    torch: Any
    #: everything found, and the subset the message involves
    candidates: list[Candidate] = field(default_factory=list)
    relevant: list[Candidate] = field(default_factory=list)
    #: the few objects a fix looks at again (meta modules), by id
    objects: dict[int, Any] = field(default_factory=dict)
    #: the failing line of the cell
    lineno: int | None = None


def _gather(
    err: BaseException,
    chain: list[BaseException],
    text: str,
    match: MessageMatch,
    run: CellRun,
    cell: Cell,
    user_target: str | None,
    allow_meta: bool,
) -> _ErrorCase:
    torch = loaded_torch()
    meta_ok = allow_meta or user_target == "meta"
    rule = rule_for(match.kind)
    namespace = run.namespace
    case = _ErrorCase(
        err=err,
        chain=chain,
        text=text,
        match=match,
        rule=rule,
        namespace=namespace,
        cell=cell,
        in_file=run.in_file,
        run_note=run.note,
        user_target=user_target,
        meta_ok=meta_ok,
        torch=torch,
    )
    if torch is not None:
        case.candidates = collect_candidates(err, chain, namespace, cell, torch, run.lineno)
        if namespace is not None:
            unloaded: list[Candidate] = []
            for c in case.candidates:
                if c.info.category == "module" and c.info.meta_params:
                    ok, obj = resolve_chain(namespace, c.alias or c.name, torch)
                    if ok and id(obj) == c.obj_id:
                        case.objects[c.obj_id] = obj
                        name = c.alias or c.name
                        unloaded += unloaded_meta_buffers(name, obj, torch, c.order)
            case.candidates[:0] = unloaded  # the culprits: listed first
            mark_optimized(case.candidates, namespace, torch)
    case.lineno = run.lineno
    case.relevant = _involved(case)
    return case


def _involved(case: _ErrorCase) -> list[Candidate]:
    """The candidates the message involves: on its devices (on any device where the message
    names one only), objects that merely hold tensors only where nothing more direct is."""
    if case.rule.lists_every_device:
        relevant = [c for c in case.candidates if c.info.by_device]
    else:
        relevant = [c for c in case.candidates if involved_in(c, case.match.devices)]
    # a loader, a dataset, a trainer: only where no tensor, module, optimizer or container is
    # on their devices
    # (a library's own local is no such thing: the user reaches it only through their object)
    direct = {
        d
        for c in relevant
        if c.info.category != "object" and not c.library
        for d in c.info.by_device
    }
    return [
        c for c in relevant if c.info.category != "object" or not set(c.info.by_device) <= direct
    ]


def _name_anonymous_operands(case: _ErrorCase, draft: FixDraft) -> None:
    """A device of the message that no named candidate of the failing line is on: the tensor
    an expression of that line makes (``torch.ones(3)``, ``make_mask(3)``) is the culprit."""
    lineno, match, cell = case.lineno, case.match, case.cell
    if case.torch is None or lineno is None or not match.devices:
        return
    in_line = cell.reads_in_line(lineno)
    covered = {
        d
        for c in case.relevant
        if c.where != "cell" or c.name in in_line or c.name.split(".")[0] in in_line
        for d in c.info.by_device
    }
    missing = [d for d in match.devices if not any(same_device(d, x) for x in covered)]
    if not missing:
        return
    creations = cell.creations_in(lineno, case.namespace)
    if not creations:
        # no torch factory in the line: the one user function called there made it
        calls = user_function_calls(
            cell.statement_at(lineno), case.namespace, is_user_filename, running_codes(case.err)
        )
        if len(calls) == 1:
            creations = [replace(calls[0], device=missing[0])]
            function = calls[0].text.split("(")[0]
            draft.notes.append(
                f"{calls[0].text} is the only call in line {lineno} that can make a tensor no "
                f"variable holds, so its result is the one on {missing[0]}; better still, make "
                f"it on the right device inside {function}()."
            )
    if not creations:
        frame_creations(case.err, case.chain, missing, case.relevant)
    where = f"line {lineno}{case.in_file}"
    case.relevant.extend(expression_candidates(creations, missing, where, 0, lineno))


@dataclass
class _Route:
    """Where the fix goes and who moves there."""

    dest: str | None
    reason: str
    movers: list[Candidate] = field(default_factory=list)
    #: ids of the movers that are out= tensors
    out_ids: frozenset[int] = frozenset()
    #: the dtype the conv input takes too (None: the dtype stays)
    dtype: str | None = None
    in_dtype: str = "-"


def _out_tensor_target(case: _ErrorCase) -> tuple[str | None, list[Candidate], str | None]:
    """An out= tensor of the failing line: (its name, its candidates, where its inputs are).
    Its values are overwritten, so it is the one that moves, to where the inputs are."""
    out_name = case.cell.out_argument(case.lineno) if case.lineno is not None else None
    out_cands = [c for c in case.relevant if out_name is not None and c.name == out_name]
    inputs = {d for c in case.relevant if c not in out_cands for d in c.info.by_device}
    if out_cands and len(inputs) == 1 and not case.user_target:
        (only,) = inputs
        if not on_target(out_cands[0].info.devices, only):
            return out_name, out_cands, only
    return out_name, out_cands, None


def _destination(
    case: _ErrorCase, out_target: str | None, target_reason: str
) -> tuple[str | None, str]:
    if case.user_target:
        return case.user_target, f"move everything to {case.user_target}, {target_reason}"
    if out_target is not None and (out_target != "meta" or case.meta_ok):
        return out_target, "an out= tensor goes where its inputs are"
    dest, reason = DESTINATIONS[case.rule.target](case.rule, case.match, case.relevant, case.cell)
    if dest == "meta" and not case.meta_ok:
        # meta keeps no data: computing there makes the error go away and computes nothing
        return real_device(
            case.relevant, case.match, None
        ), "meta holds no data: run on a real device"
    return dest, reason


def _route(case: _ErrorCase, draft: FixDraft, target_reason: str) -> _Route:
    out_name, out_cands, out_target = _out_tensor_target(case)
    dest, reason = _destination(case, out_target, target_reason)
    route = _Route(dest, reason)
    rule = case.rule
    if rule.moves_meta_objects:
        route.movers = MOVER_CHOICES[rule.movers]([], case.relevant, case.match, out_name).movers
    elif dest is not None and not rule.moves_nothing:
        movers = off_target(case.relevant, dest)
        if not case.user_target:
            choice = MOVER_CHOICES[rule.movers](movers, case.relevant, case.match, out_name)
            movers, route.out_ids = choice.movers, choice.out_tensors
        if out_target is not None and dest == out_target:
            movers, route.out_ids = out_cands, frozenset(id(c) for c in out_cands)
        route.movers = _moved_at_their_source(movers, dest, draft)
        route.movers, reason = outside_libraries(case.cell, case.lineno, route.movers, dest, draft)
        route.reason = reason or route.reason
        attrs = [c for c in route.movers if c.where.startswith("attribute ")]
        if attrs:  # an attribute culprit: only it moves (its module is where it should be)
            route.movers = attrs
            if not case.user_target:
                route.reason = "a plain tensor attribute: .to() on its module does not move it"
    _prefer_expressions(case, route)
    _convert_dtype(case, route)
    return route


def _moved_at_their_source(movers: list[Candidate], dest: str, draft: FixDraft) -> list[Candidate]:
    """``x, y = batch`` inside ``trainer.step(batch)``: the locals are the cell's ``batch``
    (same storage); moving it at its source fixes them, one line instead of three."""
    sources = {c.label for c in movers if c.where == "cell" or c.alias}
    inside = [c for c in movers if c.where != "cell" and not c.alias and c.shares & sources]
    if not inside or len(inside) >= len(movers):
        return movers
    where = inside[0].where.removeprefix("frame ")
    lines = "; ".join(
        src for c in inside if c.where == inside[0].where and (src := move_statement(c, dest))
    )
    # (not for a model's forward(): its caller moves the inputs, not the model; nor for a
    # library's function: that line is not the user's to edit)
    if lines and not inside[0].module_method and not inside[0].library:
        draft.notes.append(f"to fix it for every call, inside {where}(): {lines}")
    return [c for c in movers if c not in inside]


def _prefer_expressions(case: _ErrorCase, route: _Route) -> None:
    """A named expression on the odd device beats moving the other side around it."""
    exprs = [c for c in case.relevant if c.info.category == "expression"]
    if not exprs or route.dest is None or case.user_target:
        return
    odd = [c for c in exprs if not on_target(c.info.devices, route.dest)]
    if odd:
        route.movers = [m for m in route.movers if m.info.category == "expression"] or odd


def _convert_dtype(case: _ErrorCase, route: _Route) -> None:
    """conv ``Input type (torch.HalfTensor) and weight type (torch.cuda.FloatTensor)``: the
    input also needs the layer's dtype, even where its device is right."""
    match = case.match
    if not (case.rule.converts_dtype and match.dtype_mismatch):
        return
    route.dtype = match.dtypes[1]
    route.in_dtype = match.dtypes[0] or "-"
    for c in case.relevant:
        if c.info.category == "tensor" and c.info.dtype == route.in_dtype and c not in route.movers:
            route.movers.append(c)


def _write_fix_lines(case: _ErrorCase, route: _Route, draft: FixDraft) -> list[Candidate]:
    """One statement per mover; returns the meta tensors that have no data to move."""
    rewrote: set[tuple[int, int | None]] = set()
    no_data: list[Candidate] = []
    dest = route.dest
    if dest is None:
        return no_data
    at_call, handled = arguments_moved_at_call(case.cell, case.lineno, route.movers, dest)
    draft.fix_lines.extend(FixLine(where, source) for where, source in at_call)
    for c in sorted(route.movers, key=lambda c: c.order):
        if id(c) in handled:
            continue
        if c.info.category == "expression" and c.creation is not None:
            _rewrite_expression(case, route, c, rewrote, draft)
        elif c.where.startswith("attribute ") and c.attr and c.info.container:
            bound = case.namespace is None or case.namespace.get("torch") is case.torch
            rebuild_attribute_container(c, dest, draft, bound)
        elif c.where.startswith("attribute ") and c.attr:
            register_attribute_as_buffer(c, dest, draft)
        elif c.code is not None and _made_in_method(case, c, dest, draft):
            continue
        elif id(c) in route.out_ids and c.info.category == "tensor" and _meta_off(c, dest):
            # an out= tensor's values are overwritten: a fresh one on dest loses nothing
            name = c.alias or c.name
            draft.fix_lines.append(
                FixLine(
                    fix_location(c),
                    f"{name} = torch.empty_like({name}, device={quote_device(dest)})",
                )
            )
        elif _meta_off(c, dest) and c.info.category == "module" and c.info.meta_params:
            obj = case.objects.get(c.obj_id)
            materialise_meta_module(c, dest, case.namespace, obj, case.torch, draft)
        elif _meta_off(c, dest) and (not case.meta_ok or case.rule.moves_meta_objects):
            # meta holds no values: .to() would raise "Cannot copy out of meta tensor".
            # (Where meta stands in for an accelerator -- allow_meta -- it is moved like one.)
            no_data.append(c)
        else:
            dtype = route.dtype if c.info.dtype == route.in_dtype else None
            src = move_statement(c, dest, dtype)
            if src:
                draft.fix_lines.append(FixLine(fix_location(c), src))
    return no_data


def _meta_off(c: Candidate, dest: str) -> bool:
    """Part of ``c`` is on meta and the fix takes it off meta."""
    return "meta" in c.info.by_device and dest != "meta"


def _made_in_method(case: _ErrorCase, c: Candidate, dest: str, draft: FixDraft) -> bool:
    code, c.code = c.code, None  # the code object is not kept past the fix
    return make_on_input_device(c, code, dest, case.candidates, draft)


def _rewrite_expression(
    case: _ErrorCase,
    route: _Route,
    c: Candidate,
    rewrote: set[tuple[int, int | None]],
    draft: FixDraft,
) -> None:
    """The line that makes an unnamed tensor, rewritten to make it on the destination (every
    creation of that line at once)."""
    if (id(c.src_cell), c.lineno) in rewrote or route.dest is None:
        return
    same_line = [
        k.creation
        for k in route.movers
        if k.creation is not None and k.lineno == c.lineno and k.src_cell is c.src_cell
    ]
    new = (c.src_cell or case.cell).rewrite(c.lineno, same_line, route.dest)
    if new:
        rewrote.add((id(c.src_cell), c.lineno))
        draft.fix_lines.append(FixLine(c.where, new))


def _attributes_left_behind(case: _ErrorCase, movers: list[Candidate], draft: FixDraft) -> None:
    """A plain tensor attribute on another device than its module, which does not move (meta
    where meta is no target, a device the user did not ask for): the cause is still that
    module.to() never moves it, and the class fix (a buffer) is safe wherever it goes."""
    owner_devices = {
        d for k in case.relevant if k.info.category == "module" for d in k.info.by_device
    }
    if not owner_devices:
        return
    for c in case.relevant:
        left_behind = not set(c.info.by_device) <= owner_devices
        attribute = (
            c.where.startswith("attribute ")
            and c.attr
            and c.cls is not None
            and not c.info.container
        )
        if attribute and c not in movers and left_behind:
            buffer_in_class(c, draft)


def _say_made_here(route: _Route, draft: FixDraft) -> None:
    """Tensors a method made without a device: one note for all of them."""
    if not draft.made_here:
        return
    one = len(draft.made_here) == 1
    names = " and ".join(n for n, _, _ in draft.made_here)
    _, where, on = draft.made_here[0]
    draft.notes.append(
        f"{names} {'is' if one else 'are'} made in {where}() without a device, so on the "
        f"default device (cpu) whatever the input: make {'it' if one else 'them'} with "
        f"device={on}, right on every device the model goes to."
    )
    route.reason = "tensors made inside the model follow its input"


def _say_no_data(
    case: _ErrorCase, route: _Route, no_data: list[Candidate], draft: FixDraft
) -> None:
    """Meta tensors with nothing to copy: re-create those the cell makes; the others have no
    safe fix."""
    if no_data:
        rewritten = recreate_meta_tensors(no_data, case.cell, route.dest or "cpu", draft)
        left = [c for c in no_data if c.name not in rewritten]
        if left:
            one = len(left) == 1
            names = ", ".join(c.alias or c.name for c in left)
            draft.safe = False
            draft.why = (
                f"{names} {'is a meta tensor' if one else 'are meta tensors'}: meta holds "
                f"shapes but no values, so there is nothing to move; create "
                f"{'it' if one else 'them'} on {route.dest} (where it is made, with "
                f"device={quote_device(route.dest or 'cpu')}) or load the real values."
            )
            unsaved = [c.name for c in left if c.unsaved_buffer]
            if unsaved:
                draft.why = (
                    f"{', '.join(unsaved)}: non-persistent buffer{'s' if len(unsaved) > 1 else ''}"
                    " (persistent=False), in no state dict: load_state_dict() never fills "
                    "them and to_empty() leaves them uninitialised, so the module would "
                    "compute garbage. Re-create them as the class's __init__ does (build the "
                    f"module on {route.dest} instead of meta and load the weights into it)."
                )
    if case.rule.moves_meta_objects and not route.movers:
        draft.safe = False
        draft.why = (
            "meta tensors hold no data, so .to() has nothing to copy: create the tensor on a "
            "real device, or for a module use to_empty(device=...) and load its weights."
        )


def _explain(case: _ErrorCase, target_reason: str) -> Diagnosis:
    rule, match = case.rule, case.match
    draft = FixDraft()
    _name_anonymous_operands(case, draft)
    draft.notes.append(rule.note_for(match))
    draft.notes.append(case.run_note)
    route = _route(case, draft, target_reason)
    no_data = _write_fix_lines(case, route, draft)
    _attributes_left_behind(case, route.movers, draft)
    _say_made_here(route, draft)
    _say_no_data(case, route, no_data, draft)
    if rule.moves_nothing:
        where = match.expected or "cpu"
        draft.fix_lines = [FixLine("cell", rule.text_for(rule.replacement_fix, match, where))]
    if not draft.fix_lines and draft.safe:
        draft.fix_lines = [FixLine("cell", fallback_fix(rule, match, route.dest))]
    add_notes(
        draft, rule, match, case.relevant, route.movers, route.dest, case.user_target, case.meta_ok
    )
    return Diagnosis(
        message=case.text,
        kind=match.kind,
        devices=match.devices,
        argument=match.argument,
        operator=match.operator,
        culprits=[to_culprit(c) for c in _shown(case, route)],
        fix="; ".join(line.source for line in draft.fix_lines),
        note=" ".join(dict.fromkeys(n for n in draft.notes if n)),
        target=route.dest,
        fix_lines=draft.fix_lines,
        reason=route.reason,
        match=match,
        safe=draft.safe,
        why_no_fix=draft.why,
        action=one_click_move(
            draft,
            route.movers,
            route.dest,
            case.meta_ok,
            case.namespace,
            names_bound_before(case.cell, case.lineno),
        ),
    )


def _shown(case: _ErrorCase, route: _Route) -> list[Candidate]:
    """Who is where, as far as it matters: intermediates a method made that are already where
    they should be say nothing, and neither do a method's inputs already there (``h`` in
    forward()) when something else is the culprit, nor a library's local that is a view of a
    cell's variable (a transformers forward()'s ``input_ids``: the cell's line names it)."""
    dest = route.dest
    in_cell = {c.label for c in case.relevant if c.where == "cell"}
    shown = [
        c
        for c in case.relevant
        if not (
            dest
            and on_target(c.info.devices, dest)
            and (c.made_here or (c.module_method and not c.alias and route.movers))
        )
        and not (c.library and c.shares & in_cell)
    ]
    # the culprit first (a cap on the lines shown must never hide it): what is off the
    # destination, what the fix moves first among them; the rest keeps its order
    movers = {id(c) for c in route.movers}

    def rank(c: Candidate) -> int:
        if id(c) in movers:
            return 0
        return 1 if dest and not on_target(c.info.devices, dest) else 2

    return sorted(shown, key=rank)
