"""Reading a report folder back for `pagesim report`: report.json, each system's saved frames and
sweep.csv, every one checked, so that a damaged or truncated folder is refused with the file and
the problem named (InputError) rather than rendered into a report that contradicts its data."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pagesim.reports.output_folder import read_manifest
from pagesim.simulator.core.config import Comparison, ReportConfig
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.metrics.result import RunResult

INPUTS_FILE = "report.json"
# report.json's keys and the types they must hold (None allowed where the tuple says so).
_INPUT_TYPES: dict[str, tuple[type, ...]] = {
    "title": (str,),
    "scenario_text": (str,),
    "provenance": (dict,),
    "findings": (list, type(None)),
    "calibration": (dict, type(None)),
    "folders": (list,),
}
# Columns a saved frame must have for the report to mean anything (plots tolerate the rest
# missing, so that folders written by an older pagesim still render).
_REQUIRED_COLUMNS = {"requests.csv": ("request_id", "status"), "steps.csv": ("start_s",)}


@dataclass(frozen=True)
class SavedReport:
    """What `write_report` needs to draw a report again, read from a folder."""

    inputs: dict[str, Any]
    results: list[RunResult]
    sweep: pd.DataFrame | None
    kind: str  # run, sweep or capacity: what wrote the folder
    scenario: str


def _fail(path: Path, problem: str) -> InputError:
    return InputError(f"{path}: {problem}")


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(path, "missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(path, f"cannot be read: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise _fail(path, f"not valid JSON ({str(exc)[:80]})") from None


def read_inputs(run_dir: Path) -> dict[str, Any]:
    """report.json, its keys and types checked, its folders plain names of subfolders."""
    path = run_dir / INPUTS_FILE
    if not path.is_file():
        raise _fail(run_dir, f"no {INPUTS_FILE} inside; is this a folder `pagesim run` wrote?")
    inputs = _read_json(path)
    if not isinstance(inputs, dict):
        raise _fail(path, f"expected a JSON object, got {type(inputs).__name__}")
    for key, types in _INPUT_TYPES.items():
        if key not in inputs:
            raise _fail(path, f"missing key {key!r}")
        if not isinstance(inputs[key], types):
            raise _fail(path, f"{key!r} holds {type(inputs[key]).__name__}")
    folders = inputs["folders"]
    if not folders and not (run_dir / "sweep.csv").is_file():
        raise _fail(path, "'folders' is empty and there is no sweep.csv: nothing to report")
    if not isinstance(inputs.get("detail"), str | type(None)):
        raise _fail(path, f"'detail' holds {type(inputs['detail']).__name__}")
    inputs["question"] = question_from_json(inputs.get("question"), path)
    missing = inputs.get("missing", [])
    pairs = isinstance(missing, list) and all(
        isinstance(m, list) and len(m) == 2 and all(isinstance(t, str) for t in m) for m in missing
    )
    if not pairs:
        raise _fail(path, "'missing' must be a list of [system, why] pairs of text")
    for name in folders:
        plain = isinstance(name, str) and name not in ("", ".", "..") and "/" not in name
        if not plain or "\\" in name or name.startswith("."):
            raise _fail(path, f"'folders' holds {name!r}, not the name of a folder inside it")
        if not (run_dir / name).is_dir():
            raise _fail(path, f"'folders' names {name!r}, but {run_dir / name} is not a folder")
    return inputs


def question_to_json(question: ReportConfig) -> dict[str, object]:
    """The scenario's [report] as report.json keeps it (what the headlines answer)."""
    return {
        "key_metric": question.key_metric,
        "metrics": list(question.metrics),
        "compare": question.compare.value,
        "reference": question.reference,
    }


def question_from_json(data: object, path: Path) -> ReportConfig:
    """`question_to_json`'s object read back; absent (a folder written before it was kept):
    no question, the general headlines."""
    if data is None:
        return ReportConfig()
    problem = f"'question' holds {json.dumps(data, default=str)[:80]}"
    if not isinstance(data, dict):
        raise _fail(path, problem)
    key, metrics, reference = data.get("key_metric"), data.get("metrics", []), data.get("reference")
    compare = {c.value: c for c in Comparison}.get(str(data.get("compare", "rank")))
    names = metrics if isinstance(metrics, list) else [None]
    texts_ok = all(isinstance(t, str | type(None)) for t in (key, reference))
    if compare is None or not texts_ok or not all(isinstance(m, str) for m in names):
        raise _fail(path, problem)
    return ReportConfig(key, tuple(str(m) for m in names), compare, reference)


def _read_csv(path: Path, **kwargs: Any) -> pd.DataFrame:
    try:
        frame: pd.DataFrame = pd.read_csv(path, **kwargs)
        return frame
    except FileNotFoundError:
        raise _fail(path, "missing") from None
    except pd.errors.EmptyDataError:
        raise _fail(path, "empty: not even a header") from None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise _fail(path, f"cannot be read as CSV ({str(exc)[:80]})") from None


def read_result(folder: Path) -> RunResult:
    """One system's saved frames and summary (as `RunResult.write` left them), checked against
    each other; each file read on its own so that a message names the one that is wrong."""
    payload = _read_json(folder / "summary.json")
    if not isinstance(payload, dict) or not isinstance(payload.get("summary"), dict):
        raise _fail(folder / "summary.json", "expected an object with a 'summary' object")
    result = RunResult(
        scenario=str(payload.get("scenario", "")),
        system=str(payload.get("system", folder.name)),
        requests=_read_csv(folder / "requests.csv", keep_default_na=False, na_values=[""]),
        steps=_read_csv(folder / "steps.csv"),
        summary=payload["summary"],
        provenance=provenance if isinstance(provenance := payload.get("provenance"), dict) else {},
    )
    for name, frame in (("requests.csv", result.requests), ("steps.csv", result.steps)):
        missing = [c for c in _REQUIRED_COLUMNS[name] if c not in frame]
        if missing:
            raise _fail(folder / name, f"has no column {missing[0]!r}")
    _check_counts(folder, result)
    return result


def _check_counts(folder: Path, result: RunResult) -> None:
    """The frames hold as many requests and steps as the summary counted (truncated data
    would draw empty plots beside a table of numbers)."""
    summary = result.summary
    num_requests = summary.get("num_requests")
    if isinstance(num_requests, int) and len(result.requests) != num_requests:
        raise _fail(
            folder / "requests.csv",
            f"holds {len(result.requests)} requests but summary.json counts {num_requests}: "
            "the data was cut or changed; run the scenario again",
        )
    num_steps = summary.get("num_steps")
    steps = result.steps
    if isinstance(num_steps, int):
        rows = steps["row_steps"] if "row_steps" in steps else pd.Series(1, index=steps.index)
        recorded = int(pd.to_numeric(rows, errors="coerce").fillna(0).sum())
        if recorded != num_steps:
            raise _fail(
                folder / "steps.csv",
                f"holds {recorded} steps but summary.json counts {num_steps}: the data was "
                "cut or changed; run the scenario again",
            )


def read_saved(run_dir: Path) -> SavedReport:
    """Everything `write_report` drew, read back from `run_dir` and checked (InputError)."""
    if not run_dir.is_dir():
        raise _fail(run_dir, "no such folder")
    manifest = read_manifest(run_dir)
    if manifest is not None and manifest.get("complete") is False:
        raise _fail(
            run_dir,
            f"incomplete output: the {manifest.get('kind', 'command')} writing it was "
            "interrupted or failed before it finished; run it again (a sweep resumes from "
            "its cache)",
        )
    inputs = read_inputs(run_dir)
    results = [read_result(run_dir / name) for name in inputs["folders"]]
    sweep_path = run_dir / "sweep.csv"
    sweep = None
    if sweep_path.exists():
        try:
            sweep = pd.read_csv(sweep_path)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise _fail(sweep_path, f"cannot be read as CSV ({str(exc)[:80]})") from None
    kind = str((manifest or {}).get("kind") or ("sweep" if sweep is not None else "run"))
    scenario = str((manifest or {}).get("scenario") or (results[0].scenario if results else ""))
    return SavedReport(inputs, results, sweep, kind, scenario)
