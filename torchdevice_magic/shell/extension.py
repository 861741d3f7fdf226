"""Loading and unloading the extension: ``%load_ext torchdevice_magic`` and ``%unload_ext``.

:func:`load` makes one :class:`~.hooks.DeviceSession` per shell and registers what it adds
(magics, hooks, the exception handler, the config object, the sidebar's comm target);
:func:`unload` takes every one of them away again.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .hooks import SESSION_ATTRIBUTE, DeviceSession, get_session


def load(shell: Any) -> DeviceSession:
    """Register magics, the hooks, the config object and the comm target — once."""
    session = get_session(shell)
    if session is not None:
        return session
    from .comm import SidebarChannel
    from .engine import engine_replies, widgets_render
    from .gather import engines_handler, engines_reachable
    from .magics import DeviceMagics

    session = DeviceSession(shell)
    setattr(shell, SESSION_ATTRIBUTE, session)
    shell.register_magics(DeviceMagics(shell, session))
    shell.events.register("pre_run_cell", session.pre_run_cell)
    shell.events.register("post_run_cell", session.post_run_cell)
    session.install_exception_handler()
    session.app.first_init.start()  # what is initialised already, and the line recorder
    if session.config not in shell.configurables:
        shell.configurables.append(session.config)
    # an ipyparallel engine has no sidebar of its own to announce to
    session.channel = SidebarChannel(session.app, announce=widgets_render(shell))
    # the sidebar's engines section: every ipyparallel engine of this kernel's client
    session.channel.add_handler("gather_engines", engines_handler(session.channel))
    # and whether there are engines to gather at all (the section shows only then)
    session.channel.add_status("engines_reachable", engines_reachable, {"available": False})
    shell.events.register("post_run_cell", session.channel.after_cell)
    session.channel.register()
    session.engine = engine_replies(shell)
    return session


def unload(shell: Any) -> None:
    """Remove every hook, magic, config object and comm target :func:`load` added, and close
    every widget the session showed."""
    session = get_session(shell)
    if session is None:
        return
    from .magics import MAGIC_NAMES

    with contextlib.suppress(ValueError):
        shell.events.unregister("post_run_cell", session.post_run_cell)
    with contextlib.suppress(ValueError):
        shell.events.unregister("pre_run_cell", session.pre_run_cell)
    session.remove_exception_handler()
    session.app.first_init.stop()
    session.app.meta_calls.stop()
    for kind, names in MAGIC_NAMES.items():
        for name in names:
            shell.magics_manager.magics[kind].pop(name, None)
    magics = shell.magics_manager.registry.pop("DeviceMagics", None)
    # IPython's Magics.__init__ appends every magics object to the shell's configurables (for
    # %config); left there, it would keep the session, and through it everything, alive
    if magics is not None and magics in shell.configurables:
        shell.configurables.remove(magics)
    if session.config in shell.configurables:
        shell.configurables.remove(session.config)
    if session.channel is not None:
        with contextlib.suppress(ValueError):
            shell.events.unregister("post_run_cell", session.channel.after_cell)
        session.channel.unregister()
    if session.engine is not None:
        session.engine.remove()
    session.close_widgets()
    delattr(shell, SESSION_ATTRIBUTE)


__all__ = ["get_session", "load", "unload"]
