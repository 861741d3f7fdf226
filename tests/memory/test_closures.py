"""Releasing a traceback empties the closure cells only its finished frames reach: torch's
``Module._call_impl`` keeps a call's ``args`` in the closure of ``inner()`` whenever a module
or global hook is registered, and ``frame.clear()`` alone leaves them alive."""

from __future__ import annotations

import ctypes
import gc
import types
from typing import Any

from torchdevice_magic.memory.closures import empty_dead_cells, frame_cells

KEPT: list[Any] = []


class Batch:
    """Stands in for a tensor: weakly referenceable."""


def failed_call(keep_inner: bool, hand_out: list[Any] | None = None) -> tuple[BaseException, Any]:
    import weakref

    def outer() -> None:
        args = (Batch(),)

        def inner() -> None:
            raise RuntimeError(len(args))

        if keep_inner:
            KEPT.append(inner)  # a closure that lives on after the call
        if hand_out is not None:
            hand_out.append(inner)
        probe.append(weakref.ref(args[0]))
        inner()

    probe: list[Any] = []
    try:
        outer()
    except RuntimeError as error:
        return error, probe[0]
    raise AssertionError("outer() did not fail")


def release(error: BaseException) -> int:
    frames: list[types.FrameType] = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    frames = frames[1:]  # this test's own frame is still running
    cells = frame_cells(frames)
    for frame in frames:
        frame.clear()
    return empty_dead_cells(cells, {id(f) for f in frames})


def test_a_closure_only_the_failed_call_reaches_lets_its_batch_go() -> None:
    error, batch = failed_call(keep_inner=False)
    assert release(error) >= 1
    gc.collect()
    assert batch() is None


def test_a_closure_that_lives_on_keeps_its_cells() -> None:
    error, batch = failed_call(keep_inner=True)
    release(error)
    gc.collect()
    assert batch() is not None
    assert KEPT.pop().__closure__[0].cell_contents[0] is batch()  # still usable


def test_a_closure_held_where_the_collector_cannot_see_keeps_its_cells() -> None:
    """A C++ registry (a torch.library kernel, a dispatcher hook) holds a function with a
    reference the collector does not see: the cell stays."""
    handed: list[Any] = []
    error, batch = failed_call(keep_inner=False, hand_out=handed)
    address = ctypes.c_void_p(id(handed[0]))
    ctypes.pythonapi.Py_IncRef(address)  # an owner the collector does not see
    handed.clear()
    try:
        release(error)
        gc.collect()
        assert batch() is not None
    finally:
        ctypes.pythonapi.Py_DecRef(address)
