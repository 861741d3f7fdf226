"""Where did my memory go: who holds it, what each cell added, and out-of-memory errors explained.

Pure core: no IPython, no ipywidgets, torch never imported here. Three things:

* :func:`holders` finds what keeps tensor memory alive *outside* the user's named variables:
  the last error's traceback (every frame of it keeps its locals), the output history
  (``Out[12]``, ``_``), autograd graphs kept alive by live results (``loss``, a list of losses),
  gradients and optimizer state of parameters no variable holds, closures and bound objects of
  hooks registered on modules (plus, given what the timeline knows, a second name still
  holding a deleted name's tensor). Objects holding tensors in attributes are walked by the
  scan itself: named, they are named variables; inside any of these holders, they are found. Each :class:`Holder`
  says where, on which device, how many bytes (storages counted once, minus what named
  variables hold anyway) and can :meth:`Holder.release` exactly that reference.
* :class:`Timeline` records, after each cell, the bytes held per device (named + holders, each
  storage once), the change, the names that grew or shrank, CUDA allocator figures, and
  notices holders that keep growing (a leak) -- reusing the scan the hook already made.
* :func:`explain_oom` explains ``torch.OutOfMemoryError`` and CPU allocation failures in the
  user's own names. It never frees anything by itself.

There is ONE walker of user objects (:func:`torchdevice_magic.scan`): everything here finds
*candidate* objects (a frame's locals, an ``Out`` entry, a hook's closure cells, the tensors an
autograd graph saved) and asks ``scan({label: obj})`` for their devices, bytes and storage keys
(:meth:`Inventory.storages`), then subtracts the storages of the named variables. The only
traversals here are of things that are not user objects: a traceback's frames, an autograd
graph's nodes (``next_functions``), a module tree's hook dicts; and a one-level look into a
top-level list/tuple/dict for tensors that carry a graph.

A :class:`Holder` never keeps a tensor alive: it holds the namespace, names, ids, and weak
references (to exceptions, modules, optimizers -- never to Parameters), and re-finds the
object when asked to release it.

The package, by concern (each module imports only those above it):

- :mod:`.base`      storage keys and per-device sums, :class:`~.base._Source`, the release count
  (:func:`holders_changed`: a release or a move)
- :mod:`.graphs`    the tensors autograd graphs keep alive (:func:`graph_tensors`), detaching
- :mod:`.sources`   the holders of each kind: traceback, ``Out``, optimizer, hooks, second names
- :mod:`.interactive` what an interactive shell keeps besides its namespace (found from it)
- :mod:`.holding`   :class:`Holder`, :func:`holders`, :func:`held_outside`, :class:`HolderList`,
  :func:`follow` (what a timeline remembers of a namespace, for :func:`holders`)
- :mod:`.leaks`     when a followed holder grew, and when that is a leak (the warning's text)
- :mod:`.timeline`  :class:`Timeline`, :class:`CellMemory`, the accelerator's figures and peaks
- :mod:`.oom`       :func:`parse_oom`, :func:`explain_oom` and what they return
"""

from __future__ import annotations

from .base import ErrorGetter as ErrorGetter
from .base import Keys as Keys
from .base import StorageKey as StorageKey
from .base import holders_changed
from .graphs import graph_tensors
from .holding import Following, Holder, HolderList, follow, held_outside, holders, holders_text
from .interactive import shell_references
from .oom import OOMExplanation, OOMFacts, explain_oom, parse_oom
from .timeline import RECOUNT_ABOVE as RECOUNT_ABOVE
from .timeline import CellMemory, Timeline, device_figures, reset_peaks

__all__ = [
    "Following",
    "Holder",
    "HolderList",
    "follow",
    "shell_references",
    "holders",
    "holders_changed",
    "held_outside",
    "holders_text",
    "graph_tensors",
    "CellMemory",
    "Timeline",
    "device_figures",
    "reset_peaks",
    "OOMFacts",
    "OOMExplanation",
    "parse_oom",
    "explain_oom",
]
