"""The GPUs of 2026 at the door (scenario/hardware_fit.py): an FP4 KV cache where vLLM runs
none, a scale-up domain larger than the GPU's fabric builds, and a tensor-parallel group larger
than the domain are each one `error:` line naming the key and the valid choices, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import CliResult, refused, run_cli, tiny_scenario


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text(tiny_scenario("gpu_fit"))
    return "s.toml"


def run_with(capsys: pytest.CaptureFixture[str], scenario: str, *sets: str) -> CliResult:
    """`pagesim run scenario --set s` for each of `sets`."""
    return run_cli(capsys, "run", scenario, *(a for s in sets for a in ("--set", s)))


def test_fp4_kv_on_a_gpu_without_fp4_is_refused(
    capsys: pytest.CaptureFixture[str], scenario: str
) -> None:
    result = run_with(capsys, scenario, "gpu.preset=h100-sxm", "model.kv_dtype=nvfp4")
    refused(result, "model.kv_dtype", "nvfp4", "h100-sxm has none", "valid here: fp16, bf16, fp8")
    result = run_with(capsys, scenario, "gpu.preset=mi355x", "model.kv_dtype=nvfp4")
    refused(result, "model.kv_dtype", "mi355x has none")


def test_fp4_kv_before_vllm_0_33_is_refused(
    capsys: pytest.CaptureFixture[str], scenario: str
) -> None:
    """The tiny scenario's system is vLLM V0-era: nvfp4 KV came in vLLM v0.33.0."""
    result = run_with(capsys, scenario, "gpu.preset=b200", "model.kv_dtype=nvfp4")
    refused(result, "model.kv_dtype", "v0.33.0", "the vllm-v0 policy", "valid for it:")


def test_a_gb200_domain_larger_than_72_is_refused(
    capsys: pytest.CaptureFixture[str], scenario: str
) -> None:
    result = run_with(capsys, scenario, "gpu.preset=gb200", "gpu.scale_up_gpus=144")
    refused(result, "gpu.scale_up_gpus", "144 GPUs", "gb200", "valid: 1 to 72")


def test_a_tensor_parallel_group_beyond_the_domain_is_refused(
    capsys: pytest.CaptureFixture[str], scenario: str
) -> None:
    """Llama-2-7B's 32 heads split 16 ways: more than an HGX H100's 8 GPUs, and more than a
    GB200 rack cut down to 8 (its 72 would take it)."""
    result = run_with(capsys, scenario, "gpu.preset=h100-sxm", "model.tensor_parallel=16")
    refused(result, "model.tensor_parallel", "16 GPUs", "h100-sxm", "valid: 1 to 8")
    result = run_with(
        capsys, scenario, "gpu.preset=gb200", "gpu.scale_up_gpus=8", "model.tensor_parallel=16"
    )
    refused(result, "model.tensor_parallel", "gb200", "valid: 1 to 8")
