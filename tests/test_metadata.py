"""One version, one license: the package metadata, the sidebar's package.json and the code agree."""

from __future__ import annotations

import json
from importlib.metadata import metadata
from pathlib import Path

import torchdevice_magic

ROOT = Path(__file__).resolve().parents[1]


def test_version_is_single_sourced() -> None:
    assert metadata("torchdevice_magic")["Version"] == torchdevice_magic.__version__
    sidebar = json.loads((ROOT / "labextension" / "package.json").read_text())
    assert sidebar["version"] == torchdevice_magic.__version__


def test_license_file_is_the_declared_bsd_3_clause() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License")
    assert "Neither the name of the copyright holder" in text
    assert "BSD-3-Clause" in (ROOT / "pyproject.toml").read_text()


def test_changelog_names_the_released_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    assert f"## [{torchdevice_magic.__version__}]" in changelog
