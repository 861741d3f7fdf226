"""``plan_move`` under the path ``shell/session.py`` imports it by (``..moves.plan``); the
package's face, ``from torchdevice_magic.moves import plan_move``, is the one to use. This
module goes once nothing outside ``moves/`` imports it by this path."""

from __future__ import annotations

from .planner import plan_move

__all__ = ["plan_move"]
