"""DP attention + wide EP (issue 31 item 2): every DP rank simulated and lock-stepped, the
router's choice of rank, the all-to-all's bytes for DeepSeek-V3's shape by hand, EPLB's
placement, and bad [wide_ep] input refused with one line and exit 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_helpers import run_cli
from hypothesis import given
from hypothesis import strategies as st

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.wide_ep import All2AllBackend
from pagesim.simulator.engine import simulate
from pagesim.simulator.execution.all_to_all import AllToAll
from pagesim.simulator.execution.expert_load import (
    eplb_placement,
    expert_loads,
    hot_share,
    linear_placement,
    placement_hot_share,
)
from pagesim.simulator.scenario.load import load_scenario

ONE_BUSY_ONE_IDLE = """
name = "sync"
[model]
preset = "qwen3-30b-a3b"
data_parallel = 2
expert_parallel = true
{wide_ep}
[gpu]
preset = "h200-sxm"
[workload]
[[workload.requests]]
prompt_len = 2000
output_len = 4
arrival_s = 0.0
[[workload.requests]]
prompt_len = 16
output_len = 2
arrival_s = 0.0
[[systems]]
name = "v1"
policy = "vllm-v1"
"""


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_slower_rank_sets_every_step_and_the_idle_rank_runs_dummy_steps(here: Path) -> None:
    (here / "s.toml").write_text(ONE_BUSY_ONE_IDLE.format(wide_ep=""))
    result = simulate(load_scenario(here / "s.toml"))
    # The router: both ranks score 0, the first goes to rank 0 (ties to the lowest rank); rank
    # 0 then counts one waiting request (4 x 1 + 0), so the second goes to rank 1.
    assert result.requests.set_index("request_id")["replica"].to_dict() == {0: 0, 1: 1}
    steps = result.steps
    busy, light = steps[steps["replica"] == 0], steps[steps["replica"] == 1]
    # Rank 0: its 2000-token prefill, then 3 decode steps; rank 1: a 16-token prefill and one
    # decode step, then nothing to run for the group's last two steps: two dummy steps.
    assert list(busy["num_prefill_tokens"]) == [2000, 0, 0, 0]
    assert list(light["num_prefill_tokens"]) == [16, 0]
    assert result.summary["dp_group_steps"] == 4
    assert result.summary["dp_dummy_steps"] == 2
    # Where both ran, they started and ended together: the slower rank's step.
    shared = busy.iloc[:2]
    assert list(light["start_s"]) == list(shared["start_s"])
    assert list(light["duration_s"]) == list(shared["duration_s"])
    # The light rank's 16-token prefill waited for the heavy one's 2000: the wait is counted.
    wait_share = result.summary["dp_sync_wait_share"]
    assert isinstance(wait_share, float) and wait_share > 0
    # The group's steps follow one another without a gap on the busy rank.
    ends = (busy["start_s"] + busy["duration_s"]).to_numpy()
    assert np.allclose(ends[:-1], busy["start_s"].to_numpy()[1:])
    assert result.summary["num_requests"] == 2 and result.summary["num_gpus"] == 2


def deepseek_all_to_all(backend: All2AllBackend, ep: int = 16) -> AllToAll:
    ds, h200 = get_model("deepseek-v3"), get_gpu("h200-sxm")
    assert ds.moe is not None
    return AllToAll(
        backend,
        ep,
        8,
        ds.hidden_size,
        ds.moe.num_experts,
        ds.moe.experts_per_token,
        ds.num_layers - ds.num_dense_mlp_layers,
        h200.interconnect,
        50e9,
    )


def test_deepep_low_latency_bytes_for_deepseek_v3_by_hand() -> None:
    # DeepSeek-V3: hidden 7168, top-8 of 256 routed experts, 61 layers of which the first 3 are
    # dense: 58 MoE layers. DeepEP dispatches in FP8 with one 4-byte scale per 128 channels and
    # combines in BF16, one copy per selected expert:
    dispatch = 8 * (7168 + 7168 // 128 * 4)  # 59,136 B per token
    combine = 8 * 7168 * 2  # 114,688 B per token
    assert (dispatch, combine) == (59_136, 114_688)
    a2a = deepseek_all_to_all(All2AllBackend.DEEPEP_LOW_LATENCY)
    tokens = [128] * 16  # DeepEP's measured point: 128 tokens per rank, EP 16
    assert a2a.step_bytes(tokens) == 128 * (dispatch + combine) * 58
    # At that point the model gives DeepEP's published latencies back (118 us dispatch,
    # 195 us combine per layer at EP 16: deepseek-ai/DeepEP README, low-latency kernels).
    per_layer_s = a2a.step_s(tokens) / 58
    assert per_layer_s == pytest.approx(128 * dispatch / 63e9 + 128 * combine / 74e9)
    assert per_layer_s == pytest.approx(118e-6 + 195e-6, rel=0.03)
    # The busiest sender or the hottest receiver sets the layer's pace.
    assert a2a.step_s([256] + [128] * 15) == pytest.approx(2 * a2a.step_s(tokens))
    assert a2a.step_s(tokens, hot_share=1.5) == pytest.approx(1.5 * a2a.step_s(tokens))


def test_allgather_reducescatter_bytes_by_hand() -> None:
    a2a = deepseek_all_to_all(All2AllBackend.ALLGATHER_REDUCESCATTER)
    # All-gather and reduce-scatter of every rank's hidden states, padded to the largest batch:
    # n T_max h 2 B (n - 1) / n each way, per MoE layer.
    per_way = 16 * 100 * 7168 * 2 * 15 / 16
    assert a2a.step_bytes([100] + [3] * 15) == pytest.approx(2 * per_way * 58)


def test_eplb_evens_a_skewed_placement_by_hand() -> None:
    loads = np.array([3.0, 1.0, 1.0, 1.0])  # one hot expert, 2 GPUs
    assert list(linear_placement(loads, 2)) == [4.0, 2.0]  # hot share 4 / 3
    assert hot_share(linear_placement(loads, 2)) == pytest.approx(4 / 3)
    # 2 redundant slots both go to the hot expert (3 / 1 > 1, then 3 / 2 > 1): three replicas
    # of load 1 and the others: six slots of 1, three per GPU.
    assert list(eplb_placement(loads, 2, 2)) == [3.0, 3.0]
    # Uniform routing: every placement is even.
    assert placement_hot_share(256, 8, 16, 0.0, 0, eplb=False) == 1.0
    skewed = placement_hot_share(256, 8, 16, 1.0, 0, eplb=False)
    balanced = placement_hot_share(256, 8, 16, 1.0, 0, eplb=True, num_redundant=32)
    assert skewed > 1.5 and 1.0 <= balanced < 1.1


@given(
    skew=st.floats(0.0, 2.0),
    seed=st.integers(0, 2**32),
    redundant=st.sampled_from([0, 16, 32]),
)
def test_placements_keep_every_selection(skew: float, seed: int, redundant: int) -> None:
    loads = expert_loads(256, 8, skew, seed)
    assert loads.sum() == pytest.approx(8)
    for per_gpu in (linear_placement(loads, 16), eplb_placement(loads, 16, redundant)):
        assert per_gpu.sum() == pytest.approx(8)
        assert hot_share(per_gpu) >= 1.0


@pytest.mark.parametrize(
    ("wide_ep", "message"),
    [
        (
            "[wide_ep]\nredundant_experts = 2",
            "s.toml: wide_ep.redundant_experts: needs eplb = true (redundant experts are EPLB's)",
        ),
        (
            "[wide_ep]\neplb = true\nredundant_experts = 3",
            "s.toml: wide_ep.redundant_experts: 128 experts + 3 do not divide over the 2 GPUs of "
            "the EP group; valid: 0, 2, 4, ...",
        ),
        (
            '[wide_ep]\nall2all_backend = "pplx"',
            "s.toml: wide_ep.all2all_backend: unknown all2all backend 'pplx'; valid: "
            "allgather_reducescatter, deepep_low_latency, deepep_high_throughput",
        ),
    ],
)
def test_bad_wide_ep_input_is_one_line_and_exit_2(
    here: Path, capsys: pytest.CaptureFixture[str], wide_ep: str, message: str
) -> None:
    (here / "s.toml").write_text(ONE_BUSY_ONE_IDLE.format(wide_ep=wide_ep))
    result = run_cli(capsys, "validate", "s.toml")
    assert result.exit_code == 2
    assert [line for line in result.err.splitlines() if line.strip()] == [f"error: {message}"]
