"""Atomic, labelled output folders: what `run`, `sweep`, `capacity` and `report` write into.

A command never writes into its --out folder in place. It checks the folder before any work
(`OutputFolder.open`: not a file, writable, not someone else's non-empty folder, not being written
by another pagesim right now), writes everything into a hidden staging folder beside it, and only
when that is complete swaps it in (`commit`), with SIGINT and SIGTERM held back for the few
renames that takes:

    runs/x                         the previous complete output (or nothing), until the commit
    runs/.x.staging-1234-ab12/     the new output, being written
          commit: runs/x/cache -> staging/cache (a sweep's resumable cache travels along)
                  runs/x -> runs/.x.staging-…-old,  staging -> runs/x,  the old one removed

Interrupted or failed before the commit, the staging folder is removed and runs/x is what it
was. A sweep's cache is the one thing written into runs/x itself (point by point, atomically, so
that a rerun resumes); a folder created for it says in its manifest that it is incomplete until
the first commit, and `pagesim report` refuses it. Every complete folder holds MANIFEST_FILE:
which command wrote it, for which scenario, with which pagesim, and when.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from pagesim import __version__
from pagesim.simulator.core import held_signals
from pagesim.simulator.core.errors import InputError

MANIFEST_FILE = "pagesim-output.json"
KINDS = ("run", "sweep", "capacity")
# What marks a folder written by an earlier pagesim, before folders carried a manifest.
_LEGACY_MARKS = ("report.json", "summary.csv", "sweep.csv", "capacity.csv", "cache")
_SIGNALS = {signal.SIGINT, signal.SIGTERM}
ALL = ("*",)  # `keep`: every entry the new output lacks (re-rendering a report in place)

if sys.platform != "win32":  # Windows: no advisory locks; concurrent writers go undetected
    import fcntl


def read_manifest(folder: Path) -> dict[str, object] | None:
    """The folder's manifest, or None when it has none (or an unreadable one)."""
    try:
        manifest = json.loads((folder / MANIFEST_FILE).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return manifest if isinstance(manifest, dict) else None


def describe(manifest: dict[str, object] | None) -> str:
    """'the sweep of scenario 'x'' for messages ('an unfinished sweep …' for one interrupted
    before its first commit); 'an earlier pagesim output' when unlabelled."""
    if not manifest:
        return "an earlier pagesim output"
    kind = manifest.get("kind", "output")
    what = f"the {kind}" if manifest.get("complete", True) else f"an unfinished {kind}"
    scenario = manifest.get("scenario")
    return f"{what} of scenario {scenario!r}" if scenario else what


def is_pagesim_folder(folder: Path) -> bool:
    return (folder / MANIFEST_FILE).is_file() or any(
        (folder / mark).exists() for mark in _LEGACY_MARKS
    )


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM held back (delivered when the block ends): for the renames of a
    commit, which must not stop half-way. The mask holds them back from this thread; the kernel
    may still give one to another thread (a progress bar's), whose handler Python runs in this
    one all the same, so the handler holds that back too (simulator/core/held_signals.py)."""
    mask = getattr(signal, "pthread_sigmask", None)
    with held_signals.held():
        if mask is None:  # Windows
            yield
            return
        old = mask(signal.SIG_BLOCK, _SIGNALS)
        try:
            yield
        finally:
            mask(signal.SIG_SETMASK, old)


def _refuse(out: Path, problem: str) -> InputError:
    return InputError(f"--out {str(out)!r}: {problem}")


def _check_out(out: Path) -> bool:
    """Check `out` can become an output folder; returns whether it exists (as a folder)."""
    try:
        cwd = Path.cwd().resolve()
        resolved = out.resolve()
        if resolved == cwd or resolved in cwd.parents:
            raise _refuse(
                out,
                "the current folder (or one above it) cannot be replaced by an output; "
                "name a folder of its own, e.g. --out runs/x",
            )
        if not out.exists():
            return False
        if not out.is_dir():
            raise _refuse(out, "exists and is not a folder; name a new or empty folder")
        if _is_immutable(out):
            raise _refuse(
                out,
                "is immutable or append-only (chattr +i / +a): an output folder is replaced as "
                "a whole; clear the flag or name another folder",
            )
        entries = sorted(p.name for p in out.iterdir())
    except OSError as exc:
        raise _refuse(out, f"cannot use this path: {exc.strerror or exc}") from None
    if entries and not is_pagesim_folder(out):
        shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise _refuse(
            out,
            f"is a folder pagesim did not write (it holds {shown}); name a new or empty "
            "folder: an output folder is replaced as a whole",
        )
    return True


# linux/fs.h: FS_IOC_GETFLAGS = _IOR('f', 1, long), whose size is a long's.
_FS_IOC_GETFLAGS = 0x80086601 if sys.maxsize > 2**32 else 0x80046601
_FS_UNRENAMEABLE = 0x10 | 0x20  # FS_IMMUTABLE_FL | FS_APPEND_FL: not even root renames it


def _is_immutable(folder: Path) -> bool:
    """Whether the folder carries a flag that forbids renaming it (Linux; False elsewhere or
    where the file system keeps no such flags). Checked before any work, so that a run is not
    simulated for an output it cannot commit; `commit` still undoes a swap that fails."""
    if sys.platform != "linux":
        return False
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return False
    try:
        flags = fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))
    except OSError:  # a file system without the flags (tmpfs, say)
        return False
    finally:
        os.close(fd)
    return bool(int.from_bytes(flags[:4], sys.byteorder) & _FS_UNRENAMEABLE)


@dataclass
class OutputFolder:
    """One command's output: written into `staging`, swapped into `final` by `commit`."""

    final: Path
    staging: Path
    kind: str
    keep: Sequence[str]  # entries of `final` the new output takes over (a sweep's cache)
    created: bool  # `final` did not exist before this command
    previous: dict[str, object] | None  # the manifest of the output being replaced
    _lock_fd: int | None = None
    _done: bool = field(default=False, repr=False)

    @classmethod
    def open(
        cls,
        out: Path,
        kind: str,
        keep: Sequence[str] = (),
        made: list[OutputFolder] | None = None,
        scenario: str = "",
    ) -> OutputFolder:
        """Check `out` (InputError saying why it cannot be used), lock it against other pagesim
        commands, and make the staging folder beside it; `made` receives the folder in the same
        breath as its staging folder is made (signals held), so a caller can always clean up.
        A folder created here is labelled with `scenario` until the commit (an interrupted sweep
        leaves it so, and its rerun knows the folder for its own)."""
        out = Path(out)
        exists = _check_out(out)
        folder = cls(out, out, kind, keep, False, read_manifest(out) if exists else None)
        try:  # interrupted or failed half-way, whatever was made is removed again
            folder._make(exists, made, scenario)
        except BaseException:
            folder.abandon()
            raise
        return folder

    def _make(
        self, exists: bool, made: list[OutputFolder] | None = None, scenario: str = ""
    ) -> None:
        out = self.final
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            if not exists:
                with signals_held():  # a signal between the two would leave it unrecorded
                    out.mkdir()
                    self.created = True
                _write_manifest(out, self.kind, scenario, complete=False)
        except FileExistsError:
            pass  # another command made it meanwhile: the lock decides below
        except OSError as exc:
            raise _refuse(out, f"cannot create it: {exc.strerror or exc}") from None
        self._lock()
        try:
            with signals_held():  # made and recorded at once, so that `abandon` removes it
                self.staging = Path(
                    tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name[:64]}.staging-")
                )
                if made is not None:
                    made.append(self)
        except OSError as exc:
            raise _refuse(out, f"cannot write beside it: {exc.strerror or exc}") from None

    def _lock(self) -> None:
        if sys.platform == "win32":
            return
        try:
            fd = os.open(self.final, os.O_RDONLY)
        except OSError as exc:
            raise _refuse(self.final, f"cannot open it: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise _refuse(
                self.final,
                "another pagesim command is writing this folder right now; wait "
                "for it, or name another folder",
            ) from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the lock
            self._lock_fd = None

    def commit(self, scenario: str) -> Path:
        """Label the staged output and swap it in for `final`; returns `final`. A swap the file
        system refuses (an immutable folder, a sticky parent another user owns) is undone step
        by step and ends in an InputError: `final` stays as it was."""
        _write_manifest(self.staging, self.kind, scenario, complete=True)
        old = self.staging.with_name(self.staging.name + "-old")
        moved: list[tuple[Path, Path]] = []  # (from, to) of each entry carried, in order
        with signals_held():
            try:
                _carry(self.final, self.staging, self.keep, moved)
                os.replace(self.final, old)
            except OSError as exc:
                _undo(moved)
                raise self._refused(exc) from None
            try:
                os.replace(self.staging, self.final)
            except OSError as exc:
                os.replace(old, self.final)
                _undo(moved)
                raise self._refused(exc) from None
            self._done = True
        self._unlock()
        shutil.rmtree(old, ignore_errors=True)
        return self.final

    def _refused(self, exc: OSError) -> InputError:
        return _refuse(
            self.final,
            f"cannot replace it with the new output: {exc.strerror or exc}; it is as it was and "
            "the new output was not kept: make it replaceable or name another folder",
        )

    def abandon(self) -> None:
        """Drop the staged output; `final` stays as it was (a folder this command created is
        removed again unless it holds a sweep's cache worth resuming)."""
        if self._done:
            return
        self._done = True
        with signals_held():
            if self.staging != self.final:
                shutil.rmtree(self.staging, ignore_errors=True)
            if self.created and _holds_only_manifest(self.final):
                shutil.rmtree(self.final, ignore_errors=True)
        self._unlock()

    def __enter__(self) -> OutputFolder:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.abandon()


def _write_manifest(folder: Path, kind: str, scenario: str, *, complete: bool) -> None:
    manifest = {
        "kind": kind,
        "scenario": scenario,
        "complete": complete,
        "pagesim_version": __version__,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")


def _holds_only_manifest(folder: Path) -> bool:
    try:
        names = {p.name for p in folder.iterdir()}
    except OSError:
        return False
    cache = folder / "cache"
    if names == {MANIFEST_FILE, "cache"} and cache.is_dir():
        return not any(p.suffix == ".json" for p in cache.iterdir())
    return names <= {MANIFEST_FILE}


def _carry(old: Path, new: Path, keep: Sequence[str], moved: list[tuple[Path, Path]]) -> None:
    """Move the entries of `old` named in `keep` (all of them for ALL) that `new` lacks into
    `new`; folders present in both merge entry by entry. Each move is appended to `moved`."""
    names = [p.name for p in old.iterdir()] if keep == ALL else keep
    for name in names:
        source, target = old / name, new / name
        if not (source.exists() or source.is_symlink()) or name == MANIFEST_FILE:
            continue
        if not target.exists():
            os.replace(source, target)
            moved.append((source, target))
        elif keep == ALL and source.is_dir() and target.is_dir():
            _carry(source, target, ALL, moved)


def _undo(moved: list[tuple[Path, Path]]) -> None:
    """Move carried entries back, last first (a commit that could not finish)."""
    for source, target in reversed(moved):
        with contextlib.suppress(OSError):
            os.replace(target, source)
