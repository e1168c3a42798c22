"""The reproducers of the first round of bad inputs (found by throwing ~1,000 at the CLI; the
scripts are not in the repository), one test each: bad input is one `error:` line naming the file
or flag and what would be valid, exit 2; a damaged cache is simulated again, never trusted. Faults
(signals, stale outputs) are pinned in test_outputs.py and test_signals.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_helpers import CliResult, read_only, refused, run_cli, tiny_scenario

SCENARIO = tiny_scenario("repro")
TRACE_WORKLOAD = '[workload]\ntrace = "t.csv"\n\n'


@pytest.fixture
def repro(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch folder (the working directory) holding the reproducers' s.toml."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(SCENARIO)
    return tmp_path


def with_trace(repro: Path, csv_text: str) -> str:
    """s.toml's workload replaced by a trace file t.csv holding `csv_text`."""
    (repro / "t.csv").write_text(csv_text)
    text = SCENARIO
    workload = text[text.index("[workload]") : text.index("[[systems]]")]
    (repro / "t.toml").write_text(text.replace(workload, TRACE_WORKLOAD))
    return "t.toml"


def test_02_sweep_jobs_beyond_a_c_int(repro: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(
        capsys,
        "sweep",
        "s.toml",
        "--out",
        "o",
        "--param",
        "seed=1,2",
        "--jobs",
        "99999999999999999999",
    )
    refused(result, "--jobs", "1 to 1024")


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e300", "-1"])
def test_03_kv_weights_not_finite(capsys: pytest.CaptureFixture[str], value: str) -> None:
    result = run_cli(
        capsys, "kv", "--model", "llama-2-7b", "--seq-len", "100", "--weights-gib", value
    )
    refused(result, "--weights-gib", "0 to 1,000,000")


def test_04_hf_config_beyond_float_range_and_degenerate(
    repro: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "intermediate_size": 1376,
        "vocab_size": 32000,
    }
    (repro / "big.json").write_text(json.dumps(base | {"hidden_size": 10**400}))
    (repro / "tiny.json").write_text(json.dumps(base | {"hidden_size": 4}))
    (repro / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (repro / "big.toml").write_text(
        SCENARIO.replace('preset = "llama-2-7b"', 'config = "big.json"')
    )
    refused(
        run_cli(capsys, "run", "big.toml", "--no-report", "--out", "o"), "hidden_size", "digits"
    )
    refused(run_cli(capsys, "kv", "--model", "big.json", "--seq-len", "100"), "hidden_size")
    for args in ([], ["--gpu", "a100-80gb"]):
        tiny = run_cli(capsys, "kv", "--model", "tiny.json", "--seq-len", "100", *args)
        refused(tiny, "tiny.json", "hidden_size (4)", "num_attention_heads (8)")
    refused(run_cli(capsys, "kv", "--model", "deep.json", "--seq-len", "100"), "nested too deeply")


def test_06_scenarios_show_a_binary_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    binary = tmp_path / "binary.toml"
    binary.write_bytes(bytes(range(256)))
    refused(run_cli(capsys, "scenarios", "show", str(binary)), "binary.toml", "not UTF-8 text")


def _sweep(capsys: pytest.CaptureFixture[str], out: str, *more: str) -> CliResult:
    return run_cli(
        capsys, "sweep", "s.toml", "--param", "seed=1,2,3", "--jobs", "1", "--out", out, *more
    )


def _entries(out: Path) -> list[Path]:
    return sorted((out / "cache").glob("*.json"))


def test_07_a_damaged_sweep_cache_is_simulated_again(
    repro: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _sweep(capsys, "a").exit_code == 0
    expected = (repro / "a" / "sweep.csv").read_text()
    damage = [
        lambda p: (p.unlink(), p.mkdir()),  # an entry is a folder
        lambda p: p.write_text('{"summary": {}}'),  # no counts
        lambda p: p.write_text('{"summary": {"num_finished": "three"}}'),  # a word
        lambda p: p.write_text(p.read_text().replace('"duration_s": ', '"x": NaN, "duration_s": ')),
        lambda p: p.write_bytes(b"\xff\xfe"),  # not text
    ]
    for hurt in damage:
        hurt(_entries(repro / "a")[0])
        result = _sweep(capsys, "a")
        assert result.exit_code == 0, result.err
        assert "1 simulated, 2 from the cache" in result.out
        assert (repro / "a" / "sweep.csv").read_text() == expected
    # A point's frames are cached only for the point shown in detail.
    assert _sweep(capsys, "a", "--detail", "last").exit_code == 0
    frames = next(p for p in (repro / "a" / "cache").iterdir() if p.is_dir())
    shutil.rmtree(frames)
    frames.write_text("a file where a point's frames belong")
    result = _sweep(capsys, "a", "--detail", "last")
    assert result.exit_code == 0 and "1 simulated, 2 from the cache" in result.out, result.err
    assert frames.is_dir()
    (repro / "b").mkdir()
    (repro / "b" / "cache").write_text("not a folder")
    refused(_sweep(capsys, "b"), "b/cache", "not a folder")


def test_07_an_unwritable_sweep_cache_is_refused_before_simulating(
    repro: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repro / "u" / "cache").mkdir(parents=True)
    (repro / "u" / "cache" / "x.json").write_text("{}")  # a sweep's folder, not a stranger's
    with read_only(repro / "u" / "cache"):
        refused(_sweep(capsys, "u"), "cannot write the sweep cache")


def test_08_deeply_nested_keys(repro: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repro / "deep.toml").write_text("a" + ".a" * 5000 + " = 1\n" + SCENARIO)
    refused(run_cli(capsys, "validate", "deep.toml"), "deep.toml", "nested more than 16 deep")
    deep_value = "{a=" * 20 + "1" + "}" * 20
    refused(run_cli(capsys, "validate", "s.toml", "--set", f"workload={deep_value}"), "nested")


def test_10_kv_block_counts_the_simulator_cannot_hold(
    repro: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    explicit = run_cli(capsys, "validate", "s.toml", "--set", "systems.num_kv_blocks=1000000000")
    refused(explicit, "systems[0].num_kv_blocks", "16777216")
    derived = run_cli(
        capsys,
        "validate",
        "s.toml",
        "--set",
        "gpu.memory_gib=100000",
        "--set",
        "systems.block_size=1",
    )
    refused(derived, "KV blocks (block_size 1), more than", "larger block_size")


def test_11_a_fifo_as_a_length_distribution_path(
    repro: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(repro / "t.csv")
    text = SCENARIO.replace(
        '[workload.prompt]\nkind = "fixed"\nvalue = 32',
        '[workload.prompt]\nkind = "empirical"\npath = "t.csv"\ncolumn = "num_prefill_tokens"',
    )
    (repro / "f.toml").write_text(text)
    refused(run_cli(capsys, "validate", "f.toml"), "workload.prompt.path", "not a regular file")


@pytest.mark.parametrize(("prompt", "output"), [("1e19", "5"), ("20", "1e300"), ("2", "1e9.5")])
def test_12_trace_token_counts_beyond_int64(
    repro: Path, capsys: pytest.CaptureFixture[str], prompt: str, output: str
) -> None:
    name = with_trace(
        repro, f"arrived_at,num_prefill_tokens,num_decode_tokens\n0,{prompt},{output}\n"
    )
    result = run_cli(capsys, "run", name, "--no-report", "--out", "o")
    refused(result, "t.csv", "line 2", "1 to 1,000,000,000")
    assert not (repro / "o").exists()


def test_13_a_trace_row_with_an_extra_field(
    repro: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = with_trace(
        repro, "arrived_at,num_prefill_tokens,num_decode_tokens\n0,20,5,7\n1,30,6,8\n"
    )
    refused(
        run_cli(capsys, "run", name, "--no-report", "--out", "o"),
        "line 2: 4 fields, the header has 3",
    )


def test_16_swap_with_no_swap_block(repro: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(
        capsys,
        "validate",
        "s.toml",
        "--set",
        "systems.preemption=swap",
        "--set",
        "systems.swap_space_gib=1e-9",
    )
    refused(result, "systems[0].swap_space_gib", "holds no KV block", "at least 0.00781 GiB")


@pytest.mark.parametrize("tp", ["3", "1000000"])
def test_19_kv_tensor_parallel_that_does_not_divide_the_heads(
    capsys: pytest.CaptureFixture[str], tp: str
) -> None:
    result = run_cli(capsys, "kv", "--model", "llama-2-7b", "--seq-len", "100", "--tp", tp)
    refused(result, "--tp", "32 attention heads", "valid: 1, 2, 4, 8, 16, 32")


def _profile(**decode: float) -> dict[str, object]:
    """Reproducer 14's profile: llama-2-7b's shapes, times fit to an H200's speed, said to be
    an A100's (a profile of another catalog GPU is refused: test_profile_checks.py)."""
    shapes = dict(
        name="llama-2-7b",
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        head_dim=128,
        hidden_size=4096,
        intermediate_size=11008,
        vocab_size=32000,
        is_gated_mlp=True,
        max_seq_len=4096,
        num_params=6740000000,
    )
    return {
        "schema": "pagesim-profile",
        "schema_version": 1,
        "provenance": {"device": "a100"},
        "model": shapes,
        "measured": {"tensor_parallel": 1, "block_size": 16},
        "copy_bandwidth": {"median_bps": 1e12},
        "overhead": {"empty_step_s": 1e-4},
        "decode_attention": {
            "coef": {"a_s": 1e-5, "b_s_per_kv_token": 1e-9, "c_s_per_seq": 1e-7} | decode,
            "range": {"kv_tokens": [16, 100000], "num_seqs": [1, 256]},
            "held_out": {},
        },
        "prefill_attention": {
            "coef": {"a_s": 2e-5, "b_s_per_token_sq": 1e-12, "c_s_per_token": 1e-8},
            "range": {"sum_sq": [256, 67108864], "tokens": [16, 8192]},
            "held_out": {},
        },
        "gemm": {"tokens": [1, 64, 1024], "time_s": [1e-4, 1.2e-4, 1e-3], "held_out": {}},
        "lm_head": {"tokens": [1, 64, 1024], "time_s": [2e-4, 2.1e-4, 1e-3], "held_out": {}},
    }


def _with_profile(repro: Path, name: str, kind: str = "profile") -> str:
    (repro / f"{name}.toml").write_text(
        SCENARIO + f'\n[execution]\nkind = "{kind}"\nprofile = "{name}.json"\n'
    )
    return f"{name}.toml"


@pytest.mark.parametrize("kind", ["profile", "roofline"])
def test_14a_a_profile_is_checked_whenever_given(
    repro: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    (repro / "garbage.json").write_bytes(bytes(range(256)))
    name = _with_profile(repro, "garbage", kind)
    refused(run_cli(capsys, "validate", name), "execution.profile", "garbage.json")


def test_14b_a_profile_time_that_multiplies_to_infinity(
    repro: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repro / "inf.json").write_text(json.dumps(_profile(a_s=1e308)))
    result = run_cli(capsys, "run", _with_profile(repro, "inf"), "--no-report", "--out", "i")
    refused(result, "decode_attention.coef.a_s", "1e+308", "largest plausible value")
    assert not (repro / "i").exists()


def test_14c_a_profile_faster_than_the_gpu_is_warned_of(
    repro: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (repro / "good.json").write_text(json.dumps(_profile()))
    result = run_cli(capsys, "run", _with_profile(repro, "good"), "--no-report", "--out", "ok")
    assert result.exit_code == 0, result.err
    summary = json.loads((repro / "ok" / "v0" / "summary.json").read_text())["summary"]
    assert summary["mbu"] > 1  # the H200 fit prices steps faster than an A100 can move bytes
    # Said once (beside the profile's own warning: a step priced beyond the datasheet),
    # naming the GPU and the profile's device.
    warning = [line for line in result.err.splitlines() if "over the run" in line]
    assert len(warning) == 1 and warning[0].startswith("warning: v0: MBU")
    assert "beyond the peak of a100-80gb" in warning[0]
    assert "a profile measured on a100" in warning[0]


def test_15_v0_token_cap_below_the_model_length_is_refused(
    repro: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_cli(capsys, "validate", "s.toml", "--set", "systems.max_num_batched_tokens=8")
    refused(result, "systems[0].max_num_batched_tokens", "8")
