"""The report corpus (tests/reports/cases) run cell by cell on the engines as ``%%px`` runs it:
every device error is explained there with the culprits the reporter's resolution moved, as
in a plain cell (benchmarks/reports.py scores the plain cells with the same rules), the engines
named."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

from torchdevice_magic.diagnose import engine_diagnoses

pytestmark = pytest.mark.engines

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "simdev:0"


def scorer() -> Any:
    module = sys.modules.get("reports_scorer")
    if module is None:
        spec = importlib.util.spec_from_file_location(
            "reports_scorer", ROOT / "benchmarks" / "reports.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["reports_scorer"] = module
        spec.loader.exec_module(module)
    return module


def named(culprit: Any, wanted: tuple[str, ...]) -> bool:
    return culprit.name in wanted or (culprit.alias is not None and culprit.alias in wanted)


def on(devices: tuple[str, ...], where: str) -> bool:
    def canonical(device: str) -> str:
        kind, _, index = device.partition(":")
        return f"{kind}:{index or 0}" if kind not in ("cpu", "meta") else kind

    return canonical(where) in {canonical(d) for d in devices}


def run_on_engines(engines: Any, cells: list[str]) -> BaseException | None:
    """The cells, one ``%%px``-style execute each, until one fails on the engines."""
    for cell in cells:
        result = engines.execute(cell, silent=False, block=False)
        try:
            result.get(timeout=120)
        except Exception as error:
            return error
    return None


def test_every_corpus_error_names_the_reporters_culprits_on_the_engines(engines) -> None:
    reports = scorer()
    libraries = reports.install_libraries()  # the engines run on this machine: same folder
    engines.execute(f"import sys\nsys.path.insert(0, {str(libraries)!r})")
    engines.execute("tdm_before = set(globals())")
    missed = []
    positives = [case for case in reports.load_cases() if case.expected is not None]
    for case in positives:
        engines.push({"DEV": DEVICE})
        error = run_on_engines(engines, case.cells)
        found = engine_diagnoses(error) if error is not None else None
        engines.execute(
            "for _n in set(globals()) - tdm_before - {'tdm_before'}: globals().pop(_n, None)"
        )
        if found is None:
            missed.append(f"{case.slug}: {'no diagnosis' if error else 'no error'}")
            continue
        (finding,) = found.findings  # both engines found the same
        assert finding.engines == (0, 1), case.slug
        for culprit in case.expected.culprits:
            where = DEVICE if culprit.device == "DEV" else culprit.device
            if not any(
                named(c, culprit.names()) and on(c.devices, where)
                for c in finding.diagnosis.culprits
            ):
                missed.append(f"{case.slug}: {culprit.name} ({finding.diagnosis.summary()})")
    engines.execute("del tdm_before\nsys.path.remove(sys.path[0])")
    assert missed == [], f"{len(missed)} of {len(positives)} cases:\n" + "\n".join(missed)
