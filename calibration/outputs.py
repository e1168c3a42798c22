"""The files and folders the calibration commands write (`--out`): checked before any work, as
`run` and `sweep` check theirs (reports/output_folder.py), and written with one-line errors.

A check tries what the write will do (makes the parent folders, opens the file for appending, or
creates a file in the folder, and removes what it made), so a folder, a device, a path below a
file, or a place this process may not write (/proc, a read-only mount) is refused before minutes
of fitting, not by a traceback after them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pagesim.simulator.core.errors import InputError


def _refuse(out: Path, problem: str, flag: str) -> InputError:
    return InputError(f"{flag} {str(out)!r}: {problem}")


def _reason(exc: OSError) -> str:
    return f"cannot write there ({exc.strerror or exc})"


def _check_ancestors(out: Path, flag: str) -> None:
    """The nearest existing folder above `out` is a folder (not /dev/null, not a file)."""
    for above in out.absolute().parents:
        if above.exists():
            if not above.is_dir():
                raise _refuse(out, f"{above} is not a folder", flag)
            return


def check_out_file(out: Path, suffix: str = "", flag: str = "--out") -> Path:
    """`out`, a file this command can write (ending in `suffix` when given), or an InputError."""
    if suffix and out.suffix != suffix:
        raise _refuse(out, f"give a {suffix} file name", flag)
    if out.is_dir():
        raise _refuse(out, "is a folder; give a file name", flag)
    _check_ancestors(out, flag)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        existed = out.exists()
        with open(out, "a"):
            pass
        if not existed:
            out.unlink()
    except OSError as exc:
        raise _refuse(out, _reason(exc), flag) from None
    return out


def check_out_folder(out: Path, flag: str = "--out") -> Path:
    """`out`, a folder this command can write files into (made if missing), or an InputError."""
    if out.exists() and not out.is_dir():
        raise _refuse(out, "exists and is not a folder; name a folder", flag)
    _check_ancestors(out, flag)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        raise _refuse(out, _reason(exc), flag) from None
    return out


def write_out(out: Path, text: str, flag: str = "--out") -> Path:
    """`text` written to `out` (checked before the work by `check_out_file`), or an InputError
    should the write still fail (a full disk, a folder removed meanwhile)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as exc:
        raise _refuse(out, _reason(exc), flag) from None
    return out
