"""The settings of torchdevice_magic: ``c.TorchDeviceMagic.<name>`` in ipython_config.py, or
``%config TorchDeviceMagic.<name> = value`` in a running kernel.

A traitlets ``Configurable``, so IPython's ``%config`` lists and sets it; the controller
(:class:`torchdevice_magic.app.DeviceController`) reads it as its ``Settings``.
"""

from __future__ import annotations

import sys
from typing import Any

from traitlets import Bool, Int, TraitError, Unicode, validate
from traitlets.config import Configurable


class TorchDeviceMagic(Configurable):
    """Settings of torchdevice_magic (``c.TorchDeviceMagic.<name>`` in ipython_config.py, or
    ``%config TorchDeviceMagic.<name> = value`` in a running kernel)."""

    auto_diagnose = Bool(
        True, help="Explain device-mismatch errors above the traceback of any cell."
    ).tag(config=True)
    warn_on_mixed = Bool(
        True,
        help="Print a one-line warning when a module spans devices or an optimizer's state "
        "sits on a device other than its parameters.",
    ).tag(config=True)
    check_meta_calls = Bool(
        True,
        help="Warn after a cell that called a module holding meta parameters or buffers with "
        "real inputs (torch raises nothing; the output holds no real values). Armed only "
        "from the moment a module registers a meta tensor until none is left (its global "
        "forward pre-hook costs about 2 µs per module call while armed; nothing otherwise).",
    ).tag(config=True)
    default_device = Unicode(
        "",
        help="The device fixes and moves suggest by default; empty: moves offer the best "
        "available (cuda -> mps -> xpu -> cpu), fixes follow the model.",
    ).tag(config=True)

    @validate("default_device")
    def _check_default_device(self, proposal: dict[str, Any]) -> str:
        value = proposal["value"].strip()
        if value and "torch" in sys.modules:  # checked against this kernel's devices
            from ..moves import MoveError, resolve_device

            try:
                return str(resolve_device(value, allow_meta=True))
            except MoveError as error:
                raise TraitError(f"default_device {value!r}: {error}") from None
        return value

    allow_meta_target = Bool(
        False,
        help="Offer 'meta' as a move target (it discards data: for demos and tests on "
        "machines without an accelerator).",
    ).tag(config=True)
    include_hidden = Bool(
        False, help="Also list tensors kept alive only by the output history (Out, _)."
    ).tag(config=True)
    row_limit = Int(
        200, help="Rows a table shows per page (the sidebar asks for its own windows)."
    ).tag(config=True)
    show_full_traceback = Bool(
        False,
        help="After a device-mismatch error, show every traceback frame (by default torch's "
        "own frames are collapsed under the diagnosis).",
    ).tag(config=True)
    track_peak = Bool(
        True,
        help="Measure each cell's peak CUDA memory: before every cell, reset the process-wide "
        "peak counters (torch.cuda.reset_peak_memory_stats), so other code reading "
        "max_memory_allocated sees the peak since the last cell. Only when CUDA is already "
        "initialised (it is never initialised for this).",
    ).tag(config=True)


__all__ = ["TorchDeviceMagic"]
