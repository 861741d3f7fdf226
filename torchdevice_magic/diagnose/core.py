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

This module is the orchestration; the parts are in :mod:`.candidates` (what a candidate is,
what the scan says about it), :mod:`.collect` (where candidates are found and how they are
named), :mod:`.sources` (the user's code read without running it) and :mod:`.fixes` (where
to, and the statement that moves each culprit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .candidates import (
    _Candidate,
    _expression_candidates,
    _normalize_target,
    _on_target,
    _quote,
    _same_device,
    _torch,
)
from .cells import Cell, parse_cell, user_function_calls
from .collect import _collect, _resolve, frame_creations
from .collect import _submodule_expr as _submodule_expr  # re-exported: tests import it from here
from .explain import Diagnosis, FixLine
from .fixes import (
    _action,
    _attribute_fix,
    _choose_target,
    _class_buffer_fix,
    _fallback_fix,
    _made_here_fix,
    _meta_module_fix,
    _more_notes,
    _move_source,
    _place,
    _Plan,
    _real_device,
    _recreate_meta_tensors,
    _relevant,
    _to_culprit,
)
from .rules import MessageMatch, parse_message, rule_for
from .sources import _failing_line, _running_codes

__all__ = ["diagnose"]


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
