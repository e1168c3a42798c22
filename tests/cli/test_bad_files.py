"""The reproducers of the second round of bad inputs (repro2) about data files, one
test each: a number outside its range, a file that is not what the command needs, or an --out it
cannot write is one `error:` line naming the file, field and problem, exit 2; or the right result.
Numbers in every file are read by simulator/core/numbers.py (its own tests:
tests/simulator/core/test_numbers.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_helpers import CliResult, refused, run_cli, tiny_scenario
from profile_helpers import synthetic_profile

from pagesim.simulator.core.catalog import get_model
from pagesim.simulator.scenario.load import load_scenario

LLAMA_7B = get_model("llama-2-7b")  # the tiny scenario's model
SLICE = Path(__file__).resolve().parents[1] / "data" / "vidur"
MLP_70B = "compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv"
AR = "network/a100_dgx/all_reduce.csv"
SESSION_HEADER = "session_id,turn,arrived_at,num_prefill_tokens,num_decode_tokens\n"
WORKLOAD = tiny_scenario()[
    tiny_scenario().index("[workload]") : tiny_scenario().index("[[systems]]")
]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def scenario(folder: Path, workload: str, name: str = "s.toml") -> str:
    """The tiny scenario with its [workload] replaced by `workload`, written to `name`."""
    (folder / name).write_text(tiny_scenario().replace(WORKLOAD, workload))
    return name


def speculative_scenario(folder: Path, k: int) -> Path:
    """The tiny scenario's system on vLLM V1 with speculative decoding: k drafts, the accepted
    counts of acc.csv."""
    text = tiny_scenario().replace('policy = "vllm-v0"', 'policy = "vllm-v1"')
    text += (
        f'speculative = {{ method = "eagle", num_speculative_tokens = {k}, '
        'acceptance_file = "acc.csv" }\n'
    )
    (folder / "spec.toml").write_text(text)
    return folder / "spec.toml"


def session_scenario(folder: Path, rows: str, prefix: str = "") -> str:
    (folder / "turns.csv").write_text(prefix + SESSION_HEADER + rows)
    return scenario(folder, '[workload.session_trace]\npath = "turns.csv"\n')


def vidur_copy(folder: Path, edit: str, column: str, value: str) -> Path:
    """The test slice of Vidur's data with `column` of the first data row of file `edit` set to
    `value` (every row when column starts with '*')."""
    root = folder / "vidur"
    shutil.copytree(SLICE, root)
    path = root / edit
    lines = path.read_text().splitlines()
    at = lines[0].split(",").index(column.lstrip("*"))
    for i in range(1, len(lines) if column.startswith("*") else 2):
        cells = lines[i].split(",")
        cells[at] = value
        lines[i] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    return root


def import_70b(capsys: pytest.CaptureFixture[str], root: Path, out: str = "p.json") -> CliResult:
    return run_cli(
        capsys, "calibrate", "import-vidur", str(root), "--model", "llama-2-70b", "--gpu",
        "a100-80gb", "--tp", "2", "--out", out,
    )  # fmt: skip


# ------------------------------------------------------------------------- session traces


@pytest.mark.parametrize("tokens", ["9223372036854775808", "1000000000000"])
def test_03_session_token_counts_have_the_request_traces_bound(
    here: Path, capsys: pytest.CaptureFixture[str], tokens: str
) -> None:
    name = session_scenario(here, f"1,0,0,{tokens},5\n")
    for command in ("validate", "run"):
        refused(
            run_cli(capsys, command, name, "--out", "o", "--no-report")
            if command == "run"
            else run_cli(capsys, command, name),
            "turns.csv line 2: num_prefill_tokens",
            "a whole number of tokens from 1 to 1,000,000,000",
            repr(tokens),
        )


@pytest.mark.parametrize(
    ("row", "needle"),
    [
        ("1,0,0,1_0,5\n", "num_prefill_tokens: expected a whole number of tokens from 1"),
        ("\u0661,0,0,10,5\n", "session_id: expected a whole number from 0"),
        ("1,0,0,10,5,99\n", "line 2: 6 fields, the header has 5"),
        ("1,0,0,10,5\n1,1,nan,10,5\n", "line 3: arrived_at: expected a finite number"),
    ],
)
def test_17_session_cells_are_read_as_request_traces_read_theirs(
    here: Path, capsys: pytest.CaptureFixture[str], row: str, needle: str
) -> None:
    refused(run_cli(capsys, "validate", session_scenario(here, row)), "turns.csv", needle)


def test_17_a_session_trace_with_a_byte_order_mark_is_read(here: Path) -> None:
    with_bom = load_scenario(here / session_scenario(here, "1,0,0,10,5\n", prefix="\ufeff"))
    assert with_bom.workload.session_trace is not None


def test_17_an_acceptance_table_is_read_as_the_traces_are(here: Path) -> None:
    name = speculative_scenario(here, 2)
    (here / "acc.csv").write_text("\ufeffnum_accepted,weight\n0,1\n2,3\n")
    pmf = load_scenario(name).systems[0].speculative
    assert pmf is not None and pmf.accepted_pmf() == (0.25, 0.0, 0.75)
    for bad, needle in (
        ("0,1_0\n", "line 2: weight must be a finite number >= 0, got '1_0'"),
        ("\u0661,1\n", "line 2: num_accepted must be a whole number from 0 to 2"),
        ("0,1,7\n", "line 2: 3 fields, the header has 2"),
    ):
        (here / "acc.csv").write_text("num_accepted,weight\n" + bad)
        with pytest.raises(Exception, match=needle):
            load_scenario(name)


# -------------------------------------------------------------------- acceptance weights


def test_13_acceptance_weights_near_the_float_maximum_keep_their_proportions(
    here: Path,
) -> None:
    name = speculative_scenario(here, 3)
    pmfs = []
    for weight in ("1", "1e308"):
        (here / "acc.csv").write_text(f"num_accepted,weight\n0,{weight}\n3,{weight}\n")
        config = load_scenario(name).systems[0].speculative
        assert config is not None
        pmfs.append(config.accepted_pmf())
    assert pmfs[0] == pmfs[1] == (0.5, 0.0, 0.0, 0.5)


# ------------------------------------------------------------------------- arrival times


def test_15_arrivals_past_the_clocks_range_are_refused_at_validate(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [(0, 600, 10, [1, 2]), (100, 1100, 20, [1, 2, 3]), (250, 300, 5, [9])]
    (here / "mc.jsonl").write_text(
        "".join(
            json.dumps({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": h})
            + "\n"
            for t, i, o, h in rows
        )
    )
    mooncake = '[workload.mooncake]\ntrace = "mc.jsonl"\ntime_scale = 1e-300\n'
    refused(
        run_cli(capsys, "validate", scenario(here, mooncake)),
        "workload.mooncake.time_scale",
        "row 3 would arrive 2.5e+299 s into the run, past 1e+09 s",
    )
    # A request trace and a session trace: the same bound, on the rows they replay.
    (here / "t.csv").write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1e300,10,5\n"
    )
    trace = '[workload]\ntrace = "t.csv"\nnum_requests = 2\n'
    refused(run_cli(capsys, "validate", scenario(here, trace)), "workload.time_scale", "row 2")
    refused(
        run_cli(capsys, "validate", session_scenario(here, "1,0,0,10,5\n2,0,1e300,10,5\n")),
        "workload.session_trace.time_scale",
        "line 3 would arrive 1e+300 s",
    )
    # The first row of a slice past the bound is fine: times count from the first replayed.
    (here / "t.csv").write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1e300,10,5\n1e300,10,5\n"
    )
    trace = '[workload]\ntrace = "t.csv"\ntrace_offset = 1\nnum_requests = 2\n'
    assert run_cli(capsys, "validate", scenario(here, trace)).exit_code == 0


def test_15_a_rate_that_places_arrivals_past_the_clock_is_refused_by_the_run(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = WORKLOAD.replace('kind = "burst"', 'kind = "constant"\nrate_per_s = 1e-12')
    refused(
        run_cli(capsys, "run", scenario(here, slow), "--out", "o", "--no-report"),
        "workload.arrival.rate_per_s: request 0 would arrive 1e+12 s into the run",
    )


# ------------------------------------------------------------------------ Vidur's CSVs


@pytest.mark.parametrize(
    ("edit", "column", "value", "needle"),
    [
        (MLP_70B, "*time_stats.attn_pre_proj.median", "0", "0 is not a finite number of ms above"),
        (AR, "size", "0", "'size', line 2: 0 is not a whole number of bytes"),
        (MLP_70B, "num_tensor_parallel_workers", "0", "0 is not a whole number of GPUs from 1"),
        (
            "compute/a100/meta-llama/Llama-2-70b-hf/attention_tp2.csv",
            "block_size",
            "0",
            "'block_size', line 2: 0 is not a whole number of tokens from 1",
        ),
    ],
)  # fmt: skip
def test_05_zeros_in_vidurs_csvs_are_refused_naming_file_column_and_line(
    here: Path, capsys: pytest.CaptureFixture[str], edit: str, column: str, value: str, needle: str
) -> None:
    root = vidur_copy(here, edit, column, value)
    refused(import_70b(capsys, root), edit.rsplit("/", 1)[1], needle)
    assert not (here / "p.json").exists()


@pytest.mark.parametrize(
    ("column", "value", "needle"),
    [
        ("num_tokens", "1e30", "1e+30 is not a whole number of tokens from 1 to 1,000,000,000"),
        ("time_stats.attn_pre_proj.median", "1e300", "1e+300 is not a finite number of ms"),
        ("num_tokens", "1_0", "'1_0' is not a whole number of tokens"),
    ],
)
def test_07_huge_values_in_vidurs_csvs_are_refused_not_wrapped(
    here: Path, capsys: pytest.CaptureFixture[str], column: str, value: str, needle: str
) -> None:
    refused(import_70b(capsys, vidur_copy(here, MLP_70B, column, value)), "mlp.csv", needle)


@pytest.mark.parametrize("command", ["fit-roofline", "error-table"])
def test_06_a_folder_without_vidurs_files_is_refused(
    here: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    (here / "empty").mkdir()
    (here / "afile").write_text("x\n")
    out = ["--out", "e.md"] if command == "error-table" else []
    for folder, needle in (
        ("nope", "nope: not a directory"),
        ("afile", "afile: not a directory"),
        ("empty", "empty: not a copy of Vidur's data/profiling (no compute/ folder in it)"),
    ):
        refused(run_cli(capsys, "calibrate", command, folder, *out), needle)
    assert not (here / "e.md").exists()


def test_08_a_missing_or_replaced_file_of_vidurs_data_is_named_not_skipped(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The slice holds Llama-2-70B only: the whole data set's commands name the first file
    missing from it, where they used to fit what was there."""
    root = here / "vidur"
    shutil.copytree(SLICE, root)
    missing = "compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
    for command in ("fit-roofline", "error-table"):
        refused(run_cli(capsys, "calibrate", command, str(root)), missing, "no such file")
    refused(run_cli(capsys, "calibrate", "import-vidur", str(root), "--all", "--out", "all"))
    assert not any((here / "all").iterdir())  # nothing written before every file was read
    (root / missing).mkdir(parents=True)
    refused(run_cli(capsys, "calibrate", "fit-roofline", str(root)), missing, "is a folder")
    # One import reads what it needs, and says where a term comes from without a file.
    (root / MLP_70B.replace("mlp.csv", "attention_tp2.csv")).unlink()
    result = import_70b(capsys, root)
    assert result.exit_code == 0 and "decode_attention: roofline" in result.out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["error-table", "VIDUR", "--out", "/proc/self/e.md"], "cannot write there"),
        (["error-table", "VIDUR", "--out", "."], "is a folder; give a file name"),
        (["fit-roofline", "VIDUR", "--out", "."], "is a folder; give a file name"),
        (["fit-roofline", "VIDUR", "--out", "/dev/null/x.json"], "/dev/null is not a folder"),
        (["import-vidur", "VIDUR", "--model", "llama-2-70b", "--gpu", "a100-80gb", "--tp", "2",
          "--out", "/proc/self/p.json"], "cannot write there"),
        (["import-vidur", "VIDUR", "--all", "--out", "afile.toml"], "exists and is not a folder"),
    ],
)  # fmt: skip
def test_23_calibrate_checks_its_out_before_any_work(
    here: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    (here / "afile.toml").write_text("x\n")
    args = [str(SLICE) if a == "VIDUR" else a for a in args]
    out = args[args.index("--out") + 1]
    refused(run_cli(capsys, "calibrate", *args), f"--out {out!r}", needle)


# ------------------------------------------------------------------------------ profiles


def profile_scenario(folder: Path, profile: dict[str, object] | str) -> str:
    path = folder / "p.json"
    path.write_text(profile if isinstance(profile, str) else json.dumps(profile))
    return scenario(
        folder, WORKLOAD + '[execution]\nkind = "profile"\nprofile = "p.json"\n', name="p.toml"
    )


def test_21_a_profile_nested_50000_deep_is_refused(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = profile_scenario(here, '{"a":' * 50_000 + "1" + "}" * 50_000)
    refused(run_cli(capsys, "validate", name), "p.json", "nested more than 32 deep")


def test_21_a_profile_whose_every_cost_is_0_is_refused_at_validate(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = synthetic_profile(LLAMA_7B)
    for section in ("decode_attention", "prefill_attention"):
        coef = profile[section]["coef"]  # type: ignore[index]
        profile[section]["coef"] = dict.fromkeys(coef, 0)  # type: ignore[index]
    name = profile_scenario(here, profile)
    for command in ("validate", "run"):
        refused(
            run_cli(capsys, command, name, *(["--out", "o"] if command == "run" else [])),
            "field 'decode_attention.coef': every coefficient is 0",
        )


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (("gemm", "time_s"), [0, 0, 0], "'gemm.time_s.0' must be a finite number of seconds above"),
        (("lm_head", "time_s"), [2e-4, 0, 1e-3], "field 'lm_head.time_s.1' must be"),
        (("measured", "block_size"), 0, "'measured.block_size' must be a whole number of tokens"),
        (("gemm", "tokens"), [1, 64, 1e300], "'gemm.tokens.2' must be a finite number from 0"),
    ],
)  # fmt: skip
def test_24_a_profile_with_free_gemms_or_no_block_size_is_refused_at_validate(
    here: Path,
    capsys: pytest.CaptureFixture[str],
    path: tuple[str, str],
    value: object,
    needle: str,
) -> None:
    profile = synthetic_profile(LLAMA_7B)
    profile[path[0]][path[1]] = value  # type: ignore[index]
    refused(run_cli(capsys, "validate", profile_scenario(here, profile)), "p.json", needle)


def test_a_samples_csv_that_does_not_match_its_profile_plots_the_curves_alone(here: Path) -> None:
    from pagesim.calibration.profile import calibration_panels

    profile = synthetic_profile(LLAMA_7B) | {"samples_csv": "s.csv"}
    (here / "p.json").write_text(json.dumps(profile))
    (here / "s.csv").write_text("kind,label,time_s\ndecode,x,1_0\n")
    panels = calibration_panels(here / "p.json")["panels"]
    assert [p["title"] for p in panels] == ["linear layers + small operators (per layer)"]  # type: ignore[index]


def test_a_mooncake_trace_with_a_byte_order_mark_is_read(here: Path) -> None:
    from pagesim.simulator.workload.mooncake import read_mooncake

    row = {"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}
    (here / "mc.jsonl").write_text("\ufeff" + json.dumps(row) + "\n")
    assert len(read_mooncake(here / "mc.jsonl")) == 1
