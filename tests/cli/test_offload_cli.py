"""A KV offload tier from the command line: bad [systems.kv_offload] input is one line naming
the key, exit 2; the built-in kv_offload_mooncake's report shows prompt KV by tier."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import refused, run_cli


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "systems[1].kv_offload.load_gbps=-5",
            "systems[1].kv_offload.load_gbps: must be in (0, 100000], got -5",
        ),
        (
            "systems[1].kv_offload.store_gbps=0",
            "systems[1].kv_offload.store_gbps: must be in (0, 100000], got 0",
        ),
        (
            "systems[1].kv_offload.cpu_gib=0.00001",
            "systems[1].kv_offload.cpu_gib: 1e-05 GiB over 1 GPU(s) holds no KV block of 16 "
            "tokens (917,504 bytes per GPU); give at least 0.000854 GiB",
        ),
        (
            "systems[1].kv_offload.link_gbps=5",
            "unknown key 'link_gbps' (did you mean 'load_gbps'?) in systems.kv_offload; valid: "
            "cpu_gib, load_gbps, store_gbps",
        ),
        (
            "systems[1].enable_prefix_cache=false",
            "systems[1].kv_offload.cpu_gib: needs enable_prefix_cache",
        ),
    ],
)
def test_bad_offload_input_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], override: str, message: str
) -> None:
    done = run_cli(capsys, "validate", "kv_offload_mooncake", "--set", override)
    refused(done, message)


def test_a_tier_on_a_v0_system_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    done = run_cli(
        capsys,
        "validate",
        "textbook_static_vs_continuous",
        "--set",
        "systems[1].kv_offload.cpu_gib=4",
    )
    refused(done, "systems[1].kv_offload: only used by vllm-v1")


def test_the_builtin_report_shows_prompt_kv_by_tier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ("run", "kv_offload_mooncake", "--out", str(out))
    done = run_cli(capsys, *args, "--set", "workload.mooncake.num_requests=40")
    assert done.exit_code == 0, done.err
    assert (out / "plots" / "hits_by_tier.png").exists()
    html = (out / "report.html").read_text()
    assert "Prompt KV by tier" in html and "CPU-tier hit rate" in html
    commands = (out / "vllm_commands.sh").read_text()
    assert "--kv-offloading-size 256" in commands and "--kv-offloading-backend native" in commands
