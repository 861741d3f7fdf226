"""The one view of an :class:`~torchdevice_magic.scan.Inventory`: what every table shows.

Pure core (no IPython, no ipywidgets, never imports torch). The text/HTML rendering, the
ipywidgets table and the JupyterLab sidebar only draw what this module computes:

* display rows (:class:`Row`): one size figure (the object's own data) with gradients shown
  apart, shape text, device, status, and what its button does or why it cannot;
* per-device totals with bars (:class:`DeviceBar`) and a line saying what the totals include
  beyond the rows (storages counted once, gradients, optimizer state, output history);
* sort orders (size by real bytes, names naturally: ``x2`` before ``x10``), filters (name,
  type, device text), paging windows (:class:`WindowSpec` -> :class:`Window`);
* the default target and the enabled/disabled state of every button, with the reason.

Its parts: :mod:`.rows` (rows and sort keys), :mod:`.header` (totals, targets, buttons),
:mod:`.windows` (specs, windows, deltas), :mod:`.live` (:class:`LiveWindow`), :mod:`.timeline`
(the memory chart's label and tooltips), :mod:`.usage` (what an accelerator's used memory is
made of). Everything is importable from here.

:class:`LiveWindow` keeps one window of a changing namespace up to date and says what changed
(:func:`apply_delta` on the previous window gives exactly a fresh window; a property test
checks it). Only the rows whose record changed are formatted again.
"""

from __future__ import annotations

from .header import (
    DeviceBar,
    Header,
    Tally,
    Target,
    choose_target,
    device_bars,
    header,
    move_selected_action,
    tally,
    totals_note,
    unavailable,
    undo_action,
)
from .live import (
    HEAD_RESERVE,
    LiveWindow,
    RecordsSource,
    as_source,
    column_head,
)
from .rows import (
    COLUMNS,
    REASON_WORDS,
    Action,
    Row,
    in_words,
    make_row,
    natural_first,
    natural_key,
    natural_keys,
    root_devices_of,
    row_action,
    shape_text,
    size_text,
    sort_key,
    status_text,
)
from .timeline import change_text, held_label, point_tooltip, timeline_texts
from .usage import used_memory_text
from .windows import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    SORTS,
    Delta,
    Splice,
    Window,
    WindowSpec,
    apply_delta,
    apply_splices,
    diff_windows,
    filter_words,
    matches,
    window,
    with_spec,
)

__all__ = [
    "Action",
    "COLUMNS",
    "DEFAULT_LIMIT",
    "Delta",
    "DeviceBar",
    "HEAD_RESERVE",
    "Header",
    "LiveWindow",
    "MAX_LIMIT",
    "REASON_WORDS",
    "RecordsSource",
    "Row",
    "SORTS",
    "Splice",
    "Tally",
    "Target",
    "Window",
    "WindowSpec",
    "apply_delta",
    "apply_splices",
    "as_source",
    "change_text",
    "choose_target",
    "column_head",
    "device_bars",
    "diff_windows",
    "filter_words",
    "header",
    "held_label",
    "in_words",
    "make_row",
    "matches",
    "move_selected_action",
    "natural_key",
    "natural_first",
    "natural_keys",
    "point_tooltip",
    "root_devices_of",
    "row_action",
    "shape_text",
    "size_text",
    "sort_key",
    "status_text",
    "tally",
    "timeline_texts",
    "totals_note",
    "unavailable",
    "undo_action",
    "used_memory_text",
    "window",
    "with_spec",
]
