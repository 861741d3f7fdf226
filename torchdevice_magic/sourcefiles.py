"""THE rule for whose code a source file is: the user's, or a library's.

The user's code is what they can edit: a notebook cell (``<ipython-input-3-...>``, ipykernel's
``/tmp/ipykernel_.../123.py``), code they ``exec``, their scripts and their own package next to
the notebook (an editable install points into it). Everything else is a library's: torch
(wherever it is installed, a source checkout included), any installed package (a
``site-packages`` / ``dist-packages`` folder: transformers, accelerate, IPython), the standard
library (frozen modules included) and this extension. The diagnosis, the trace and the memory
views all ask :func:`code_owner`, so they agree on which frames are the user's.

A leaf: imports nothing of ours; torch and the others are only looked up in ``sys.modules``.
"""

from __future__ import annotations

import contextlib
import enum
import os
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["CodeKind", "CodeOwner", "SourceRoots", "code_owner"]


class CodeKind(enum.Enum):
    USER = "user"
    TORCH = "torch"
    EXTENSION = "extension"  # torchdevice_magic itself
    STDLIB = "stdlib"
    PACKAGE = "package"  # any other installed package


@dataclass(frozen=True)
class CodeOwner:
    """Whose code a file is; ``name`` is the library's top-level package or module
    (``torch``, ``transformers``, ``json``), "" for the user's."""

    kind: CodeKind
    name: str = ""

    @property
    def is_users(self) -> bool:
        return self.kind is CodeKind.USER


USERS = CodeOwner(CodeKind.USER)

#: packages whose directory is read from the imported module, wherever they are installed (a
#: source checkout of torch is no site-packages folder)
KNOWN_PACKAGES = ("torch", "IPython", "ipykernel", "traitlets", "numpy")
_INSTALL_FOLDERS = ("site-packages", "dist-packages")
#: file names of generated code that is a library's, by prefix, and whose it is
_LIBRARY_PSEUDO_FILES = (
    ("<__array_function__", "numpy"),  # numpy < 1.25's dispatch wrappers
    ("<decorator-gen-", "decorator"),  # the wrappers IPython's magics are made with
)


def _folder(path: str) -> str:
    return os.path.normcase(os.path.abspath(path)).rstrip(os.sep) + os.sep


def _variants(path: str) -> set[str]:
    return {_folder(path), _folder(os.path.realpath(path))}


def _first_part(filename: str, root: str) -> str:
    return filename[len(root) :].split(os.sep, 1)[0].removesuffix(".py")


class SourceRoots:
    """The folders that tell library code from the user's: the standard library's, the
    install folders (``purelib`` and the like, besides any ``site-packages`` on the path),
    the directories of known packages by name, and this extension's."""

    def __init__(
        self,
        *,
        stdlib: Iterable[str],
        installed: Iterable[str] = (),
        packages: Mapping[str, str] | None = None,
        extension: str,
    ) -> None:
        self.stdlib = tuple(sorted({v for path in stdlib for v in _variants(path)}))
        self.installed = tuple(sorted({v for path in installed for v in _variants(path)}))
        self.packages = tuple(
            (variant, name)
            for name, path in (packages or {}).items()
            for variant in sorted(_variants(path))
        )
        self.extension = tuple(sorted(_variants(extension)))

    @classmethod
    def of_this_interpreter(cls) -> SourceRoots:
        paths: dict[str, str] = {}
        # a broken sysconfig: the install folders' names still tell
        with contextlib.suppress(Exception):
            paths = sysconfig.get_paths()
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
        stdlib = [paths[k] for k in ("stdlib", "platstdlib") if paths.get(k)]
        stdlib += [os.path.join(prefix, "lib", version) for prefix in prefixes]
        return cls(
            stdlib=stdlib,
            installed=[paths[k] for k in ("purelib", "platlib") if paths.get(k)],
            packages=_imported_package_dirs(),
            extension=os.path.dirname(os.path.abspath(__file__)),
        )

    def owner(self, filename: str) -> CodeOwner:
        """Whose code ``filename`` (a code object's ``co_filename``) is."""
        if filename.startswith("<"):
            return _pseudo_file_owner(filename)
        if not filename:
            return USERS  # compiled from a string, as ``<string>`` is
        path = os.path.normcase(os.path.abspath(filename))
        if path.startswith(self.extension):
            return CodeOwner(CodeKind.EXTENSION, "torchdevice_magic")
        for root, name in self.packages:
            if path.startswith(root):
                return _package(name)
        # installed packages before the standard library: some system Pythons keep
        # site-packages inside it (/usr/lib/python3.11/site-packages)
        parts = path.split(os.sep)
        for index in range(len(parts) - 2, -1, -1):
            if parts[index] in _INSTALL_FOLDERS:
                return _package(parts[index + 1].removesuffix(".py"))
        for root in self.installed:
            if path.startswith(root):
                return _package(_first_part(path, root))
        for root in self.stdlib:
            if path.startswith(root):
                return CodeOwner(CodeKind.STDLIB, _first_part(path, root))
        return USERS


def _package(name: str) -> CodeOwner:
    return CodeOwner(CodeKind.TORCH if name == "torch" else CodeKind.PACKAGE, name)


def _pseudo_file_owner(filename: str) -> CodeOwner:
    # ``<ipython-input-3-...>``, ``<string>``, ``<magic-timeit>``: code the user typed
    if filename.startswith("<frozen "):
        module = filename[len("<frozen ") :].rstrip(">")
        return CodeOwner(CodeKind.STDLIB, module.split(".", 1)[0])
    for prefix, name in _LIBRARY_PSEUDO_FILES:
        if filename.startswith(prefix):
            return CodeOwner(CodeKind.PACKAGE, name)
    return USERS


def _imported_package_dirs() -> dict[str, str]:
    found = {}
    for name in KNOWN_PACKAGES:
        path = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(path, str):
            found[name] = os.path.dirname(path)
    return found


_current: tuple[tuple[str | None, ...], SourceRoots] | None = None


def code_owner(filename: str) -> CodeOwner:
    """Whose code ``filename`` is, in this interpreter. The folders are read once, and again
    when one of the known packages is imported (torch after the extension was loaded)."""
    global _current
    key = tuple(getattr(sys.modules.get(name), "__file__", None) for name in KNOWN_PACKAGES)
    if _current is None or _current[0] != key:
        _current = (key, SourceRoots.of_this_interpreter())
    return _current[1].owner(filename)
