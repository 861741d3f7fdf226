"""The memory tests' fixture: the last error as IPython keeps it."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture
def last_error():
    """Sets sys.last_value / last_traceback like IPython does after a failing cell; restores."""
    saved = {n: getattr(sys, n, None) for n in ("last_type", "last_value", "last_traceback")}

    def set_error(error: BaseException) -> None:
        sys.last_type, sys.last_value = type(error), error
        sys.last_traceback = error.__traceback__

    for name in saved:
        setattr(sys, name, None)
    yield set_error
    for name, value in saved.items():
        setattr(sys, name, value)
