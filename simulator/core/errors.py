"""Errors pagesim raises on purpose.

`InputError` is bad input from a person (scenario file, CLI flag, config.json): the CLI prints its
message on one line and exits 2. `KVCacheError` is misuse of the KV-cache mechanism by code: a bug,
never silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterable


class PagesimError(Exception):
    """Base of the errors pagesim raises deliberately."""

    exit_code = 1


class InputError(PagesimError):
    """Input pagesim cannot use; the message says where, what is wrong and the valid choices."""

    exit_code = 2


class KVCacheError(PagesimError):
    """The KV-cache mechanism was misused (double free, unknown block, nothing free...)."""


def choices_text(choices: Iterable[object]) -> str:
    """'a, b, c' for an error message listing the valid choices."""
    return ", ".join(str(c) for c in choices)
