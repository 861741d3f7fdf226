"""Whose code a file is: the one rule the diagnosis, the trace and the memory views share.

The table holds the paths a user's machine really has: a project venv's site-packages, a
pyenv standard library, a Debian system Python, conda, a user site, torch built from source,
an editable install of the user's own package, and the names IPython and ipykernel give cells.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from torchdevice_magic import sourcefiles
from torchdevice_magic.sourcefiles import CodeKind, CodeOwner, SourceRoots, code_owner

USER, TORCH, STDLIB = CodeKind.USER, CodeKind.TORCH, CodeKind.STDLIB
PACKAGE, EXTENSION = CodeKind.PACKAGE, CodeKind.EXTENSION

PYENV = "/home/ana/.pyenv/versions/3.11.9/lib/python3.11"
VENV_SITE = "/home/ana/proj/.venv/lib/python3.11/site-packages"

#: a project venv made from a pyenv Python, with torch built from source in ~/src/pytorch
ROOTS = SourceRoots(
    stdlib=[PYENV, "/home/ana/proj/.venv/lib/python3.11"],
    installed=[VENV_SITE, "/opt/vendored/pylibs"],
    packages={"torch": "/home/ana/src/pytorch/torch", "IPython": f"{VENV_SITE}/IPython"},
    extension=f"{VENV_SITE}/torchdevice_magic",
)

CASES = [
    # the user's: cells, exec'd code, their files and their own package (editable install)
    ("<ipython-input-3-5d7ad2b1e4c7>", USER, ""),
    ("/tmp/ipykernel_12345/3186354231.py", USER, ""),
    ("<string>", USER, ""),
    ("<magic-timeit>", USER, ""),
    ("<python-input-0>", USER, ""),
    ("", USER, ""),
    ("/home/ana/proj/train.py", USER, ""),
    ("/home/ana/proj/src/mymodels/encoder.py", USER, ""),
    ("/home/ana/proj/notebooks/helpers.py", USER, ""),
    # torch, wherever it is: a source checkout, a venv, a conda env, a system Python
    ("/home/ana/src/pytorch/torch/nn/modules/module.py", TORCH, "torch"),
    (f"{VENV_SITE}/torch/nn/functional.py", TORCH, "torch"),
    ("/opt/conda/lib/python3.11/site-packages/torch/_tensor.py", TORCH, "torch"),
    # installed packages: named after their top-level package or module
    (f"{VENV_SITE}/transformers/models/gpt2/modeling_gpt2.py", PACKAGE, "transformers"),
    (f"{VENV_SITE}/accelerate/hooks.py", PACKAGE, "accelerate"),
    (f"{VENV_SITE}/IPython/core/interactiveshell.py", PACKAGE, "IPython"),
    (f"{VENV_SITE}/six.py", PACKAGE, "six"),
    ("/usr/lib/python3/dist-packages/numpy/core/numeric.py", PACKAGE, "numpy"),
    ("/usr/local/lib/python3.11/dist-packages/ipykernel/ipkernel.py", PACKAGE, "ipykernel"),
    ("/home/ana/.local/lib/python3.11/site-packages/einops/einops.py", PACKAGE, "einops"),
    ("/usr/lib/python3.11/site-packages/tqdm/std.py", PACKAGE, "tqdm"),  # inside the stdlib
    ("/opt/vendored/pylibs/peft/tuners/lora.py", PACKAGE, "peft"),  # an install folder by name
    ("<__array_function__ internals>", PACKAGE, "numpy"),
    ("<decorator-gen-123>", PACKAGE, "decorator"),
    # the standard library, frozen modules included
    (f"{PYENV}/json/decoder.py", STDLIB, "json"),
    (f"{PYENV}/contextlib.py", STDLIB, "contextlib"),
    ("<frozen runpy>", STDLIB, "runpy"),
    ("<frozen importlib._bootstrap>", STDLIB, "importlib"),
    # this extension, even where it is installed among the others
    (f"{VENV_SITE}/torchdevice_magic/trace/recorder.py", EXTENSION, "torchdevice_magic"),
]


@pytest.mark.parametrize(("filename", "kind", "name"), CASES)
def test_whose_code_each_file_is(filename: str, kind: CodeKind, name: str) -> None:
    assert ROOTS.owner(filename) == CodeOwner(kind, name)


def test_a_folder_is_not_a_prefix_of_its_namesakes() -> None:
    """torch's folder does not claim ``torchvision`` beside it, nor the stdlib ``python3.11x``."""
    assert ROOTS.owner("/home/ana/src/pytorch/torchvision/ops.py").is_users
    assert ROOTS.owner("/home/ana/.pyenv/versions/3.11.9/lib/python3.11x/mine.py").is_users


def test_this_interpreters_own_files() -> None:
    import IPython
    import torch

    assert code_owner(torch.nn.__file__) == CodeOwner(TORCH, "torch")
    assert code_owner(json.__file__) == CodeOwner(STDLIB, "json")
    assert code_owner(IPython.__file__) == CodeOwner(PACKAGE, "IPython")
    assert code_owner(sourcefiles.__file__).kind is EXTENSION
    assert code_owner(__file__).is_users  # the tests are code of the project's own


def test_a_package_imported_later_from_a_folder_of_its_own_is_known(tmp_path, monkeypatch) -> None:
    """The folders are read again when a known package arrives (torch from a source checkout,
    after the extension classified files without it)."""
    checkout = tmp_path / "pytorch" / "torch"
    filename = str(checkout / "nn" / "modules" / "module.py")
    monkeypatch.delitem(sys.modules, "torch")
    assert code_owner(filename).is_users
    fake_torch = type(sys)("torch")
    fake_torch.__file__ = os.path.join(checkout, "__init__.py")
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    assert code_owner(filename) == CodeOwner(TORCH, "torch")
