"""Issue 24's figures: the dry run against the real run, on the corpus of real device-error
reports (tests/reports/cases) and on the notebooks' failing cells.

Every cell of a case is first dry-run (``torchdevice_magic.dry_run``, in the shell's namespace
as it is just before the cell), then run for real in the same IPython shell with the
extension loaded, on the simulated accelerator. Per case:

  same culprits   the real run fails with a device error, the dry run of that cell predicted a
                  device error, and it names every culprit the real diagnosis names that the
                  reporter's resolution names too, on the same device
  exact           the dry run's culprits are exactly the real diagnosis' (names and order)
  message         the dry run's error has the real error's type and message, word for word
                  (so the operator and argument it names are the real ones)
  false error     a dry run predicted a device error for a cell whose real run raised none
  untouched       the namespace's objects kept their ids across every dry run
  stopped         the dry run of the failing cell stopped before reaching the error (why)

    python benchmarks/dryrun_reports.py [slug ...] [--verbose]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for _folder in (HERE.parent, HERE):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

import reports  # noqa: E402  (the corpus, its shell runner and its culprit matching)
from _corpus_runs import corpus_main, corpus_shell  # noqa: E402

__all__ = ["DryOutcome", "run_corpus", "table", "totals"]


@dataclass
class DryOutcome:
    slug: str
    negative: bool
    skipped: str = ""
    real_error: bool = False  # the real run failed with a diagnosed device error
    predicted: bool = False  # the dry run of the failing cell predicted a device error
    same: bool = False
    exact: bool = False
    same_message: bool = False
    false_errors: list[str] = field(default_factory=list)  # cells with a predicted-only error
    untouched: bool = True
    stopped: str = ""
    real: list[str] = field(default_factory=list)
    dry: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _culprit_names(diagnosis: Any) -> list[str]:
    return [c.alias or c.name for c in diagnosis.culprits] if diagnosis is not None else []


def _identities(namespace: dict[str, Any]) -> dict[str, int]:
    return {name: id(value) for name, value in namespace.items() if not name.startswith("_")}


class DryRunner(reports.Runner):
    """The reports scorer's shell runner, dry-running each cell before running it."""

    def dry_then_run(self, case: reports.Case) -> DryOutcome:
        from torchdevice_magic import dry_run

        outcome = DryOutcome(case.slug, negative=case.negative is not None)
        missing = [c for c in case.requires if not self.have.get(c)]
        if missing:
            outcome.skipped = ", ".join(missing)
            return outcome
        session = self.fresh()
        shell = self.shell
        for cell in case.cells:
            before = _identities(shell.user_ns)
            report = dry_run(cell, shell.user_ns, shell=shell)
            outcome.seconds += report.seconds
            outcome.untouched &= _identities(shell.user_ns) == before
            result, _, _ = self.run_cell(cell)
            error = result.error_in_exec or result.error_before_exec
            diagnosis = session.app.diagnose(error, cell) if error is not None else None
            if diagnosis is None:
                if report.device_error:
                    outcome.false_errors.append(report.diagnosis.summary())
                if error is not None:
                    return outcome
                continue
            outcome.real_error = True
            outcome.predicted = report.device_error
            outcome.real = _culprit_names(diagnosis)
            outcome.dry = _culprit_names(report.diagnosis)
            outcome.stopped = report.stopped.text() if report.stopped is not None else ""
            if report.device_error:
                outcome.same = self._same_culprits(case, diagnosis, report.diagnosis)
                outcome.exact = outcome.real == outcome.dry
                outcome.same_message = type(report.error) is type(error) and str(
                    report.error
                ) == str(error)
            return outcome
        return outcome

    def _same_culprits(self, case: reports.Case, real: Any, dry: Any) -> bool:
        wanted = case.expected.culprits if case.expected is not None else ()
        for culprit in wanted:
            where = self.device if culprit.device == "DEV" else culprit.device
            named = [
                c
                for c in real.culprits
                if reports._names(c, culprit.names()) and reports._on(c.devices, where)
            ]
            if named and not any(
                reports._names(c, culprit.names()) and reports._on(c.devices, where)
                for c in dry.culprits
            ):
                return False
        real_names = set(_culprit_names(real))
        return bool(real_names & set(_culprit_names(dry))) or not real_names


def totals(outcomes: list[DryOutcome]) -> dict[str, int]:
    failing = [o for o in outcomes if o.real_error and not o.skipped]
    return {
        "cases": sum(1 for o in outcomes if not o.skipped),
        "real_device_errors": len(failing),
        "predicted": sum(o.predicted for o in failing),
        "same_culprits": sum(o.same for o in failing),
        "exact": sum(o.exact for o in failing),
        "same_message": sum(o.same_message for o in failing),
        "false_errors": sum(bool(o.false_errors) for o in outcomes),
        "touched": sum(not o.untouched for o in outcomes),
    }


def table(outcomes: list[DryOutcome]) -> str:
    rows = [f"{'case':38} {'real':5} {'dry':5} {'same':5} {'exact':5} {'msg':5} notes"]
    for o in outcomes:
        if o.skipped:
            rows.append(f"{o.slug:38} skipped: {o.skipped}")
            continue
        notes = [f"FALSE ERROR: {error}" for error in o.false_errors[:1]]
        notes += [] if o.untouched else ["TOUCHED the namespace"]
        notes += [o.stopped] if o.real_error and not o.predicted else []
        rows.append(
            f"{o.slug:38} {_mark(o.real_error):5} {_mark(o.predicted):5} {_mark(o.same):5} "
            f"{_mark(o.exact):5} {_mark(o.same_message):5} {'; '.join(notes)}"
        )
    t = totals(outcomes)
    n = max(t["real_device_errors"], 1)
    rows.append(
        f"\n{t['cases']} cases, {t['real_device_errors']} fail with a device error for real\n"
        f"predicted {t['predicted']}/{t['real_device_errors']}   same culprits "
        f"{t['same_culprits']}/{t['real_device_errors']} ({t['same_culprits'] / n:.0%})   "
        f"exactly the same {t['exact']}   same message {t['same_message']}   "
        f"false errors {t['false_errors']}   "
        f"namespace touched {t['touched']}"
    )
    return "\n".join(rows)


def _mark(value: bool) -> str:
    return "yes" if value else "no"


def run_corpus(slugs: list[str] | None = None) -> list[DryOutcome]:
    with corpus_shell(DryRunner) as runner:
        return [runner.dry_then_run(case) for case in reports.load_cases(slugs)]


def _inexact_cases(outcomes: list[DryOutcome]) -> str:
    return "\n".join(
        f"- {o.slug}: real {o.real} / dry {o.dry} {o.stopped}"
        for o in outcomes
        if o.real_error and not o.exact
    )


def main() -> None:
    corpus_main(
        __doc__.splitlines()[0], run_corpus, table, _inexact_cases, "culprits of every failing case"
    )


if __name__ == "__main__":
    main()
