"""Shared test helpers."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch

_LAZY_STATE: list[str] = []


@pytest.fixture
def lazy_backend() -> str:
    """torch's TorchScript lazy backend: a second device that keeps data on a CPU-only machine
    (undo round trips). It can be initialised once per process, so every test module shares
    this one initialisation. (A fixture, not an import: two conftest.py files are collected.)"""
    if not _LAZY_STATE:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module("torch._lazy.ts_backend").init()
            torch.ones(1).to("lazy").cpu()
            _LAZY_STATE.append("")
        except Exception as error:  # depends on the torch build
            _LAZY_STATE.append(f"lazy backend unavailable: {error}")
    if _LAZY_STATE[0]:
        pytest.skip(_LAZY_STATE[0])
    return "lazy"
