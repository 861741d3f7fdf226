"""What both scorers of the report corpus do around their own scoring (benchmarks/reports.py
scores the diagnosis and its fixes, benchmarks/dryrun_reports.py the dry run against the real
run): a runner on IPython's test shell and the simulated accelerator, the shell left as found
afterwards, and the command line ``[slug ...] [--verbose]``."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

__all__ = ["corpus_main", "corpus_shell"]


class CorpusRunner(Protocol):
    """What the shared scaffolding needs of a scorer's runner."""

    shell: Any

    def fresh(self) -> Any: ...


RunnerT = TypeVar("RunnerT", bound=CorpusRunner)
OutcomeT = TypeVar("OutcomeT")


@contextmanager
def corpus_shell(make_runner: Callable[[Any, str], RunnerT]) -> Iterator[RunnerT]:
    """``make_runner(shell, device)`` on IPython's test shell and the first simulated device
    (this registers both, once per process). Afterwards the shell is left as the tests' fixture
    expects it: no case's names, no ``DEV``, the extension unloaded."""
    from IPython.testing.globalipapp import get_ipython

    from torchdevice_magic.testing import simulated_accelerator

    runner = make_runner(get_ipython(), f"{simulated_accelerator()}:0")
    try:
        yield runner
    finally:
        runner.fresh()
        runner.shell.user_ns.pop("DEV", None)
        runner.shell.run_line_magic("unload_ext", "torchdevice_magic")


def corpus_main(
    description: str,
    run_corpus: Callable[[list[str] | None], list[OutcomeT]],
    table: Callable[[list[OutcomeT]], str],
    details: Callable[[list[OutcomeT]], str],
    verbose_help: str,
) -> None:
    """The command line: score the cases named (all without one), print the table, and with
    ``--verbose`` the ``details`` (nothing when they are empty)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("slugs", nargs="*", help="only these cases")
    parser.add_argument("--verbose", action="store_true", help=verbose_help)
    args = parser.parse_args()
    outcomes = run_corpus(args.slugs or None)
    print(table(outcomes))
    if args.verbose:
        text = details(outcomes)
        if text:
            print(text)
