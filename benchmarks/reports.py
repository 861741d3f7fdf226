"""Issue 22's figures: the diagnosis and its fixes on a corpus of real device-error reports.

Each case of ``tests/reports/cases/`` (one real report from a public tracker or forum, cited in
its docstring) runs cell by cell in an in-process IPython shell with the extension loaded,
on the simulated accelerator, exactly as the reporter typed it. Per case:

  detected       a diagnosis was shown after the failing cell (published by the extension)
  culprits       every culprit of the reporter's resolution is named, on the device it is on
  safe fix       the fix applied as a user would -- its lines typed above the failing line (or
                 at the line/class/function they name), the edited cells re-run from the first
                 one edited -- and, where the diagnosis offers it, the one-click button pressed
                 and the failing cell re-run: every way must run with no error and the case's
                 check must hold
  false positive a diagnosis shown for a negative (no device error, or a mix torch allows)
  crash          our code raised or logged an error

Cases that need something the simulated accelerator cannot do yet (``REQUIRES``) are skipped,
never counted as passed.

    python benchmarks/reports.py [slug ...] [--verbose]
"""

from __future__ import annotations

import atexit
import importlib.util
import logging
import shutil
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "tests" / "reports"
for _folder in (ROOT, Path(__file__).resolve().parent):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

from _corpus_runs import corpus_main, corpus_shell  # noqa: E402
from _reports_fixes import (  # noqa: E402
    CellFrame,
    FixNotApplicable,
    apply_fix_lines,
    cell_frames,
)

__all__ = ["CellFrame", "FixNotApplicable", "apply_fix_lines", "run_corpus", "table", "totals"]


# --------------------------------------------------------------------------------------------
# The corpus
# --------------------------------------------------------------------------------------------


@dataclass
class Case:
    slug: str
    title: str
    cells: list[str]
    expected: Any = None  # case.Expected
    negative: Any = None  # case.Negative
    requires: tuple[str, ...] = ()


def _import_file(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def case_schema() -> ModuleType:
    """tests/reports/case.py (the dataclasses a case is written with), imported once; the
    cases import it by its plain name (``from case import Culprit, Expected``)."""
    return sys.modules.get("case") or _import_file("case", REPORTS / "case.py")


def load_cases(slugs: list[str] | None = None) -> list[Case]:
    schema = case_schema()
    cases = []
    for path in sorted((REPORTS / "cases").glob("*.py")):
        if slugs and path.stem not in slugs:
            continue
        module = _import_file(f"reports_case_{path.stem}", path)
        doc = (module.__doc__ or "").strip()
        expected = getattr(module, "EXPECTED", None)
        negative = getattr(module, "NEGATIVE", None)
        if (expected is None) == (negative is None):
            raise ValueError(f"{path.name}: define exactly one of EXPECTED and NEGATIVE")
        requires = tuple(getattr(module, "REQUIRES", ()))
        unknown = set(requires) - set(schema.CAPABILITIES)
        if unknown or not doc:
            raise ValueError(f"{path.name}: unknown REQUIRES {unknown} or no docstring")
        cells = [textwrap.dedent(cell).strip("\n") for cell in module.CELLS]
        cases.append(Case(path.stem, doc.splitlines()[0], cells, expected, negative, requires))
    return cases


_LIBRARIES: list[Path] = []


def install_libraries() -> Path:
    """Copy tests/reports/libs into a temporary ``site-packages`` folder on sys.path: the
    reduced libraries' frames are then library frames, as the real ones were for reporters."""
    if not _LIBRARIES:
        folder = Path(tempfile.mkdtemp(prefix="reports-")) / "site-packages"
        shutil.copytree(REPORTS / "libs", folder, ignore=shutil.ignore_patterns("__pycache__"))
        atexit.register(shutil.rmtree, folder.parent, ignore_errors=True)
        sys.path.insert(0, str(folder))
        _LIBRARIES.append(folder)
    return _LIBRARIES[0]


def capabilities(device: str) -> dict[str, bool]:
    """What the simulated accelerator does as CUDA does (see case.CAPABILITIES)."""
    import torch

    found = {}
    x = torch.ones(3, 2, device=device)
    try:
        x[torch.tensor([0, 1])]
        found["cpu_indices"] = True
    except RuntimeError:
        found["cpu_indices"] = False
    try:
        torch.nn.LSTM(2, 2).to(device)(torch.ones(1, 1, 2, device=device))
        found["rnn_kernels"] = True
    except (RuntimeError, NotImplementedError):
        found["rnn_kernels"] = False
    conv = torch.nn.Conv1d(1, 1, 1).to(device)
    try:
        conv(torch.ones(1, 1, 2))
        found["conv_type_message"] = False
    except RuntimeError as error:
        found["conv_type_message"] = "Input type" in str(error)
    return found


# --------------------------------------------------------------------------------------------
# One case
# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    slug: str
    negative: bool
    skipped: str = ""
    detected: bool = False
    named: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    first: bool = False  # the reporter's first culprit is the diagnosis' first one
    typed: str = ""  # "ok" or why the typed fix failed
    button: str = ""  # "ok", "not offered", or why it failed
    false_positive: bool = False
    crashes: list[str] = field(default_factory=list)
    said: str = ""  # the diagnosis' first line and fix, for the failure list
    wanted: str = ""  # the reporter's resolution

    @property
    def culprits_ok(self) -> bool:
        return self.detected and not self.missed

    @property
    def safe(self) -> bool:
        return self.typed == "ok" and self.button in ("ok", "not offered")


class _Errors(logging.Handler):
    """Errors our package logs (a hook or the diagnosis failing): counted as crashes."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


class Runner:
    """Runs cases in one IPython shell with the extension loaded, on ``device``."""

    def __init__(self, shell: Any, device: str) -> None:
        self.shell = shell
        self.device = device
        self.have = capabilities(device)
        install_libraries()

    # -- the shell ---------------------------------------------------------------------------
    def fresh(self) -> Any:
        shell = self.shell
        if "torchdevice_magic" in shell.extension_manager.loaded:
            shell.run_line_magic("unload_ext", "torchdevice_magic")
        for name in list(shell.user_ns):
            if not name.startswith("_") and name not in {
                "In",
                "Out",
                "exit",
                "quit",
                "get_ipython",
            }:
                del shell.user_ns[name]
        shell.user_ns["Out"].clear()
        shell.run_line_magic("load_ext", "torchdevice_magic")
        shell.user_ns["DEV"] = self.device
        from torchdevice_magic.shell import get_session

        return get_session(shell)

    def run_cell(self, source: str) -> tuple[Any, list[str], int]:
        from IPython.utils.capture import capture_output

        number = self.shell.execution_count
        with capture_output() as captured:
            result = self.shell.run_cell(source, store_history=True)
        shown = [o.data.get("text/plain", "") for o in captured.outputs]
        return result, shown, number

    def run_until_error(self, cells: list[str]) -> tuple[int, Any, list[str], dict[int, int]]:
        """Run the cells; (index of the failing cell or -1, its error, what was shown after
        it, cell execution numbers by index)."""
        numbers: dict[int, int] = {}
        for index, cell in enumerate(cells):
            result, shown, numbers[index] = self.run_cell(cell)
            if result.error_in_exec is not None or result.error_before_exec is not None:
                return index, result.error_in_exec or result.error_before_exec, shown, numbers
        return -1, None, [], numbers

    def rerun(self, cells: list[str], start: int, check: str) -> str:
        """Run cells[start:]; "ok" when none fails and ``check`` holds, else why not."""
        for cell in cells[start:]:
            result, _, _ = self.run_cell(cell)
            error = result.error_in_exec or result.error_before_exec
            if error is not None:
                return f"{type(error).__name__}: {str(error)[:160]}"
        try:
            held = eval(check, self.shell.user_ns)  # the case's own expression
        except Exception as error:
            return f"check raised {type(error).__name__}: {error}"
        return "ok" if held else f"check failed: {check}"

    # -- scoring -----------------------------------------------------------------------------
    def score(self, case: Case) -> Outcome:
        outcome = Outcome(case.slug, negative=case.negative is not None)
        missing = [c for c in case.requires if not self.have.get(c)]
        if missing:
            schema = case_schema()
            outcome.skipped = "; ".join(schema.CAPABILITIES[c] for c in missing)
            return outcome
        errors = _Errors()
        logger = logging.getLogger("torchdevice_magic")
        logger.addHandler(errors)
        try:
            if case.negative is not None:
                self._score_negative(case, outcome)
            else:
                self._score_positive(case, outcome)
        except Exception as error:  # the harness drove our code and it raised
            outcome.crashes.append(f"{type(error).__name__}: {error}")
        finally:
            logger.removeHandler(errors)
        outcome.crashes += errors.records
        return outcome

    def _score_negative(self, case: Case, outcome: Outcome) -> None:
        self.fresh()
        for cell in case.cells:
            result, shown, _ = self.run_cell(cell)
            error = result.error_in_exec
            if error is not None:
                outcome.false_positive = bool(shown)
                if outcome.false_positive:
                    outcome.said = shown[0].splitlines()[0]
                if case.negative.raises != type(error).__name__:
                    outcome.said = outcome.said or f"raised {type(error).__name__}: {error}"
                return
        if case.negative.raises is not None:
            outcome.said = f"expected {case.negative.raises}, nothing raised"

    def _score_positive(self, case: Case, outcome: Outcome) -> None:
        expected = case.expected
        outcome.wanted = expected.fix
        session = self.fresh()
        failing, error, shown, numbers = self.run_until_error(case.cells)
        if failing < 0:
            outcome.said = "the cells raised no error"
            return
        diagnosis = session.app.diagnose(error, case.cells[failing])
        outcome.detected = diagnosis is not None and bool(shown)
        if diagnosis is None:
            outcome.said = f"no diagnosis of {type(error).__name__}: {str(error)[:120]}"
            outcome.missed = [c.name for c in expected.culprits]
            outcome.typed = outcome.button = "no diagnosis"
            return
        outcome.said = f"{diagnosis.summary()} | " + " / ".join(diagnosis.fix_text_lines())
        for culprit in expected.culprits:
            where = self.device if culprit.device == "DEV" else culprit.device
            if any(
                _names(c, culprit.names()) and _on(c.devices, where) for c in diagnosis.culprits
            ):
                outcome.named.append(culprit.name)
            else:
                outcome.missed.append(culprit.name)
        lead = expected.culprits[0]
        outcome.first = bool(diagnosis.culprits) and _names(diagnosis.culprits[0], lead.names())
        outcome.typed = self._typed_fix(case, diagnosis, error, failing, numbers)
        # the button is offered only with a move action: only then is the case run again for it
        outcome.button = (
            "not offered" if diagnosis.action is None else self._button_fix(case, failing)
        )

    def _typed_fix(
        self, case: Case, diagnosis: Any, error: Any, failing: int, numbers: dict[int, int]
    ) -> str:
        if not diagnosis.safe or not diagnosis.fix_lines:
            return f"no fix: {diagnosis.why_no_fix or diagnosis.fix}"
        frames = cell_frames(error, numbers)
        try:
            cells, first = apply_fix_lines(case.cells, failing, frames, diagnosis.fix_lines)
        except FixNotApplicable as why:
            return f"cannot apply: {why}"
        return self.rerun(cells, first, case.expected.check)

    def _button_fix(self, case: Case, failing: int) -> str:
        session = self.fresh()
        index, error, _, _ = self.run_until_error(case.cells)
        if index != failing:
            return "the cells failed elsewhere on a second run"
        diagnosis = session.app.diagnose(error, case.cells[failing])
        if diagnosis is None or diagnosis.action is None:
            return "not offered"
        from torchdevice_magic.shell.fixbutton import fix_button

        box = fix_button(session.app, diagnosis.action, None, session.request_rerun)
        if box is None:
            return (
                f"refused: {session.app.can_move(diagnosis.action.device, diagnosis.action.names)}"
            )
        button, status = box.children
        button.click()
        if button.description != "Undo the move" and not button.disabled:
            return f"the move failed: {status.value}"
        return self.rerun(case.cells, failing, case.expected.check)


def _names(culprit: Any, wanted: tuple[str, ...]) -> bool:
    return culprit.name in wanted or (culprit.alias is not None and culprit.alias in wanted)


def _on(devices: tuple[str, ...], where: str) -> bool:
    def norm(device: str) -> str:
        kind, _, index = device.partition(":")
        return f"{kind}:{index or 0}" if kind not in ("cpu", "meta") else kind

    return norm(where) in {norm(d) for d in devices}


# --------------------------------------------------------------------------------------------
# Figures and the table
# --------------------------------------------------------------------------------------------


def totals(outcomes: list[Outcome]) -> dict[str, int]:
    positives = [o for o in outcomes if not o.negative and not o.skipped]
    negatives = [o for o in outcomes if o.negative and not o.skipped]
    return {
        "positives": len(positives),
        "negatives": len(negatives),
        "skipped": sum(1 for o in outcomes if o.skipped),
        "detected": sum(o.detected for o in positives),
        "culprits": sum(o.culprits_ok for o in positives),
        "culprit_first": sum(o.first for o in positives),
        "safe_fixes": sum(o.safe for o in positives),
        "false_positives": sum(o.false_positive for o in negatives),
        "crashes": sum(bool(o.crashes) for o in outcomes),
    }


def table(outcomes: list[Outcome]) -> str:
    def mark(value: bool) -> str:
        return "yes" if value else "NO"

    rows = [
        f"{'case':38} {'detected':8} {'culprits':9} {'first':5} {'typed fix':9} {'button':12} crash"
    ]
    for o in outcomes:
        if o.skipped:
            rows.append(f"{o.slug:38} skipped: {o.skipped}")
        elif o.negative:
            fp = "FALSE POSITIVE" if o.false_positive else "no diagnosis (right)"
            rows.append(f"{o.slug:38} negative: {fp} {'CRASH' if o.crashes else ''}")
        else:
            culprits = f"{len(o.named)}/{len(o.named) + len(o.missed)}"
            rows.append(
                f"{o.slug:38} {mark(o.detected):8} {culprits:9} {mark(o.first):5} "
                f"{mark(o.typed == 'ok'):9} {o.button[:12]:12} {'CRASH' if o.crashes else ''}"
            )
    t = totals(outcomes)
    p = max(t["positives"], 1)
    rows.append(
        f"\n{t['positives']} device-error cases, {t['negatives']} negatives, {t['skipped']} "
        f"skipped\ndetected {t['detected']}/{t['positives']} ({t['detected'] / p:.0%})   "
        f"culprits {t['culprits']}/{t['positives']} ({t['culprits'] / p:.0%}; listed first "
        f"{t['culprit_first']})   "
        f"safe fixes {t['safe_fixes']}/{t['positives']} ({t['safe_fixes'] / p:.0%})   "
        f"false positives {t['false_positives']}/{t['negatives']}   crashes {t['crashes']}"
    )
    return "\n".join(rows)


def failures(outcomes: list[Outcome]) -> str:
    """Each case that is not fully right: what the diagnosis said vs the reporter's fix."""
    out = []
    for o in outcomes:
        if o.skipped or (o.negative and not o.false_positive and not o.crashes):
            continue
        if not o.negative and o.culprits_ok and o.safe and not o.crashes:
            continue
        problems = []
        if o.missed:
            problems.append(f"missed {', '.join(o.missed)}")
        if o.typed and o.typed != "ok":
            problems.append(f"typed fix: {o.typed}")
        if o.button not in ("ok", "not offered", ""):
            problems.append(f"button: {o.button}")
        if o.crashes:
            problems.append(f"crash: {o.crashes[0]}")
        if o.false_positive:
            problems.append("false positive")
        out.append(f"- {o.slug}: {'; '.join(problems)}\n    said: {o.said}\n    wanted: {o.wanted}")
    return "\n".join(out)


def run_corpus(slugs: list[str] | None = None) -> list[Outcome]:
    """Every case on the simulated accelerator in IPython's test shell (registers both)."""
    with corpus_shell(Runner) as runner:
        return [runner.score(case) for case in load_cases(slugs)]


def _failing_cases(outcomes: list[Outcome]) -> str:
    header = "\nFailing cases (what the diagnosis said vs the reporter's resolution):"
    return f"{header}\n{failures(outcomes)}"


def main() -> None:
    corpus_main(
        __doc__.splitlines()[0], run_corpus, table, _failing_cases, "list every failing case"
    )


if __name__ == "__main__":
    main()
