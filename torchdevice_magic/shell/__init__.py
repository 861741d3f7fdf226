"""The IPython and Jupyter adapters over the controller (:mod:`torchdevice_magic.app`):
loading and unloading the extension, its configuration, the post-execute hook, the magics,
the sidebar's comm, the widget table and the fix button.

Only this package imports IPython, ipywidgets, traitlets or comm; nothing below it does.
"""

from .extension import get_session, load, unload
from .hooks import DeviceSession

__all__ = ["DeviceSession", "get_session", "load", "unload"]
