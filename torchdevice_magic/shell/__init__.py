"""The IPython and Jupyter adapters over the controller (:mod:`torchdevice_magic.app`):
loading and unloading the extension, its configuration, the post-execute hook, the magics,
the sidebar's comm, the widget table and the fix button; the ipyparallel client side
(:mod:`.gather`: every engine's devices in one table).

Only this package imports IPython, ipywidgets, traitlets or comm; nothing below it does.
"""

from .extension import get_session, load, unload
from .gather import engines_frame
from .hooks import DeviceSession

__all__ = ["DeviceSession", "engines_frame", "get_session", "load", "unload"]
