"""The torch side of the recorder, built on first use (importing this never imports torch).

What the recorder reads of an aten op (copy, host read, index; its tensors and their
devices; mixes torch accepts by design) and the mode classes that hand every op to the
:class:`~torchdevice_magic.trace.recorder.Tracer`: a ``TorchDispatchMode``, a
``TorchFunctionMode`` for what dispatch cannot see (``.tolist()``, ``.numpy()``, printing) and a
``ModuleTracker`` naming modules after the namespace. ``_mode_classes()`` binds ``_Tensor``
(``torch.Tensor``), which the helpers here and the recorder's hot path read.
"""

from __future__ import annotations

import sys
from types import CodeType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .recorder import Tracer

# kinds of ops (cached per OpOverload)
_PLAIN, _COPY, _HOST_READ, _INDEX, _INDEX_PUT = 0, 1, 2, 3, 4


# -- helpers of the hot path (torch-dependent names bound by _mode_classes) ----------------------

_Tensor: Any = None


#: torch functions the function mode looks at: (label, is a host read dispatch cannot see)
_FUNCTIONS: dict[Any, tuple[str, bool]] = {}


_SEQUENCES = (list, tuple)


_READ_NAMES = {
    "_local_scalar_dense": ".item()",
    "item": ".item()",
    "equal": "torch.equal",
    "nonzero": "nonzero",
    "masked_select": "masked_select",
    "index": "boolean mask",
    "_unique2": "unique",
    "_unique": "unique",
    "unique_dim": "unique",
    "unique_consecutive": "unique_consecutive",
    "repeat_interleave": "repeat_interleave",
    "bincount": "bincount",
    "one_hot": "one_hot",
}


def _classify(func: Any) -> int:
    torch = sys.modules["torch"]
    name = func.__name__  # "add.Tensor"
    base = name.partition(".")[0]
    if base in ("_to_copy", "copy_", "_copy_from", "_copy_from_and_resize"):
        return _COPY
    if base == "index":
        return _INDEX
    if base in ("index_put", "index_put_", "_index_put_impl_"):
        return _INDEX_PUT
    tags = getattr(func, "tags", ())
    if (
        torch.Tag.data_dependent_output in tags
        or torch.Tag.dynamic_output_shape in tags
        or base == "equal"
    ):
        return _HOST_READ
    return _PLAIN


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", str(func))
    return name.removesuffix(".default")


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    found = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, _Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(b for b in a if isinstance(b, _Tensor))
    return found


def _mixed(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[str]:
    """The distinct devices of the tensor inputs, as strings (only called when they differ)."""
    seen: dict[str, None] = {}
    for t in _tensors(args, kwargs):
        seen.setdefault(str(t.device))
    return list(seen)


def _benign_mix(kind: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Mixes torch accepts by design: 0-dim cpu tensors beside accelerator tensors (scalars),
    and cpu index tensors indexing an accelerator tensor (``x[idx]``, ``x[idx] = v``)."""
    tensors = _tensors(args, kwargs)
    devices = {str(t.device) for t in tensors if not (t.device.type == "cpu" and t.dim() == 0)}
    if len(devices) < 2:
        return True
    if kind not in (_INDEX, _INDEX_PUT) or len(args) < 2 or not isinstance(args[0], _Tensor):
        return False
    own = str(args[0].device)
    indices = args[1] if isinstance(args[1], (list, tuple)) else ()
    if any(isinstance(i, _Tensor) and str(i.device) not in (own, "cpu") for i in indices):
        return False
    rest = _tensors(args[2:], kwargs)  # index_put's values: its own device, or a cpu scalar
    return all(str(t.device) == own or (t.device.type == "cpu" and t.dim() == 0) for t in rest)


def _boolean_index(args: tuple[Any, ...]) -> bool:
    if len(args) < 2 or not isinstance(args[1], (list, tuple)):
        return False
    torch = sys.modules["torch"]
    return any(isinstance(i, _Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])


def _output_device(out: Any) -> Any:
    if isinstance(out, _Tensor):
        return out.device
    if isinstance(out, (list, tuple)):
        for o in out:
            if isinstance(o, _Tensor):
                return o.device
    return None


# -- the mode classes ---------------------------------------------------------------------------

_MODE_CLASSES: tuple[Any, Any, Any] | None = None


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


def _mode_classes() -> tuple[Any, Any, Any]:
    """The mode classes, built on first use (importing this module never imports torch)."""
    global _MODE_CLASSES, _Tensor
    if _MODE_CLASSES is not None:
        return _MODE_CLASSES
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    _Tensor = torch.Tensor
    _FUNCTIONS.update(
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

    skip_dynamo = _dynamo_skipper()

    class _DispatchRecorder(TorchDispatchMode):
        def __init__(self, tracer: Tracer) -> None:
            super().__init__()
            self.tracer = tracer

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
            return self.tracer.on_op(func, args, kwargs or {})

    class _FunctionRecorder(TorchFunctionMode):
        def __init__(self, tracer: Tracer) -> None:
            super().__init__()
            self.tracer = tracer

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
            if kwargs is None:
                kwargs = {}
            try:
                entry = _FUNCTIONS.get(func)
            except TypeError:  # an unhashable callable: nothing of ours
                entry = None
            if entry is None:
                return func(*args, **kwargs)
            return self.tracer.on_function(func, entry, args, kwargs)

    if skip_dynamo is not None:
        skip_dynamo(_DispatchRecorder.__dict__["__torch_dispatch__"].__code__)
        skip_dynamo(_FunctionRecorder.__dict__["__torch_function__"].__code__)

    tracker_class = None
    try:
        from torch.utils.module_tracker import ModuleTracker
    except ImportError:  # older torch: no module paths
        pass
    else:

        class _ModuleRecorder(ModuleTracker):
            """ModuleTracker naming roots by the namespace (``model`` instead of ``Net``),
            plus a stack, so the innermost module is known (``parents`` is a set)."""

            def __init__(self, tracer: Tracer) -> None:
                super().__init__()
                self.tracer = tracer

            def _get_mod_name(self, mod: Any) -> str:
                if mod not in self._known_modules:
                    name = self.tracer.module_name(mod)
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
                    self.tracer._internal_errors += 1
                    name = type(mod).__name__
                self.parents.add(name)
                self.tracer._module_stack.append((name, mod))

            def _fw_post_hook(self, mod: Any, input: Any, output: Any) -> None:
                stack = self.tracer._module_stack
                # pop up to this module (a forward that raised, caught by the user, left its
                # entry behind)
                for i in range(len(stack) - 1, -1, -1):
                    if stack[i][1] is mod:
                        self.parents.discard(stack[i][0])
                        del stack[i:]
                        break

        tracker_class = _ModuleRecorder

    _MODE_CLASSES = (_FunctionRecorder, _DispatchRecorder, tracker_class)
    return _MODE_CLASSES
