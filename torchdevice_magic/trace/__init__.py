"""Where do the devices diverge, and how much is copied between host and device, per line?

:func:`trace` runs a cell's code under a lean ``TorchDispatchMode`` that sees every aten op
(its tensors' devices, copies between devices, values read back to the host) and a
``TorchFunctionMode`` only for what dispatch cannot see (``.tolist()``, ``.numpy()``, printing
a tensor). Each interesting op is attributed to the user's source line, the innermost Python
frame that is not torch's (nor the standard library's, IPython's or ours), and, through
``torch.utils.module_tracker.ModuleTracker``, to the module it ran in under the name the
namespace gives it (``model.encoder.layers.3.attn``). :class:`Tracer` is the same recorder as
a context manager, for callers that run the code themselves (``%%devicecheck --trace`` runs
the cell through IPython).

The parts: :mod:`.report` (the report's data, text and HTML), :mod:`.recorder` (``Tracer``,
``trace``), :mod:`.modes` (the torch mode classes, built on first use, and the ``Recorder``
protocol they report to), :mod:`.ops` (what the recorder reads of an op), :mod:`.findings`
(what one run found), :mod:`.locate` (the user's frame of an op), :mod:`.assembly` (findings
to report), :mod:`.metamix` (meta tensors computing beside real ones: the lean guard of
``%%devicecheck`` and the error its diagnosis explains), :mod:`.metacalls` (the always-on
check of modules with meta tensors called with real inputs) and :mod:`.frames` (library
directories, a tensor's name in a frame, loop lines).
Everything is importable from here (``from torchdevice_magic.trace import Tracer``).

Pure core: no IPython import, and torch is imported only when the caller already did.

Why it stays cheap: ops are only counted (per device and module) unless they are interesting;
only copies, host reads and ops mixing devices look at the Python stack, walking
``f_back`` with a per-code-object cache of "is this library code?" (no ``traceback``), and
they keep ``(code object, line)`` pairs: file names, function names and source text are
looked up when the report is built. Nothing the cell computes is touched: each op runs
exactly as it would have (``func(*args, **kwargs)``), so values are identical with and
without tracing.
"""

from __future__ import annotations

from .metacalls import MetaCall, MetaCallCheck
from .metamix import MetaMixError, MetaMixGuard
from .recorder import CELL_FILENAME, Tracer, trace
from .report import Divergence, HostRead, TraceReport, Transfer

__all__ = [
    "CELL_FILENAME",
    "Divergence",
    "HostRead",
    "MetaCall",
    "MetaCallCheck",
    "MetaMixError",
    "MetaMixGuard",
    "TraceReport",
    "Tracer",
    "Transfer",
    "trace",
]
