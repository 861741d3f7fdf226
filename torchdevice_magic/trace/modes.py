"""The torch side of the recorder, built on first use (importing this never imports torch).

The mode classes that hand every op to a :class:`Recorder`: a ``TorchDispatchMode``, a
``TorchFunctionMode`` for what dispatch cannot see (``.tolist()``, ``.numpy()``, printing) and a
``ModuleTracker`` naming modules after the namespace. :class:`Recorder` is all they need of the
recorder (:class:`~torchdevice_magic.trace.recorder.Tracer` is one); this module never imports
it.
"""

from __future__ import annotations

import sys
from types import CodeType
from typing import Any, NamedTuple, Protocol

from .ops import bind_torch


class OpRecorder(Protocol):
    """What the dispatch mode needs: one handler for every aten op."""

    def on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run an aten op (``func(*args, **kwargs)``) and record it; return its result."""
        ...


class Recorder(OpRecorder, Protocol):
    """What the mode classes need from the recorder."""

    def on_function(
        self, func: Any, entry: tuple[str, bool], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Run a torch function listed in :data:`FUNCTIONS` (``entry`` is its row) and record
        it; return its result."""
        ...

    def module_name(self, module: Any) -> str | None:
        """The namespace's name for a module (``model.encoder``), or None."""
        ...

    def module_entered(self, name: str, module: Any) -> None:
        """A module's forward begins (its ops are attributed to ``name`` until it ends)."""
        ...

    def module_left(self, module: Any) -> list[str]:
        """A module's forward ended; return the names of the modules it closes (itself and
        any inner one a raising forward left open), empty when it was never entered."""
        ...

    def internal_error(self) -> None:
        """Count an error of the recorder's own (it never reaches the user's code)."""
        ...


class ModeClasses(NamedTuple):
    """The mode classes, each built with a :class:`Recorder`."""

    function: Any  # TorchFunctionMode
    dispatch: Any  # TorchDispatchMode (needs only an OpRecorder)
    tracker: Any  # ModuleTracker, or None on a torch without it


#: torch functions the function mode looks at: (label, is a host read dispatch cannot see)
FUNCTIONS: dict[Any, tuple[str, bool]] = {}

_MODE_CLASSES: ModeClasses | None = None


def _dynamo_skipper() -> Any:
    """A function marking a code object "never compile this frame nor what it calls", or
    None where this torch has no such (private) API."""
    try:
        from torch._C._dynamo.eval_frame import (
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )
    except Exception:
        return None

    def skip(code: CodeType) -> None:
        strategy = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
        set_code_exec_strategy(code, strategy)

    return skip


def _bind_functions(torch: Any) -> None:
    FUNCTIONS.update(
        {
            torch.Tensor.tolist: (".tolist()", True),
            torch.Tensor.numpy: (".numpy()", True),
            torch.Tensor.__array__: ("numpy.asarray", True),
            torch.Tensor.__repr__: ("print/repr", True),
            torch.Tensor.__format__: ("format", True),
            torch.Tensor.item: (".item()", False),
            torch.Tensor.__bool__: ("bool()", False),
            torch.Tensor.__float__: ("float()", False),
            torch.Tensor.__int__: ("int()", False),
            torch.Tensor.__index__: ("as an index", False),
        }
    )


def mode_classes() -> ModeClasses:
    """The mode classes, built on first use (importing this module never imports torch)."""
    global _MODE_CLASSES
    if _MODE_CLASSES is not None:
        return _MODE_CLASSES
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    bind_torch()
    _bind_functions(torch)
    skip_dynamo = _dynamo_skipper()

    class DispatchRecorder(TorchDispatchMode):
        def __init__(self, recorder: OpRecorder) -> None:
            super().__init__()
            self.recorder = recorder

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps __torch_dispatch__ in torch._disable_dynamo (~3 µs per op, as much
            # as the recording); marking our code "skip, recursively" keeps torch.compile out
            # of it at no cost per op. Without that API, keep torch's wrapper.
            return skip_dynamo is None

        def __torch_dispatch__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            __tracebackhide__ = True
            try:
                # torch passes kwargs as a dict (empty when none)
                return self.recorder.on_op(func, args, kwargs if kwargs is not None else {})
            except BaseException as error:
                # The traceback keeps this frame and the ones below it alive with the op's
                # tensors, views among them, and a view keeps its base's use count up: after
                # the failed cell a plain `model.to(...)` could no longer swap the parameter.
                # Those frames (the mode's and torch's own, which the traceback hides) have
                # finished: their locals go, the frames stay for the traceback.
                del args, kwargs
                below = error.__traceback__
                while below is not None:
                    if below.tb_frame is not sys._getframe():
                        below.tb_frame.clear()
                    below = below.tb_next
                raise

    class FunctionRecorder(TorchFunctionMode):
        def __init__(self, recorder: Recorder) -> None:
            super().__init__()
            self.recorder = recorder

        def __torch_function__(
            self,
            func: Any,
            types: Any,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, Any] | None = None,
        ) -> Any:
            # called for every torch function, method and attribute: decide here, in one
            # dict lookup, that it is none of ours
            __tracebackhide__ = True
            try:
                entry = FUNCTIONS.get(func)
            except TypeError:  # an unhashable callable: nothing of ours
                entry = None
            if entry is None:
                return func(*args, **kwargs) if kwargs else func(*args)
            return self.recorder.on_function(func, entry, args, kwargs or {})

    if skip_dynamo is not None:
        skip_dynamo(DispatchRecorder.__dict__["__torch_dispatch__"].__code__)
        skip_dynamo(FunctionRecorder.__dict__["__torch_function__"].__code__)

    _MODE_CLASSES = ModeClasses(FunctionRecorder, DispatchRecorder, _tracker_class())
    return _MODE_CLASSES


def _tracker_class() -> Any:
    try:
        from torch.utils.module_tracker import ModuleTracker
    except ImportError:  # older torch: no module paths
        return None

    class ModuleRecorder(ModuleTracker):
        """ModuleTracker naming roots by the namespace (``model`` instead of ``Net``), and
        telling the recorder which module is innermost (``parents`` is a set)."""

        def __init__(self, recorder: Recorder) -> None:
            super().__init__()
            self.recorder = recorder

        def _get_mod_name(self, mod: Any) -> str:
            if mod not in self._known_modules:
                name = self.recorder.module_name(mod)
                if name is not None:
                    self._known_modules[mod] = name
            return super()._get_mod_name(mod)

        # ModuleTracker's own hooks also register a multi-grad hook on every forward's
        # inputs and outputs to follow the backward pass: 5x the cost of a traced training
        # step, for backward attribution the report does not make. The forward part
        # (names, ``parents``) is kept; backward ops get no module.
        # (hooks run inside the user's forward: they never raise into it)
        def _fw_pre_hook(self, mod: Any, input: Any) -> None:
            try:
                name = self._get_mod_name(mod)
            except Exception:
                self.recorder.internal_error()
                name = type(mod).__name__
            self.parents.add(name)
            self.recorder.module_entered(name, mod)

        def _fw_post_hook(self, mod: Any, input: Any, output: Any) -> None:
            closed = self.recorder.module_left(mod)
            if closed:
                # only the module itself leaves ``parents``, as ModuleTracker does
                self.parents.discard(closed[0])

    return ModuleRecorder
