"""What an optimizer holds: its parameters and every tensor of its per-parameter state."""

from __future__ import annotations

from typing import Any

from .kinds import CONTAINERS, Kind, TorchTypes, kind_of
from .walker import walk


def optimizer_params(optimizer: Any) -> list[Any]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def optimizer_state_tensors(T: TorchTypes, optimizer: Any) -> list[tuple[Any, str, Any]]:
    """(parameter, state path, tensor) for every tensor in the per-parameter state, also
    inside lists, tuples and dicts (LBFGS keeps ``old_dirs``/``old_stps``/``ro`` lists)."""
    found: list[tuple[Any, str, Any]] = []
    state = optimizer.state
    for param, per_param in dict.items(state) if isinstance(state, dict) else ():
        if type(per_param) is not dict:
            continue
        for key, value in dict.items(per_param):
            value_kind = kind_of(T, value)
            if value_kind == Kind.TENSOR or value_kind == Kind.PARAMETER:
                found.append((param, str(key), value))
            elif value_kind in CONTAINERS:
                for leaf in walk(T, value, str(key), max_depth=2).leaves:
                    if leaf.kind == Kind.TENSOR or leaf.kind == Kind.PARAMETER:
                        found.append((param, leaf.path, leaf.value))
    return found
