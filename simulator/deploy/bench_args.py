"""The benchmark command that replays a scenario's traffic against a `vllm serve` of it.

v0.11 and later: `vllm bench serve` (vllm/benchmarks/serve.py and datasets); v0.6.4:
`python benchmarks/benchmark_serving.py` from the vLLM repository (the wheel ships none).
What each replays, and what it cannot (listed, never faked):

- Arrivals: Poisson -> --request-rate; gamma -> --burstiness = 1 / cv^2 (the benchmark draws
  gaps from a gamma of shape `burstiness`, whose CV is 1 / sqrt(shape); v0.11+); all at once
  -> --request-rate inf. Constant gaps, recorded timestamps (a CSV trace) and multi-turn
  sessions have no equivalent: Poisson at the same mean rate stands in, and the command says so.
- A Mooncake trace from v0.33: --dataset-name timed_trace replays its rows, times and 512-token
  hash blocks (vllm/benchmarks/datasets/datasets.py TimedTrace; timestamps in ms ->
  --timed-trace-sec-multiplier 0.001 / time_scale).
- Lengths: the random dataset. v0.11+ draws each length uniformly in [L(1 - r), L(1 + r)]
  (--random-range-ratio r < 1); v0.6 in [L r, L]; one r for prompt and output. pagesim gives
  it the means of the scenario's own requests and the prompt's spread (a uniform of that mean
  and standard deviation): exact for a fixed or uniform workload whose two lengths spread
  alike, the distributions' shapes lost otherwise (said).
- One shared system prompt on every request -> --random-prefix-len.
- --ignore-eos: answers run to their drawn length, as pagesim's do. --goodput (v0.11+): the
  scenario's SLO, in ms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pagesim.simulator.core.config import ArrivalKind, Scenario
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.deploy.argv import Argv
from pagesim.simulator.deploy.eras import Era, era_flags
from pagesim.simulator.deploy.models import model_reference
from pagesim.simulator.workload.stream import iter_requests

MAX_RANGE_RATIO = 0.99  # v0.11+ refuses a range ratio of 1 or more (RandomDataset.sample)


@dataclass(frozen=True)
class Lengths:
    """Mean and standard deviation of one length over the scenario's requests."""

    mean: float
    std: float

    def v1_args(self) -> tuple[int, float]:
        """(L, r) of v0.11+'s uniform [L(1 - r), L(1 + r)] with this mean and spread."""
        length = max(1, round(self.mean))
        ratio = min(MAX_RANGE_RATIO, math.sqrt(3) * self.std / self.mean) if self.mean else 0.0
        return length, round(ratio, 3)

    def v0_ratio(self) -> float:
        """r of v0.6's uniform [L r, L] with this mean and spread."""
        high = max(1.0, self.mean + math.sqrt(3) * self.std)
        low = max(1.0, self.mean - math.sqrt(3) * self.std)
        return round(low / high, 3)

    def v0_length(self, ratio: float) -> int:
        """L of v0.6's uniform [L r, L] with this mean, whatever the (shared) ratio."""
        return max(1, round(2.0 * self.mean / (1.0 + ratio)))


@dataclass(frozen=True)
class Traffic:
    """What the scenario's requests are, as the benchmark needs them."""

    num_requests: int
    span_s: float  # first to last arrival
    prompt: Lengths
    output: Lengths


def traffic(scenario: Scenario) -> Traffic:
    """Draw the scenario's requests (as a run does, same seed) and measure them."""
    rng = np.random.default_rng(scenario.seed)
    rows = [
        (r.arrival_s, r.prompt_len, r.output_len)
        for r in iter_requests(scenario.workload, scenario.model.max_seq_len, rng)
        if scenario.stop.max_time_s is None or r.arrival_s <= scenario.stop.max_time_s
    ]
    if not rows:
        return Traffic(0, 0.0, Lengths(1.0, 0.0), Lengths(1.0, 0.0))
    table = np.array(rows, dtype=float)
    arrivals, prompts, outputs = table[:, 0], table[:, 1], table[:, 2]
    return Traffic(
        len(rows),
        float(arrivals.max() - arrivals.min()),
        Lengths(float(prompts.mean()), float(prompts.std())),
        Lengths(float(outputs.mean()), float(outputs.std())),
    )


BenchArgs = Argv  # the benchmark's words, its tool's first


def bench_args(scenario: Scenario, era: Era, seen: Traffic) -> BenchArgs:
    """The benchmark's argv (its tool's words first: `vllm bench serve` or the v0.6 script)."""
    out = BenchArgs(era_flags(era).bench_tool.split())
    out.add("--backend", "vllm")
    out.add("--model", model_reference(scenario.model)[0])
    workload = scenario.workload
    trace = workload.mooncake
    if trace is not None and era.has((0, 33, 0)):
        out.add("--dataset-name", "timed_trace")
        out.add("--dataset-path", trace.path.name)
        out.add("--timed-trace-chunk-hash-size", 512)
        out.add("--timed-trace-sec-multiplier", f"{0.001 / trace.time_scale:g}")
        if trace.offset:
            out.unflagged.append(
                f"trace offset {trace.offset}: timed_trace reads from the first row; give it a "
                f"file starting at row {trace.offset}"
            )
    else:
        _lengths(out, scenario, era, seen)
        _arrivals(out, scenario, era, seen)
    out.add("--num-prompts", seen.num_requests)
    out.add("--ignore-eos")
    out.add("--seed", scenario.seed)
    _goodput(out, scenario, era)
    if workload.sampling is not SamplingKind.SINGLE or workload.num_seqs > 1:
        out.unflagged.append(
            f"{workload.sampling.value} sampling with n = {workload.num_seqs}: the benchmark "
            "sends one sequence per request"
        )
    if scenario.stop.max_time_s is not None:
        out.unflagged.append(
            f"stop at {scenario.stop.max_time_s:g} s: the benchmark runs until every request "
            "is answered (--num-prompts counts those that arrive by then)"
        )
    return out


def _lengths(out: BenchArgs, scenario: Scenario, era: Era, seen: Traffic) -> None:
    out.add("--dataset-name", "random")
    if era.is_v1:
        prompt_len, prompt_ratio = seen.prompt.v1_args()
        output_len, output_ratio = seen.output.v1_args()
    else:  # one ratio for both, each length keeping its mean
        prompt_ratio, output_ratio = seen.prompt.v0_ratio(), seen.output.v0_ratio()
        prompt_len = seen.prompt.v0_length(prompt_ratio)
        output_len = seen.output.v0_length(prompt_ratio)
    groups = scenario.workload.prefix_groups
    prefix = groups[0].num_tokens if len(groups) == 1 and groups[0].fraction >= 1.0 else 0
    out.add("--random-input-len", max(1, prompt_len - prefix))
    out.add("--random-output-len", output_len)
    # one ratio draws both lengths: the prompt's spread is kept, both means
    out.add("--random-range-ratio", f"{prompt_ratio:g}")
    if prefix:
        out.add("--random-prefix-len", prefix)
    elif groups:
        out.unflagged.append(
            "prefix_groups: the random dataset shares one prefix with every request or none"
        )
    kinds = {scenario.workload.prompt.kind.value, scenario.workload.output.kind.value}
    if kinds - {"fixed", "uniform"} or output_ratio != prompt_ratio:
        out.unflagged.append(
            f"lengths: uniform draws with the scenario's mean and spread (prompt "
            f"{seen.prompt.mean:.0f} +- {seen.prompt.std:.0f}, output {seen.output.mean:.0f} +- "
            f"{seen.output.std:.0f} tokens); the distributions' shapes differ"
        )


def _arrivals(out: BenchArgs, scenario: Scenario, era: Era, seen: Traffic) -> None:
    workload = scenario.workload
    arrival = workload.arrival
    mean_rate = (seen.num_requests - 1) / seen.span_s if seen.span_s > 0 else math.inf
    if workload.explicit or arrival.kind is ArrivalKind.BURST:
        rate = math.inf if arrival.kind is ArrivalKind.BURST else mean_rate
    elif arrival.kind in (ArrivalKind.POISSON, ArrivalKind.GAMMA, ArrivalKind.CONSTANT):
        rate = arrival.rate_per_s
    else:
        rate = mean_rate
    out.add("--request-rate", "inf" if math.isinf(rate) else f"{rate:.6g}")
    if arrival.kind is ArrivalKind.GAMMA and arrival.cv != 1.0:
        if era.is_v1:
            out.add("--burstiness", f"{1.0 / arrival.cv**2:.6g}")
        else:
            out.unflagged.append(f"gamma arrivals (cv {arrival.cv:g}): v0.6 sends Poisson only")
    stand_in = {
        ArrivalKind.CONSTANT: "constant gaps",
        ArrivalKind.TRACE: "the trace's recorded times",
    }.get(arrival.kind)
    if workload.mooncake is not None:
        stand_in = "the Mooncake trace's times (timed_trace replays them from v0.33)"
    if workload.sessions is not None or workload.session_trace is not None:
        stand_in = "multi-turn sessions (each turn waits for the answer before)"
    if stand_in is not None and not math.isinf(rate):
        out.unflagged.append(
            f"arrivals: {stand_in} have no benchmark equivalent; Poisson at the same mean rate "
            f"({rate:.4g} req/s) stands in"
        )


def _goodput(out: BenchArgs, scenario: Scenario, era: Era) -> None:
    slo = scenario.slo
    if slo.ttft_s is None and slo.tpot_s is None:
        return
    if not era.is_v1:
        out.unflagged.append("SLO: v0.6's benchmark has no --goodput; judge its percentiles")
        return
    parts = []
    if slo.ttft_s is not None:
        parts.append(f"ttft:{slo.ttft_s * 1e3:g}")
    if slo.tpot_s is not None:
        parts.append(f"tpot:{slo.tpot_s * 1e3:g}")
    out.add("--goodput", *parts[:1])
    out.argv.extend(parts[1:])
