"""Where a fix sends things and who moves: each :class:`~.schema.Destination` and
:class:`~.schema.Movers` of a rule mapped to the function that decides it.

The engine (:mod:`.core`) looks the rule's policy up in :data:`DESTINATIONS` and
:data:`MOVER_CHOICES`; it never asks which family an error is. Where the rule leaves the device
to the candidates (``Destination.BIGGER``), the side holding the model's parameters wins, then
bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..devices import best_device, free_bytes, rank_info, same_device
from ..units import format_bytes
from .candidates import Candidate, normalize_target, on_target
from .cells import Cell
from .schema import Destination, MessageMatch, Movers, Rule

__all__ = [
    "DESTINATIONS",
    "MOVER_CHOICES",
    "MoverChoice",
    "accelerator_side",
    "bigger_side",
    "involved_in",
    "own_device_side",
    "real_device",
]

#: what the destination is called when the rule has no better word for it
_EXPECTED_REASON = "move it to the device the operation expected"


def involved_in(c: Candidate, devices: tuple[str, ...]) -> bool:
    """Whether a candidate is on one of the message's devices (any device, if it names none)."""
    if not c.info.by_device:
        return False
    if not devices:
        return True
    return any(same_device(d, m) for d in c.info.by_device for m in devices)


def bigger_side(cands: list[Candidate], match: MessageMatch) -> tuple[str | None, str]:
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
        chosen = accelerator_side(totals)
        if chosen is not None and (chosen[0] != best or chosen[0] == "cpu"):
            return chosen
        if all(totals[best] >= n for n in totals.values()):
            return best, "move the small thing to where the big thing is"
        # the parameters decided, not the bytes (an optimizer's state can outweigh its model):
        # say so, never "the small thing" of something bigger
        if chosen is not None:
            return chosen
        return best, "move it to where the model's parameters are"
    if set(totals) == {"cpu"}:
        # only the CPU side is known; the message's other side is an accelerator (an input
        # a library made there): what is on the CPU joins it
        sides = dict(totals)
        sides.update({d: 0 for d in match.devices if d not in ("cpu", "meta")})
        chosen = accelerator_side(sides)
        if chosen is not None and chosen[0] != "cpu":
            return chosen
    if match.expected:
        return match.expected, _EXPECTED_REASON
    non_cpu = [d for d in match.devices if d != "cpu"]
    if totals and match.devices:
        (only,) = totals
        others = [d for d in match.devices if not same_device(d, only)]
        if others:
            return others[0], "move it to the other device in the message"
    if non_cpu:
        return non_cpu[0], "move everything to one device"
    if match.devices:
        return match.devices[0], "move everything to one device"
    return None, ""


def _default_device() -> str | None:
    """torch's default device where the user set one other than the CPU, else None."""
    import sys

    torch = sys.modules.get("torch")
    try:
        device = str(torch.get_default_device())  # type: ignore[union-attr]
    except Exception:
        return None
    return None if device in ("cpu", "meta") else device


def accelerator_side(totals: dict[str, int]) -> tuple[str, str] | None:
    """One side on the CPU, the other on one accelerator: the user chose the accelerator, so
    the CPU side goes there -- unless torch's default device names the other side, or the CPU
    side would not fit in the accelerator's free memory (then the fix says so). None where the
    sides are not one CPU and one accelerator."""
    accelerators = [d for d in totals if d not in ("cpu", "meta")]
    if "cpu" not in totals or len(accelerators) != 1:
        return None
    (accel,) = accelerators
    default = _default_device()
    if default is not None and not same_device(default, accel):
        return "cpu", f"torch's default device is {default}, not {accel}"
    free = free_bytes(accel)
    if free is not None and totals["cpu"] > free:
        return "cpu", (
            f"the CPU side ({format_bytes(totals['cpu'])}) would not fit in {accel}'s free "
            f"memory ({format_bytes(free)}): it stays on the CPU and the rest joins it"
        )
    return accel, f"the work runs on {accel}, as chosen: what is on the CPU joins it"


def own_device_side(cands: list[Candidate]) -> tuple[str, str] | None:
    """On a rank of a distributed job (:func:`devices.rank_info`), where one side of the
    mismatch is already on the rank's own device and another on a different device of the same
    accelerator: the rank's own device, and a reason that names it. A rank that computes on
    another rank's device (every rank on ``cuda:0``) takes memory that rank counts on, so the
    others join the own side, whatever the bytes or the cell's ``.to()`` say. None for a process
    that is no rank, and where the only other side is the CPU or meta (the ordinary rules
    decide, free memory included)."""
    info = rank_info()
    if not info.is_rank:
        return None
    own = best_device()
    sides = {d for c in cands for d in c.info.by_device}
    if own == "cpu" or not any(same_device(own, d) for d in sides):
        return None
    others = sorted(d for d in sides if d not in ("cpu", "meta") and not same_device(own, d))
    if not others:
        return None
    return own, (
        f"this process is {info.label()}, whose own device is {own}: "
        f"what is on {', '.join(others)} joins it"
    )


def real_device(cands: list[Candidate], match: MessageMatch, asked: str | None) -> str:
    """A device that keeps data, for things that are on meta now."""
    if asked and asked != "meta":
        return asked
    for d in [*match.devices, *(d for c in cands for d in c.info.by_device)]:
        if d != "meta":
            return d
    return "cpu"


# --------------------------------------------------------------------------------------------
# Where to: one function per Destination, (rule, match, relevant, cell) -> (device, reason)
# --------------------------------------------------------------------------------------------

_Choose = Callable[[Rule, MessageMatch, list[Candidate], Cell], tuple[str | None, str]]


def _to_bigger(
    rule: Rule, match: MessageMatch, relevant: list[Candidate], cell: Cell
) -> tuple[str | None, str]:
    on_own = own_device_side(relevant)
    if on_own is not None:
        return on_own
    asked = cell.to_target()
    sides = {d for c in relevant for d in c.info.by_device}
    chosen = normalize_target(asked) if asked else None
    if chosen and chosen != "meta" and any(same_device(chosen, d) for d in sides):
        # the failing cell itself moves things there (``model = model.to("cpu")``): the
        # user's latest choice, which the rest joins
        return chosen, f"the cell moves things to {chosen}: the rest joins them"
    return bigger_side(relevant, match)


def _to_expected(
    rule: Rule, match: MessageMatch, relevant: list[Candidate], cell: Cell
) -> tuple[str | None, str]:
    on_own = own_device_side(relevant)
    if on_own is not None and not rule.reason:
        # a family with its own reason needs the expected device (DataParallel's
        # device_ids[0], an index on its data's device); any other goes to the rank's own
        return on_own
    if not match.expected:
        return bigger_side(relevant, match)
    # the operation expected the CPU side, but the other side is the accelerator the user
    # chose (an input a library made there, an index on it): the CPU side joins it
    sides: dict[str, int] = {}
    for c in relevant:
        for d, n in c.info.by_device.items():
            sides[d] = sides.get(d, 0) + n
    for d in match.devices:
        if not any(same_device(d, known) for known in sides):
            sides[d] = 0
    chosen = accelerator_side(sides)
    if chosen is not None and not same_device(chosen[0], match.expected):
        return chosen
    return match.expected, (rule.reason if relevant and rule.reason else _EXPECTED_REASON)


def _to_cpu(
    rule: Rule, match: MessageMatch, relevant: list[Candidate], cell: Cell
) -> tuple[str | None, str]:
    return "cpu", f"{match.argument or 'it'} must be on the CPU"


def _to_real(
    rule: Rule, match: MessageMatch, relevant: list[Candidate], cell: Cell
) -> tuple[str | None, str]:
    asked = cell.to_target()
    dest = normalize_target(asked) if asked else real_device(relevant, match, None)
    return dest, "meta tensors hold no data: allocate real storage, then load the weights"


def _nowhere(
    rule: Rule, match: MessageMatch, relevant: list[Candidate], cell: Cell
) -> tuple[str | None, str]:
    return None, ""


DESTINATIONS: dict[Destination, _Choose] = {
    Destination.BIGGER: _to_bigger,
    Destination.EXPECTED: _to_expected,
    Destination.CPU: _to_cpu,
    Destination.REAL: _to_real,
    Destination.NONE: _nowhere,
}


# --------------------------------------------------------------------------------------------
# Who moves: one function per Movers, among the candidates off the destination
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MoverChoice:
    """The candidates a fix moves, and which of them are out= tensors (their values are
    overwritten, so a fresh tensor on the destination loses nothing)."""

    movers: list[Candidate]
    out_tensors: frozenset[int] = frozenset()


_Pick = Callable[[list[Candidate], list[Candidate], MessageMatch, "str | None"], MoverChoice]


def _everyone(
    off_target: list[Candidate], relevant: list[Candidate], match: MessageMatch, out: str | None
) -> MoverChoice:
    return MoverChoice(off_target)


def _modules(
    off_target: list[Candidate], relevant: list[Candidate], match: MessageMatch, out: str | None
) -> MoverChoice:
    return MoverChoice([c for c in off_target if c.info.category == "module"] or off_target)


def _indices(
    off_target: list[Candidate], relevant: list[Candidate], match: MessageMatch, out: str | None
) -> MoverChoice:
    idx = [
        c
        for c in off_target
        if c.info.category in ("tensor", "expression")
        and (c.info.dtype or "int").startswith(("int", "uint", "bool"))
    ]
    tensors = [c for c in off_target if c.info.category == "tensor"]
    return MoverChoice(idx or tensors or off_target)


def _out_tensor(
    off_target: list[Candidate], relevant: list[Candidate], match: MessageMatch, out: str | None
) -> MoverChoice:
    named = [c for c in off_target if c.name == out]
    odd = [
        c
        for c in off_target
        if match.argument_device
        and any(same_device(d, match.argument_device) for d in c.info.by_device)
    ]
    return MoverChoice(named or odd or off_target, frozenset(id(c) for c in (named or odd)))


def _meta_holders(
    off_target: list[Candidate], relevant: list[Candidate], match: MessageMatch, out: str | None
) -> MoverChoice:
    modules = [c for c in relevant if c.info.category == "module" and c.info.meta_params]
    return MoverChoice(modules or [c for c in relevant if "meta" in c.info.by_device])


MOVER_CHOICES: dict[Movers, _Pick] = {
    Movers.ALL: _everyone,
    Movers.MODULES: _modules,
    Movers.INDEX: _indices,
    Movers.OUT: _out_tensor,
    Movers.META: _meta_holders,
}


def off_target(relevant: list[Candidate], dest: str) -> list[Candidate]:
    """The candidates a move to ``dest`` would change (a covered container is not moved)."""
    return [c for c in relevant if not on_target(c.info.devices, dest) and not c.covered]
