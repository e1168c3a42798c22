"""A command line being written: its words, the knobs no flag sets, and notes for the user."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Argv:
    argv: list[str] = field(default_factory=list)
    unflagged: list[str] = field(default_factory=list)  # "knob = value: why no flag sets it"
    notes: list[str] = field(default_factory=list)

    def add(self, flag: str, value: object = None) -> None:
        """A flag, and its value when it takes one."""
        self.argv.append(flag)
        if value is not None:
            self.argv.append(str(value))
