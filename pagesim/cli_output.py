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
def output(out: Path, kind: str, keep: Sequence[str] = ()) -> Iterator[OutputFolder]:
    """The command's output folder, checked before any work (see reports.output_folder), and
    what an interruption would leave of it."""
    from pagesim.reports.output_folder import OutputFolder

    opened: list[OutputFolder] = []
    interrupts.note(lambda: console.kept_after_interrupt(out, opened[0] if opened else None))
    with OutputFolder.open(out, kind, keep) as folder:
        opened.append(folder)
        yield folder


def commit(folder: OutputFolder, scenario: str) -> None:
    folder.commit(scenario)
    console.echo_replaced(folder, scenario)
