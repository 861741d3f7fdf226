"""What the trace tests share: how a cell is written, and "no mode of ours is left"."""

from __future__ import annotations

import textwrap

import torch
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

MISMATCH = "Expected all tensors to be on the same device"


def cell(source: str) -> str:
    return textwrap.dedent(source).lstrip("\n")


def no_modes_left() -> bool:
    """No dispatch or function mode, no global module hook is left installed."""
    hooks = torch.nn.modules.module
    return (
        not _get_current_dispatch_mode_stack()
        and not _get_current_function_mode_stack()
        and not hooks._global_forward_pre_hooks
        and not hooks._global_forward_hooks
    )
