"""The sweep point cache: a folder of small JSON files, one per point, written atomically.

`<key>.json` holds the point's summary and a few extra metrics; `<key>/requests.csv, steps.csv,
summary.json` hold the frames of the few points a report draws. Files are written whole under a
staging name (a leading dot, never `.json`) and renamed into place, so a sweep killed at any
instant leaves only complete entries, and a rerun simulates just the points without one; staging
litter a kill left behind is swept, once an hour old, by the next run that opens the folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from pagesim import __version__
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.studies.points import Point, PointOutcome

CACHE_DIR = "cache"  # under a sweep's --out folder
# Keys every simulated summary holds, as whole numbers: an entry without them is not ours.
_COUNT_KEYS = ("num_requests", "num_finished", "num_rejected", "num_steps")
# Staging names: an entry or a frames folder being written, a writability probe. A live writer
# renames its staging within seconds, so one an hour old was left by a killed run.
_STAGING_PREFIXES = (".point-", ".frames-", ".probe-")
_STALE_STAGING_S = 3600.0


def is_valid_summary(summary: object) -> bool:
    """A summary as `evaluate_point` returns it: names to None or numbers, never NaN (an
    infinite queueing delay is a legitimate value), with the counts every run has."""
    if not isinstance(summary, dict):
        return False
    for key, value in summary.items():
        if not isinstance(key, str) or isinstance(value, bool):
            return False
        if value is not None and not (isinstance(value, int | float) and value == value):
            return False
    return all(isinstance(summary.get(k), int) and summary[k] >= 0 for k in _COUNT_KEYS)


def _remove(path: Path) -> None:
    """Whatever sits at `path` in the cache's own namespace (a damaged entry), gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


class PointCache:
    """`<folder>/<key>.json` per point (and `<key>/` frames for some); see the module docstring.

    A damaged entry (unreadable, not a summary, NaN in it, a folder where a file belongs) is a
    missing one: the point is simulated again and the entry rewritten.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def prepare(self) -> None:
        """Make the folder, or say (InputError) why points could not be cached there: checked
        before anything is simulated. Then sweep staging a killed run left (an hour old)."""
        where = f"the sweep cache {self.folder}"
        if self.folder.exists() and not self.folder.is_dir():
            raise InputError(f"{where} is not a folder; move it away (it holds cached points)")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.folder, prefix=".probe-"):
                pass
        except OSError as exc:
            raise InputError(f"cannot write {where}: {exc.strerror or exc}") from None
        self._sweep_stale_staging()

    def _sweep_stale_staging(self) -> None:
        """Staging files and folders a killed run left, gone; a fresh one may be another live
        sweep's in the same folder and is left alone."""
        now = time.time()
        try:
            staging = [p for p in self.folder.iterdir() if p.name.startswith(_STAGING_PREFIXES)]
        except OSError:
            return  # unreadable (writable only): the litter stays, the sweep goes on
        for path in staging:
            try:
                if now - path.lstat().st_mtime > _STALE_STAGING_S:
                    _remove(path)
            except OSError:
                pass  # gone already (another sweep swept it) or not ours to remove

    def summary(self, key: str) -> dict[str, Any] | None:
        try:
            payload = json.loads((self.folder / f"{key}.json").read_text())
        except (OSError, ValueError, RecursionError):
            return None  # absent, or torn by something other than us: simulate it again
        summary = payload.get("summary") if isinstance(payload, dict) else None
        return summary if is_valid_summary(summary) else None

    def frames(self, key: str) -> RunResult | None:
        try:
            return RunResult.read(self.folder / key)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None

    def put(self, point: Point, outcome: PointOutcome) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if outcome.result is not None:
            staging = Path(tempfile.mkdtemp(dir=self.folder, prefix=".frames-"))
            outcome.result.write(staging)
            _remove(self.folder / point.key)
            os.replace(staging, self.folder / point.key)
        payload = {
            "key": point.key,
            "pagesim_version": __version__,
            "scenario": point.scenario.name,
            "system": point.system.name,
            "axes": point.axes,
            "wall_s": outcome.wall_s,
            "summary": outcome.summary,
        }
        text = json.dumps(payload, indent=1, default=str) + "\n"
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".point-", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        entry = self.folder / f"{point.key}.json"
        if entry.is_dir() and not entry.is_symlink():
            _remove(entry)
        os.replace(tmp, entry)
