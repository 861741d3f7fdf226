"""A cell's dry run: the cell executed on fake copies of the tensors, modules and optimizers it
reads, predicting its device errors and its peak memory per device before any GPU time is spent.

    report = dry_run("loss = model(x).sum()", namespace)
    report.diagnosis      # the device error it would raise, explained (or None)
    report.memory.peak    # {"cuda:0": bytes, ...}
    report.refused        # the devices it would not fit on
    report.stopped        # where the prediction stopped, and why (or None)

Modules in the order data flows through them:

- :mod:`.fakes`   fake copies of tensors, modules and optimizers (one ``FakeTensorMode``)
- :mod:`.shadow`  the shadow namespace: the names the cell reads, copied; the file-write guard
- :mod:`.memory`  the memory counter of the shadow run
- :mod:`.report`  :class:`DryRunReport` and its rendering
- :mod:`.core`    :func:`dry_run`: the steps above in order

Pure core: no IPython; torch only once the user imported it.
"""

from __future__ import annotations

from .core import dry_run, parse_free
from .report import DryRunReport, Fit, Stop

__all__ = ["DryRunReport", "Fit", "Stop", "dry_run", "parse_free"]
