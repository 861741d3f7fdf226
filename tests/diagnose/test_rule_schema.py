"""The rule schema: a bad table entry fails at import, every policy a rule can name has the
function that decides it, the engine never asks which family an error is, and "same device"
is one rule for the diagnosis and the view."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from torchdevice_magic import devices
from torchdevice_magic.diagnose import RULES, Destination, Movers, Rule
from torchdevice_magic.diagnose.policy import DESTINATIONS, MOVER_CHOICES
from torchdevice_magic.viewmodel.rows import row_action

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"kind": "not an identifier"}, "identifier"),
        ({"target": "expected"}, "enum"),  # a plain string, not Destination.EXPECTED
        ({"reason": "because"}, "Destination.EXPECTED only"),
        ({"target": Destination.NONE}, "replacement_fix"),
        ({"note": "on {device}"}, "unknown fields"),
        ({"patterns": ("(unclosed",)}, "missing"),
    ],
)
def test_a_bad_rule_fails_when_it_is_made(fields: dict[str, object], complaint: str) -> None:
    arguments: dict[str, object] = {"kind": "example", "patterns": (r"same device",), **fields}
    with pytest.raises((ValueError, Exception), match=complaint):
        Rule(**arguments)  # type: ignore[arg-type]


def test_every_policy_has_its_function_and_the_table_uses_only_those() -> None:
    assert set(DESTINATIONS) == set(Destination)
    assert set(MOVER_CHOICES) == set(Movers)
    kinds = [rule.kind for rule in RULES]
    assert len(kinds) == len(set(kinds)), "two rules of one family"
    for rule in RULES:
        assert rule.compiled and all(p.pattern for p in rule.compiled)


def test_the_engine_never_asks_which_family_an_error_is() -> None:
    """What differs between families is a field of the rule: core.py and policy.py never
    compare ``match.kind`` or a rule's ``kind``/``movers``/``target`` with a value."""
    for name in ("core.py", "policy.py", "fixes.py"):
        tree = ast.parse((ROOT / "torchdevice_magic" / "diagnose" / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    if isinstance(side, ast.Attribute) and side.attr in ("kind", "movers"):
                        owner = ast.unparse(side.value)
                        assert owner not in ("match", "rule", "case.match", "case.rule"), (
                            f"{name}:{node.lineno}: {ast.unparse(node)}"
                        )


def test_same_device_is_one_rule_for_the_diagnosis_and_the_view() -> None:
    """``cuda`` is the current device (cuda:0 in a kernel that has not initialised CUDA),
    ``cpu:0`` is ``cpu``; the view's button and the diagnosis agree on every pair."""
    assert devices.same_device("cuda", "cuda:0")
    assert not devices.same_device("cuda", "cuda:1")
    assert not devices.same_device("cuda:0", "cuda:1")
    assert devices.same_device("cpu", "cpu:0")
    assert not devices.same_device("cpu", "meta")
    assert devices.full_device_name(" simdev ") == "simdev:0"

    class _Record:
        hidden = False
        kind = "tensor"
        movable = True
        note = ""
        loader_data_stays = ()
        name = root = "x"

    for on in ("cuda:0", "cuda:1", "cpu"):
        for target in ("cuda", "cuda:0", "cuda:1", "cpu", "cpu:0"):
            record = _Record()
            record.devices = (on,)  # type: ignore[attr-defined]
            already = not row_action(record, target).enabled
            assert already == devices.same_device(on, target), (on, target)
