"""The output folder of a command that writes one (run, sweep, report, capacity): opened and
checked before any work, committed when done, and what an interruption would leave of it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from pagesim import console, interrupts

if TYPE_CHECKING:
    from pagesim.reports.output_folder import OutputFolder


@contextmanager
def output(
    out: Path, kind: str, keep: Sequence[str] = (), *, scenario: str = ""
) -> Iterator[OutputFolder]:
    """The command's output folder for `scenario`, checked before any work (see
    reports.output_folder), and what an interruption would leave of it."""
    from pagesim.reports.output_folder import OutputFolder

    opened: list[OutputFolder] = []  # filled the moment its staging folder exists
    interrupts.note(lambda: console.kept_after_interrupt(out, opened[0] if opened else None))
    try:
        with OutputFolder.open(out, kind, keep, opened, scenario) as folder:
            yield folder
    finally:
        # A signal held back while the staging folder was made is delivered when it is let
        # through, which may be after `open` returned and before the `with` took the folder
        # (tests/cli/test_signals.py hit that window under load): abandon it here too. A no-op
        # once the folder was committed or abandoned.
        for made in opened:
            made.abandon()


def commit(folder: OutputFolder, scenario: str) -> None:
    folder.commit(scenario)
    console.echo_replaced(folder, scenario)
