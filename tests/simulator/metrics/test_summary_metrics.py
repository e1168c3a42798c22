"""The summary's figures mean what their glossary entries say (issue 12, item 6): batch size is
the requests that ran, time averages leave the warm-up out, and rates are taken over the arrival
window with the drain apart.

What vLLM reports, for comparison: the batch that ran is SchedulerOutput.num_scheduled_tokens's
requests (v0.11.0 v1/core/sched/output.py), while its vllm:num_requests_running gauge is
len(Scheduler.running) after the step's finished requests left (the undercount this file
rules out); `vllm bench serve` (v0.11.0 vllm/benchmarks/serve.py calculate_metrics) divides
completed requests by the whole benchmark duration, drain included: pagesim's
throughput_req_s_with_drain."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sim_helpers import explicit_workload, poisson_workload, scenario, system

from pagesim.simulator.core.config import Policy, StopConfig
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate


def test_a_batch_of_seven_reads_seven() -> None:
    """Seven equal requests arrive together and run together from first step to last: every
    step's batch is 7 requests, and so is its mean (2 samples each under V0: 14 sequences)."""
    burst = [(20, 12, 0.0)] * 7
    v1 = simulate(scenario(explicit_workload(burst), system(Policy.VLLM_V1)))
    assert set(v1.steps["num_batch_requests"]) == {7}
    # Duration-weighted means of a constant: 7 up to the float rounding of the weights.
    assert v1.summary["mean_batch_requests"] == pytest.approx(7.0, rel=1e-12)
    assert v1.summary["mean_batch_seqs"] == pytest.approx(7.0, rel=1e-12)
    pairs = explicit_workload(burst, sampling=SamplingKind.PARALLEL, num_seqs=2)
    v0 = simulate(scenario(pairs, system(Policy.VLLM_V0)))
    assert set(v0.steps["num_batch_requests"]) == {7}
    assert v0.summary["mean_batch_requests"] == pytest.approx(7.0)
    # The first step computes the 7 prompts (one sequence each); V0 forks each into 2 after it.
    assert list(v0.steps["num_seqs"])[:2] == [7, 14] and set(v0.steps["num_seqs"][1:]) == {14}


def test_time_averages_leave_the_warm_up_out() -> None:
    """A memory share in the summary is the duration-weighted mean over the steps that start at
    or after the warm-up, not over the ramp-up too."""
    base = scenario(poisson_workload(120, 4.0), system(Policy.VLLM_V1))
    warm = replace(base, stop=StopConfig(warmup_s=10.0))
    result = simulate(warm)
    steps = result.steps
    kept = steps[steps["start_s"] >= 10.0]
    assert 0 < len(kept) < len(steps)
    capacity = result.summary["kv_capacity_tokens"]
    assert isinstance(capacity, int)
    expected = float(np.average(kept["kv_token_slots"], weights=kept["duration_s"])) / capacity
    assert result.summary["kv_token_share"] == pytest.approx(expected, rel=1e-9)
    whole = simulate(base).summary["kv_token_share"]
    assert isinstance(whole, float) and whole != pytest.approx(expected, rel=1e-3)


def test_a_system_that_keeps_up_reads_the_offered_rate() -> None:
    """0.5 req/s offered to a system far from saturation: throughput over the arrival window
    reads the sample's own rate, about 0.5; the rate with the drain divides by the whole run."""
    result = simulate(scenario(poisson_workload(400, 0.5, 100, 50), system(Policy.VLLM_V1)))
    requests = result.requests
    span = requests["arrival_s"].max() - requests["arrival_s"].min()
    offered = (len(requests) - 1) / span  # the sample's own rate
    assert offered == pytest.approx(0.5, rel=0.15)  # 400 exponential gaps: about 5% sd
    assert result.summary["throughput_req_s"] == pytest.approx(offered, rel=0.01)
    assert result.summary["throughput_req_s_with_drain"] == pytest.approx(
        len(requests) / (result.summary["duration_s"] - requests["arrival_s"].min())
    )
    last = requests["arrival_s"].max()
    assert result.summary["drain_s"] == pytest.approx(result.summary["duration_s"] - last)


def test_token_throughput_counts_every_token_made_in_the_window() -> None:
    """One long request decodes alone; a second arrives at 1 s and closes the window. Every
    step of the first makes one token, so the window's token rate is the steps that ended by
    1 s, per second; the request finishes later, so a count of finished requests' tokens would
    read 0."""
    result = simulate(
        scenario(explicit_workload([(16, 400, 0.0), (16, 2, 1.0)]), system(Policy.VLLM_V1))
    )
    steps = result.steps
    ends = steps["start_s"] + steps["duration_s"]
    made_by_1s = int((ends <= 1.0).sum())  # one token per step: the request runs alone so far
    assert 0 < made_by_1s < 400
    assert result.summary["throughput_tok_s"] == pytest.approx(made_by_1s / 1.0)
    assert result.summary["throughput_req_s"] == 0.0
    assert result.summary["throughput_tok_s_with_drain"] == pytest.approx(
        402 / result.summary["duration_s"]
    )
