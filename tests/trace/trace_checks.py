"""What the trace tests share: how a cell is written, and "no mode of ours is left"."""

from __future__ import annotations

import textwrap

import torch
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from torchdevice_magic.trace import MetaCallCheck

MISMATCH = "Expected all tensors to be on the same device"


def cell(source: str) -> str:
    return textwrap.dedent(source).lstrip("\n")


def no_modes_left() -> bool:
    """No dispatch or function mode, no global module hook of the tracer is left installed
    (the always-on meta-call check is the extension's, armed while a meta module exists)."""
    hooks = torch.nn.modules.module
    return (
        not _get_current_dispatch_mode_stack()
        and not _get_current_function_mode_stack()
        and not [h for h in hooks._global_forward_pre_hooks.values() if not _meta_call_hook(h)]
        and not hooks._global_forward_hooks
    )


def meta_call_check_armed() -> bool:
    """The always-on meta-call check's global forward pre-hook is installed."""
    hooks = torch.nn.modules.module._global_forward_pre_hooks.values()
    return any(_meta_call_hook(h) for h in hooks)


def _meta_call_hook(hook: object) -> bool:
    return isinstance(getattr(hook, "__self__", None), MetaCallCheck)
