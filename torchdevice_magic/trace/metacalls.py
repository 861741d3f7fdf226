"""A module holding meta parameters or buffers, called with real inputs: caught on every call,
told after the cell.

``nn.Linear(3, 4, bias=False, device="meta")(x)`` returns numbers computed from no data on
torch 2.x CPU, and raises nothing. :class:`MetaCallCheck` is a global forward pre-hook
(``torch.nn.modules.module.register_module_forward_pre_hook``) that looks at the module's own
parameters and buffers and at its positional inputs. Any global hook sends every module call
of the process down ``Module._call_impl``'s slow path (1.5 – 3.4 µs a call measured by
``benchmarks/meta_calls.py``, over the 1 µs budget), so the hook is armed only while the
namespace holds a module with meta tensors (:meth:`MetaCallCheck.arm_for`, given the
inventory's ``meta_module_records()``, after each cell), or from the moment a module registers a
meta parameter or buffer (:meth:`MetaCallCheck.watch`: hooks that run on registration, never on
a call): a session without one pays nothing per module call.

Not a mix: a module whose weights an accelerate hook puts in place before its forward
(``_hf_hook``: ``cpu_offload``, ``disk_offload``, a ``device_map`` dispatch), meta inputs
(shape inference), and everything that never calls a module (``init_empty_weights``,
``to_empty``, shape-only ops).

Importing this never imports torch; arming does only once the user imported it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .frames import module_path

#: calls kept per cell (one per module): a loop over a meta model repeats the same ones
KEPT_CALLS = 20


@dataclass(frozen=True)
class MetaCall:
    """A module with meta tensors called with real inputs."""

    name: str  # the namespace's name for it, or its class name when none reaches it
    type: str  # its class name
    meta: tuple[str, ...]  # its own parameters and buffers on meta
    devices: tuple[str, ...]  # the devices of its real inputs

    def warning(self) -> str:
        device = self.devices[0] if self.devices else "cpu"
        named = f"{self.name} ({self.type})" if self.name != self.type else self.name
        return (
            f"{named} was called with a tensor on {', '.join(self.devices)} while its "
            f"{', '.join(self.meta)} {'is' if len(self.meta) == 1 else 'are'} on meta: torch "
            "raised nothing, and the output holds no real values. Fix: "
            f'{self.name}.to_empty(device="{device}") and load the weights '
            "(load_state_dict), or build it on a real device"
        )


def meta_tensors(module: Any) -> tuple[str, ...]:
    """The names of the module's own parameters and buffers that are on meta."""
    found = []
    for group in (module._parameters, module._buffers):
        for name, tensor in group.items():
            if tensor is not None and tensor.is_meta:
                found.append(name)
    return tuple(found)


class MetaCallCheck:
    """The forward pre-hook and what it caught since :meth:`take` was last called.

    ``arm_for(meta_modules)`` registers the hook while an inventory holds a module with meta
    tensors (and removes it when none does); :meth:`watch` arms it as soon as a module
    registers a meta tensor; :meth:`stop` removes every hook (unloading). The hook never
    raises into the user's forward, keeps modules only until :meth:`take`, and never holds a
    reference to a parameter."""

    def __init__(self) -> None:
        self._handle: Any = None
        self._watching: list[Any] = []
        self._caught: dict[int, tuple[Any, tuple[str, ...], tuple[str, ...]]] = {}
        self.internal_errors = 0

    @property
    def armed(self) -> bool:
        return self._handle is not None

    def arm(self) -> None:
        """Register the global forward pre-hook (once)."""
        if self._handle is None and "torch" in sys.modules:
            hooks = sys.modules["torch"].nn.modules.module
            self._handle = hooks.register_module_forward_pre_hook(self.hook)

    def disarm(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()

    def watch(self) -> None:
        """Arm as soon as a meta parameter or buffer is registered on any module (once torch is
        imported; idempotent): a model built on meta and called in the same cell is caught.
        These hooks run only when a module registers a tensor, never on a call."""
        if self._watching or "torch" not in sys.modules:
            return
        hooks = sys.modules["torch"].nn.modules.module
        self._watching = [
            hooks.register_module_parameter_registration_hook(self.registered),
            hooks.register_module_buffer_registration_hook(self.registered),
        ]

    def stop(self) -> None:
        """Remove every hook (unloading)."""
        self.disarm()
        watching, self._watching = self._watching, []
        for handle in watching:
            handle.remove()

    def registered(self, module: Any, name: str, tensor: Any) -> None:
        """A module registered a parameter or buffer: arm when it is on meta."""
        try:
            if self._handle is None and tensor is not None and tensor.is_meta:
                self.arm()
        except Exception:  # never into the user's module construction
            self.internal_errors += 1

    def arm_for(self, meta_modules: Any) -> None:
        """Armed exactly while ``meta_modules`` (an inventory's records of modules holding
        meta tensors) is not empty."""
        if meta_modules:
            self.arm()
        else:
            self.disarm()

    def hook(self, module: Any, args: tuple[Any, ...]) -> None:
        """The forward pre-hook: the hot path reads the module's own tensors' ``is_meta``."""
        try:
            for tensor in module._parameters.values():
                if tensor is not None and tensor.is_meta:
                    break
            else:
                for tensor in module._buffers.values():
                    if tensor is not None and tensor.is_meta:
                        break
                else:
                    return
            self._meta_module_called(module, args)
        except Exception:  # never into the user's forward
            self.internal_errors += 1

    def _meta_module_called(self, module: Any, args: tuple[Any, ...]) -> None:
        if "_hf_hook" in module.__dict__:  # accelerate loads the weights in its pre-forward
            return
        if id(module) in self._caught or len(self._caught) >= KEPT_CALLS:
            return
        tensor_class = sys.modules["torch"].Tensor
        devices: dict[str, None] = {}
        for arg in args:
            for t in arg if isinstance(arg, (list, tuple)) else (arg,):
                if not isinstance(t, tensor_class) or t.is_meta:
                    continue
                if t.device.type == "cpu" and t.dim() == 0:  # a scalar beside any device
                    continue
                devices.setdefault(str(t.device))
        if devices:
            self._caught[id(module)] = (module, meta_tensors(module), tuple(devices))

    def take(self, namespace: Mapping[str, Any]) -> list[MetaCall]:
        """What was caught since the last call, named after ``namespace``; forgets it."""
        caught, self._caught = self._caught, {}
        found = []
        for module, meta, devices in caught.values():
            kind = type(module).__name__
            try:
                name = module_path(namespace, module) or kind
            except Exception:
                name = kind
            found.append(MetaCall(name, kind, meta, devices))
        return found
