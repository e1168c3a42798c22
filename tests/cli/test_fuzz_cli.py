"""Fuzzing the command line in the families the reproducers came from (issue 14 item 11): numbers
at the float and int64 edges, paths that are not regular files, damaged run folders and sweep
caches. Whatever the input: exit 0, or exit 2 with one `error:` line, never a traceback.
Bounded for CI (PAGESIM_FUZZ_EXAMPLES raises it for a longer hunt)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from cli_helpers import CliResult, run_cli, tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagesim.reports import plot_jobs

EXAMPLES = int(os.environ.get("PAGESIM_FUZZ_EXAMPLES", "0")) or None
FAST = settings(
    max_examples=EXAMPLES or 60,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
SLOW = settings(max_examples=EXAMPLES or 12, deadline=None, suppress_health_check=list(HealthCheck))

SCENARIO = tiny_scenario("fuzz")

EDGES = [
    "0",
    "-0",
    "-1",
    "1e308",
    "-1e308",
    "1.8e308",
    "inf",
    "-inf",
    "nan",
    "5e-324",
    str(2**31),
    str(2**63 - 1),
    str(2**63),
    str(2**64),
    str(-(2**63) - 1),
    "9" * 40,
    "0x10",
    "1_000",
    "",
    " ",
]
NUMBERS = st.one_of(
    st.sampled_from(EDGES),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


def clean(result: CliResult) -> None:
    """Exit 0, or exit 2 with exactly one error line; no traceback either way."""
    assert "Traceback" not in result.out + result.err, result.err
    assert result.exit_code in (0, 2), (result.exit_code, result.err[-500:])
    if result.exit_code == 2:
        errors = [line for line in result.err.splitlines() if line.startswith("error:")]
        # typer's own usage errors (a number that is not one) print a boxed message instead
        assert len(errors) <= 1, result.err
        assert errors or "Usage:" in result.err, result.err


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz-cli")
    (folder / "s.toml").write_text(SCENARIO)
    return folder


@FAST
@given(
    flag=st.sampled_from(["--seq-len", "--block-size", "--batch-size", "--tp", "--weights-gib"]),
    value=NUMBERS,
)
def test_kv_numbers_at_the_edges(capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    args = ["kv", "--model", "llama-2-7b", "--seq-len", "100", "--gpu", "a100-80gb"]
    clean(run_cli(capsys, *args, flag, value))


KEYS = [
    "seed",
    "workload.num_requests",
    "workload.arrival.rate_per_s",
    "workload.prompt.value",
    "gpu.memory_gib",
    "systems.block_size",
    "systems.max_num_seqs",
    "systems.max_num_batched_tokens",
    "systems.gpu_memory_utilization",
    "systems.swap_space_gib",
    "slo.ttft_s",
    "stop.max_time_s",
    "model.tensor_parallel",
]


@FAST
@given(key=st.sampled_from(KEYS), value=NUMBERS)
def test_scenario_numbers_at_the_edges(
    work: Path, capsys: pytest.CaptureFixture[str], key: str, value: str
) -> None:
    clean(run_cli(capsys, "validate", str(work / "s.toml"), "--set", f"{key}={value}"))


def _not_a_file(work: Path, kind: str) -> Path:
    path = work / f"odd-{kind}"
    if path.exists() or path.is_symlink():
        return path
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling":
        path.symlink_to(work / "nowhere")
    elif kind == "device":
        path.symlink_to("/dev/null")
    elif kind == "empty":
        path.write_text("")
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    return path


PATH_KINDS = ["folder", "fifo", "dangling", "device", "empty", "binary"]
PATH_USES = {
    "scenario": lambda p: ["validate", str(p)],
    "show": lambda p: ["scenarios", "show", str(p)],
    "trace": lambda p: ["validate", "s.toml", "--set", f'workload.trace="{p}"'],
    "lengths": lambda p: [
        "validate",
        "s.toml",
        "--set",
        f'workload.prompt={{kind="empirical", path="{p}"}}',
    ],
    "profile": lambda p: ["validate", "s.toml", "--set", f'execution.profile="{p}"'],
    "report": lambda p: ["report", str(p)],
    "out": lambda p: ["run", "s.toml", "--no-report", "--out", str(p)],
}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize("kind", PATH_KINDS)
@pytest.mark.parametrize("use", list(PATH_USES))
def test_paths_that_are_not_regular_files(
    work: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    use: str,
    kind: str,
) -> None:
    monkeypatch.chdir(work)
    path = _not_a_file(work, kind)
    result = run_cli(capsys, *PATH_USES[use](path))
    clean(result)
    if kind in ("fifo", "dangling", "device"):  # never read as if it were a file
        assert result.exit_code == 2, (use, kind, result.out[-300:])


@pytest.fixture(scope="module")
def saved_run(work: Path) -> Path:
    """A complete `pagesim run` folder, made once, copied per example."""
    folder = work / "saved"
    if not folder.exists():
        cwd = os.getcwd()
        os.chdir(work)
        try:
            import sys

            from pagesim.cli import main

            sys.argv = ["pagesim", "run", "s.toml", "--out", str(folder)]
            try:
                main()
            except SystemExit as exc:
                assert not exc.code, exc.code
        finally:
            os.chdir(cwd)
    return folder


@SLOW
@given(data=st.data())
def test_damaged_run_folders(
    work: Path,
    saved_run: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    data: st.DataObject,
) -> None:
    monkeypatch.setattr(plot_jobs, "RUN_PLOTS", ())  # reading is under test, not drawing
    copy = work / "damaged"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(saved_run, copy)
    files = sorted(p for p in copy.rglob("*") if p.is_file() and p.suffix in (".json", ".csv"))
    for target in data.draw(st.lists(st.sampled_from(files), min_size=1, max_size=3)):
        if not target.is_file():
            continue
        raw = target.read_bytes()
        how = data.draw(st.sampled_from(["truncate", "garble", "delete", "folder", "empty"]))
        if how == "truncate":
            target.write_bytes(raw[: data.draw(st.integers(0, max(0, len(raw) - 1)))])
        elif how == "garble":
            at = data.draw(st.integers(0, max(0, len(raw) - 1)))
            target.write_bytes(raw[:at] + data.draw(st.binary(min_size=1, max_size=8)) + raw[at:])
        elif how == "delete":
            target.unlink()
        elif how == "folder":
            target.unlink()
            target.mkdir()
        else:
            target.write_bytes(b"")
    monkeypatch.chdir(work)
    clean(run_cli(capsys, "report", "damaged"))
