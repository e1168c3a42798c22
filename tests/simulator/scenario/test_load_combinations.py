"""Scenario files: settings that each parse but cannot work together are refused with one exact
message; independent sample lengths run where they can."""

from __future__ import annotations

import tomllib
from pathlib import Path

import numpy as np
import pytest
from scenario_helpers import MINIMAL, error_of, replaced, write

from pagesim.simulator.core.config import SampleLengths
from pagesim.simulator.engine import simulate
from pagesim.simulator.scenario import load as sc
from pagesim.simulator.scenario.load import describe_scenario, load_scenario, parse_scenario
from pagesim.simulator.workload.stream import iter_requests

COMBINATIONS = [
    (
        replaced(
            'reservation = "pow2"', 'policy = "static"\nstatic_batch_size = 8\nmax_num_seqs = 4'
        ).replace('policy = "orca"\n', ""),
        "systems[1].static_batch_size: 8 exceeds max_num_seqs 4",
    ),
    (
        replaced("num_requests = 10", 'num_requests = 10\nsampling = "beam"\nnum_seqs = 4')
        + "max_num_seqs = 2\n",
        "systems[1].max_num_seqs: 2 is below workload.num_seqs 4: no request could ever run",
    ),
    (
        replaced(
            "num_requests = 10", 'num_requests = 10\nsampling = "parallel"\nnum_seqs = 2'
        ).replace(
            'policy = "orca"\nreservation = "pow2"',
            'policy = "vllm-v0"\npreemption = "auto"\nswap_space_gib = 0.0',
        ),
        "systems[1].swap_space_gib: must be > 0: preemption 'auto' swaps",
    ),
    (
        MINIMAL + "[[workload.prefix_groups]]\nnum_tokens = 100\nfraction = 0.7\n"
        "[[workload.prefix_groups]]\nnum_tokens = 10\nfraction = 0.4\n",
        "workload.prefix_groups: the groups' fractions add up to more than 1",
    ),
    (
        MINIMAL + "[[workload.prefix_groups]]\nnum_tokens = 5000\nfraction = 0.5\n",
        "workload.prefix_groups[0].num_tokens: must be in [1, 4096], got 5000",
    ),
    (
        MINIMAL + "[[workload.requests]]\nprompt_len = 3\noutput_len = 4\n",
        "workload.num_requests: not used with [[workload.requests]], which replace the generators",
    ),
    (
        replaced("num_requests = 10", "num_requests = 10\ntrace_offset = 3"),
        "workload.trace_offset: only used with workload.trace",
    ),
    (
        replaced('kind = "poisson"\nrate_per_s = 2.0', 'kind = "burst"\nrate_per_s = 2.0'),
        'workload.arrival.rate_per_s: not used with kind = "burst"',
    ),
    (
        replaced(
            'kind = "poisson"\nrate_per_s = 2.0', 'kind = "poisson"\nrate_per_s = 2.0\ncv = 2'
        ),
        'workload.arrival.cv: only used with kind = "gamma", not "poisson"',
    ),
    (
        replaced('kind = "poisson"\nrate_per_s = 2.0', 'kind = "gamma"'),
        "workload.arrival.rate_per_s: required key is missing (a number in (0, 1000000])",
    ),
    (
        replaced("low = 8\nhigh = 32", "low = 8\nhigh = 4"),
        "workload.output.high: must be in [8, 1000000000], got 4",
    ),
    (
        replaced('kind = "fixed"\nvalue = 64', 'kind = "trace"'),
        'workload.prompt.kind: kind = "trace" needs workload.trace (the trace to read)',
    ),
    (
        replaced(
            'kind = "fixed"\nvalue = 64', 'kind = "empirical"\ntrace = "azure-conv"\npath = "x"'
        ),
        "workload.prompt: kind = \"empirical\" needs exactly one of 'trace' (a built-in trace: "
        "azure-conv, azure-code, arxiv-summarization) or 'path' (a CSV file), and a 'column'",
    ),
    (
        replaced(
            'kind = "fixed"\nvalue = 64',
            'kind = "empirical"\ntrace = "arxiv-summarization"\ncolumn = "pd_ratio"',
        ),
        f"workload.prompt.column: '{sc.BUILTIN_TRACES['arxiv-summarization']}' column "
        "'pd_ratio': line 2 holds "
        "'69.85185185185185', not a whole number of tokens from 1 to 1,000,000,000",
    ),
    (
        replaced("num_requests = 10", 'trace = "azure-code"\ntrace_offset = 8819').replace(
            'kind = "poisson"\nrate_per_s = 2.0', 'kind = "trace"'
        ),
        f"workload.trace_offset: must be < 8819, the rows of '{sc.BUILTIN_TRACES['azure-code']}'",
    ),
    (
        replaced('preset = "llama-2-7b"', 'preset = "llama-2-7b"\ntensor_parallel = 3'),
        "model.tensor_parallel: 3 does not divide llama-2-7b's 32 heads",
    ),
    (
        MINIMAL + "[stop]\nmax_time_s = 10\nwarmup_s = 10\n",
        "stop.warmup_s: must be < max_time_s (10)",
    ),
    (
        MINIMAL
        + '[sweep]\naxes = [{ path = "seed", values = [1] }, { path = "seed", values = [2] }]\n',
        "sweep.axes[1].path: 'seed' is already an axis",
    ),
    (
        MINIMAL + '[sweep]\naxes = [{ path = "sweep.axes", values = [1] }]\n',
        "sweep.axes[0].path: a sweep axis cannot change [sweep] itself",
    ),
    (
        MINIMAL + '[sweep]\naxes = [{ path = "seed", values = [] }]\n',
        "sweep.axes[0].values: expected a non-empty array of values, got array []",
    ),
    (
        MINIMAL + "[sweep]\naxes = [" + '{ path = "seed", values = [1] }, ' * 3 + "]\n",
        "sweep.axes: at most 2 axes, got 3",
    ),
    (
        MINIMAL + '[sweep]\naxes = [{ path = "systems.enable_prefix_cache", values = [true] }]\n',
        "sweep.axes[0].values[0]: systems.enable_prefix_cache = true: "
        "systems[1].enable_prefix_cache: prefix caching needs a paged policy (vllm-v0, vllm-v1); "
        "the policy is 'orca'",
    ),
]


@pytest.mark.parametrize(("text", "message"), COMBINATIONS)
def test_combinations_that_cannot_work(mini: Path, text: str, message: str) -> None:
    assert error_of(write(mini.parent, text, "combo.toml")) == f"combo.toml: {message}"


def test_parallel_samples_of_their_own_lengths(mini: Path) -> None:
    """workload.sample_lengths = "independent": each of n samples draws its own length from
    the output distribution (the request's output_len is the longest); only V1's fan-out runs
    them apart, so other policies are refused with the way out, and beams cannot use it."""
    text = (
        MINIMAL.replace(
            "num_requests = 10",
            'num_requests = 10\nsampling = "parallel"\nnum_seqs = 3\n'
            'sample_lengths = "independent"',
        )
        .replace('policy = "vllm-v0"', 'policy = "vllm-v1"')
        .replace('policy = "orca"\nreservation = "pow2"\n', "")
    )
    scenario = load_scenario(write(mini.parent, text, "v1.toml"))
    assert scenario.workload.sample_lengths is SampleLengths.INDEPENDENT
    requests = list(iter_requests(scenario.workload, 4096, np.random.default_rng(0)))
    assert all(len(r.sample_output_lens) == 3 for r in requests)
    assert all(r.output_len == max(r.sample_output_lens) for r in requests)
    assert all(8 <= n <= 32 for r in requests for n in r.sample_output_lens)
    assert any(len(set(r.sample_output_lens)) > 1 for r in requests)
    result = simulate(scenario, check_invariants=True)
    assert list(result.requests["num_output_tokens"]) == [
        sum(r.sample_output_lens) for r in requests
    ]
    assert parse_scenario(tomllib.loads(describe_scenario(scenario)), scenario.source) == scenario

    v0 = write(mini.parent, text.replace('policy = "vllm-v1"', 'policy = "vllm-v0"'), "v0.toml")
    assert 'workload.sample_lengths = "independent" needs policy "vllm-v1"' in error_of(v0)
    beams = write(mini.parent, text.replace('"parallel"', '"beam"'), "beam.toml")
    assert '"independent" needs sampling = "parallel"' in error_of(beams)
