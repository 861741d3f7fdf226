"""The IPython and Jupyter adapters: loading and unloading the extension, its configuration,
the post-execute hook, the magics, the sidebar's comm, the widget table and the fix button.

Only this package imports IPython, ipywidgets, traitlets or comm; the core below it never does.
"""

from .session import DeviceSession, get_session, load, unload

__all__ = ["DeviceSession", "get_session", "load", "unload"]
