"""Meta tensors computing beside real ones: caught while a cell runs, and told as an error.

On torch 2.x many ops given one meta and one real tensor raise nothing: ``cpu @ meta``,
``F.linear(x, w_meta)`` without bias, ``conv2d``, ``embedding`` return a real tensor of numbers
computed from no data; ``meta @ cpu``, ``bmm``, ``einsum`` return meta and drop the real values.
:class:`MetaMixGuard` is a lean dispatch mode for ``%%devicecheck`` that only looks for that
(the full :class:`~torchdevice_magic.trace.Tracer` of ``--trace`` notes it too, as
``TraceReport.meta_mix``). :class:`MetaMixError` carries what either found with the words
torch raises for the mixes it does refuse, so the device-mismatch diagnosis explains it with the
same words and fix (``to_empty`` and reload the weights, or move the real side).

Importing this never imports torch; the guard does nothing where torch was never imported.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from .assembly import Places, divergence_row
from .findings import Findings
from .locate import FrameLocator
from .modes import OpRecorder, mode_classes
from .ops import COPY, SEQUENCES, classify, meta_mix, mixed_devices, real_device
from .report import META_MIX_HEADLINE, Divergence


class MetaMixError(RuntimeError):
    """An op computed with a meta tensor beside a real one and raised nothing. Its message
    ends with torch's own words for the mixes it refuses, which the diagnosis recognises."""

    def __init__(self, mix: Divergence) -> None:
        self.mix = mix
        real = real_device(mix.devices)
        torch_words = f"Tensor on device meta is not on the expected device {real}!"
        #: what happened, in the report's words (the message adds torch's)
        self.summary = f"{META_MIX_HEADLINE}: {mix.describe()}"
        super().__init__(f"{self.summary}. {torch_words}")


class MetaMixGuard:
    """Note the first op that computes with a meta tensor beside a real one while
    ``with MetaMixGuard(namespace): ...`` runs; :meth:`meta_mix` is its row (line, variables).

    ``namespace``, ``source``, ``filename`` and ``file_label`` are what the
    :class:`~torchdevice_magic.trace.Tracer` takes. Each op still runs as
    ``func(*args, **kwargs)``: results are what they would have been. A mix torch refuses
    (it raises) is not kept: the error itself is explained.
    """

    def __init__(
        self,
        namespace: dict[str, Any] | None = None,
        source: str | None = None,
        filename: str | None = None,
        file_label: Callable[[str], str | None] | None = None,
    ) -> None:
        self.namespace = namespace if namespace is not None else {}
        self.source = source
        self.filename = filename
        self.file_label = file_label
        self._findings = Findings(FrameLocator(None, threading.get_ident()), self.namespace, None)
        self._mode: Any = None
        self._tensor: Any = None

    def __enter__(self) -> MetaMixGuard:
        if "torch" not in sys.modules:  # never import torch on the user's behalf
            return self
        locator = FrameLocator(sys._getframe(1), threading.get_ident())
        self._findings = Findings(locator, self.namespace, self.filename)
        self._tensor = sys.modules["torch"].Tensor
        recorder: OpRecorder = self
        mode = mode_classes().dispatch(recorder)
        mode.__enter__()
        self._mode = mode
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        mode, self._mode = self._mode, None
        self._findings.locator.stop = None
        if self.filename is None:
            self.filename = self._findings.filename
        if mode is not None:
            mode.__exit__(kind, value, tb)

    def on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run one aten op; note it when it is the first to mix meta with real data."""
        __tracebackhide__ = True
        noted = False
        findings = self._findings
        if findings.meta_mix is None:
            try:
                noted = self._note_if_mixed(func, args, kwargs)
            except Exception:  # never into the user's cell
                findings.internal_errors += 1
        if not noted:
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        except BaseException:
            findings.meta_mix = None  # torch refused it: its error says so
            raise

    def _note_if_mixed(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        tensor = self._tensor
        first = None
        mixed = False
        for a in (*args, *kwargs.values()) if kwargs else args:
            if isinstance(a, tensor):
                d = a.device
                if first is None:
                    first = d
                elif d != first:
                    mixed = True
                    break
            elif type(a) in SEQUENCES and a and isinstance(a[0], tensor):
                mixed = True
                break
        if not mixed:
            return False
        devices = mixed_devices(args, kwargs)
        if "meta" not in devices or classify(func) == COPY or not meta_mix(func, args, kwargs):
            return False
        self._findings.note_meta_mix(func, args, kwargs, devices)
        return self._findings.meta_mix is not None

    def meta_mix(self) -> Divergence | None:
        """The first op that mixed meta with real data and raised nothing, or None."""
        filename = self.filename if self.filename is not None else self._findings.filename
        return divergence_row(
            self._findings.meta_mix, Places(self.source, filename, self.file_label)
        )
