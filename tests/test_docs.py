"""The docs tell the truth where that is cheap to check: every ``%devices`` / ``%%devicecheck``
option they mention exists in the magic's argument parser, every config name in the README's
table is a trait of TorchDeviceMagic (and every trait is in the table), and the help texts say
what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from torchdevice_magic.shell.config import TorchDeviceMagic
from torchdevice_magic.shell.magics import DeviceMagics

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted(
    p for p in (ROOT / "docs").glob("*.md") if p.name not in {"benchmarks.md", "architecture.md"}
)


def _options(magic) -> set[str]:
    parser = magic.parser
    return {s for action in parser._actions for s in action.option_strings}


def _mentioned(text: str, magic: str) -> set[str]:
    """Options written after ``%devices`` / ``%%devicecheck`` on the same line, up to the end of
    that code span or line (``[-d DEVICE]`` usage brackets included)."""
    found: set[str] = set()
    for match in re.finditer(re.escape(magic) + r"\b([^`\n]*)", text):
        found.update(re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", match.group(1)))
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_magic_option_the_docs_mention_exists(path: Path) -> None:
    text = path.read_text()
    for magic, func in (
        ("%%devicecheck", DeviceMagics.devicecheck),
        ("%devices", DeviceMagics.devices),
    ):
        # "%%devicecheck" also contains "%devicecheck", never "%devices": no overlap
        mentioned = _mentioned(text, magic)
        unknown = mentioned - _options(func)
        assert not unknown, f"{path.name}: {magic} has no option {sorted(unknown)}"


def test_the_checker_finds_options() -> None:
    # the regex itself: it must see the options of a usage line and of inline code
    assert _mentioned("`%devices --holders [-o]` and %devices --release N", "%devices") == {
        "--holders",
        "-o",
        "--release",
    }
    assert {"-d", "--trace"} <= _mentioned("%%devicecheck [-d DEVICE] [--trace]", "%%devicecheck")
    assert "--nope" not in _options(DeviceMagics.devices)


def _readme_config_table() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("### Config", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \|", section, flags=re.M)


def test_readme_config_table_is_exactly_the_traits() -> None:
    names = _readme_config_table()
    traits = set(TorchDeviceMagic.class_traits(config=True))
    assert names, "README lost its config table"
    assert set(names) - traits == set(), "README names config that does not exist"
    assert traits - set(names) == set(), "a config trait is missing from README's table"


def test_readme_config_defaults_match() -> None:
    text = (ROOT / "README.md").read_text()
    traits = TorchDeviceMagic.class_traits(config=True)
    for name, default in re.findall(r"^\| `(\w+)` \| `([^`]*)` \|", text, flags=re.M):
        assert repr(traits[name].default_value) == default.replace('""', "''"), name


def test_help_texts_say_what_the_code_does() -> None:
    # the diagnosis is shown above the (shortened) traceback, not under it
    assert "above the traceback" in TorchDeviceMagic.class_traits()["auto_diagnose"].help
    # -d's default: the configured default_device, else the fix follows the model (the best
    # available device is not used as a default, see magics.devicecheck)
    device_help = next(
        a.help for a in DeviceMagics.devicecheck.parser._actions if "--device" in a.option_strings
    )
    assert "best available" not in device_help and "default_device" in device_help
