"""What one corpus case says: the reporter's cells, and what a right diagnosis and fix are.

A case is a module in ``tests/reports/cases/``. Its docstring cites the report (owner/repo#N
or a URL), says what the reporter saw and how the thread resolved it. It defines

    CELLS      the notebook cells, as the reporter typed them (shapes made tiny); the
               accelerator is the name ``DEV``, which the scorer binds before the first cell
    EXPECTED   an :class:`Expected` (a device error), or
    NEGATIVE   a :class:`Negative` (no device error: nothing may be diagnosed)
    REQUIRES   optional: capabilities of the simulated accelerator the case needs to behave as
               on CUDA (see :data:`CAPABILITIES`); missing ones make the case "skipped"

Library code the reporter called (transformers, torchaudio, ...) is a reduced copy under
``tests/reports/libs/``, imported by name from the cells: the scorer installs that folder as a
``site-packages`` directory, so its frames are library frames, as they were for the reporter.
"""

from __future__ import annotations

from dataclasses import dataclass

#: what a case may require of the simulated accelerator, and what that means on CUDA
CAPABILITIES = {
    "cpu_indices": "CPU index tensors index accelerator tensors (x[idx], index_put_), as on CUDA",
    "conv_type_message": "conv raises CUDA's 'Input type (...) and weight type (...)' message",
    "rnn_kernels": "nn.LSTM / nn.GRU run on the accelerator (the fused cell kernels)",
}


@dataclass(frozen=True)
class Culprit:
    """A tensor/module the reporter's resolution moved or re-created, and where it really is."""

    #: the name the diagnosis should give: a variable, a frame local, an attribute path
    #: (``model.phase_advance``); alternatives separated by ``|`` (``h0|self.h0``)
    name: str
    #: ``"DEV"`` (the accelerator), ``"cpu"`` or ``"meta"``
    device: str

    def names(self) -> tuple[str, ...]:
        return tuple(part.strip() for part in self.name.split("|"))


@dataclass(frozen=True)
class Expected:
    """A device error: who is where, what the reporter's fix did, and how to tell it worked."""

    #: the objects the reporter's resolution touched, each on the device it is really on
    culprits: tuple[Culprit, ...]
    #: what a right fix does, in words (``moves weights to DEV``; ``h0 with device=x.device``)
    fix: str
    #: a Python expression evaluated in the namespace after the fixed re-run; must be true
    check: str = "True"
    #: the error message (or a distinctive part of it) the reporter saw on CUDA
    message: str = ""


@dataclass(frozen=True)
class Negative:
    """Not a device error (or a mix torch allows): nothing may be diagnosed."""

    #: why this is no device error
    why: str
    #: the exception type name the cells raise, or None when they run without error on CUDA
    raises: str | None = None
