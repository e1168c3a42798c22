"""The sweep point cache: a folder of small JSON files, one per point, written atomically.

`<key>.json` holds the point's summary and a few extra metrics; `<key>/requests.csv, steps.csv,
summary.json` hold the frames of the few points a report draws. Files are written whole and
renamed into place, so a sweep killed at any instant leaves only complete entries, and a rerun
simulates just the points without one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pagesim import __version__
from pagesim.simulator.metrics.result import RunResult
from pagesim.simulator.studies.points import Point, PointOutcome

CACHE_DIR = "cache"  # under a sweep's --out folder


class PointCache:
    """`<folder>/<key>.json` per point (and `<key>/` frames for some); see the module docstring."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def summary(self, key: str) -> dict[str, Any] | None:
        try:
            payload = json.loads((self.folder / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None  # absent, or torn by something other than us: simulate it again
        summary = payload.get("summary") if isinstance(payload, dict) else None
        return summary if isinstance(summary, dict) else None

    def frames(self, key: str) -> RunResult | None:
        try:
            return RunResult.read(self.folder / key)
        except (OSError, ValueError, KeyError):
            return None

    def put(self, point: Point, outcome: PointOutcome) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        if outcome.result is not None:
            staging = Path(tempfile.mkdtemp(dir=self.folder, prefix=".frames-"))
            outcome.result.write(staging)
            shutil.rmtree(self.folder / point.key, ignore_errors=True)
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
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".point-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, self.folder / f"{point.key}.json")
