"""Which line of the user's an op comes from: the innermost Python frame that is not library
code (torch's, IPython's, the standard library's, this package's), found by walking ``f_back``
with a per-code-object cache of whose code it is. Read only for the ops worth noting (copies,
host reads, the first divergence), never for every op.
"""

from __future__ import annotations

import sys
import threading
from types import CodeType, FrameType
from typing import Any

from ..sourcefiles import CodeKind, code_owner

#: the walk stopped at the code that entered the recorder: an op of ours or IPython's made
#: outside the traced code (the post-execute hook's scan), not recorded
OUTSIDE: Any = object()

# whose code a code object is: the user's (0, falsy: the hot loop tests ``not owner``), this
# extension's own, or another library's (plain ints: compared for every frame of every op)
USER_CODE, EXTENSION_CODE, LIBRARY_CODE = 0, 1, 2


class FrameLocator:
    """Finds the user's frame of an op; made when the recorder is entered.

    ``stop``: the frame that entered the recorder (a walk reaching it was outside the traced
    code). ``thread``: the thread that entered it (another thread's op borrows that thread's
    stack). After each :meth:`locate`, ``direct`` says the user's line called the op with no
    library Python code in between (``x.to(d)``, not ``model.to(d)`` copying each parameter)
    and ``borrowed`` that the frame is the waiting thread's (its locals are not the op's).
    """

    def __init__(self, stop: FrameType | None, thread: int) -> None:
        self.stop = stop
        self.thread = thread
        self.direct = True
        self.borrowed = False
        # by id, the code kept alive beside its owner: code objects that differ only in their
        # file (the same function in an installed package and in the user's copy) compare equal
        self._whose: dict[int, tuple[CodeType, int]] = {}

    def locate(self, frame: FrameType | None) -> Any:
        """The user's frame for an op whose Python stack starts at ``frame``; None when no
        frame of the user's is found, :data:`OUTSIDE` for ops outside the traced code."""
        found = self.user_frame(frame)
        self.borrowed = False
        if found is None and threading.get_ident() != self.thread:
            # autograd runs an accelerator's backward on its own thread, while the thread
            # that entered the tracer waits in loss.backward(): that line is the user's
            waiting = sys._current_frames().get(self.thread)
            found = self.user_frame(waiting) if waiting is not None else None
            self.borrowed = found is not None and found is not OUTSIDE
        return found

    def user_frame(self, frame: FrameType | None) -> Any:
        """The innermost frame that is the user's, or None (other threads) / OUTSIDE; sets
        ``direct``."""
        whose = self._whose
        stop = self.stop
        direct = True
        while frame is not None:
            code = frame.f_code
            known = whose.get(id(code))
            if known is None:
                known = whose[id(code)] = (code, self._whose_code(code))
            kind = known[1]
            if not kind:
                self.direct = direct
                return frame
            if frame is stop:
                return OUTSIDE
            if kind == LIBRARY_CODE:
                direct = False
            frame = frame.f_back
        self.direct = direct
        return None

    def _whose_code(self, code: CodeType) -> int:
        kind = code_owner(code.co_filename).kind
        if kind is CodeKind.USER:
            return USER_CODE
        return EXTENSION_CODE if kind is CodeKind.EXTENSION else LIBRARY_CODE

    def cell_filename(self, frame: FrameType | None, namespace: dict[str, Any]) -> str | None:
        """The file name the cell was compiled under: the frame running at module level in
        ``namespace``, between ``frame`` and the frame that entered the recorder."""
        while frame is not None and frame is not self.stop:
            if frame.f_code.co_name == "<module>" and frame.f_globals is namespace:
                return frame.f_code.co_filename
            frame = frame.f_back
        return None
