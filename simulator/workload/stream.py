"""Workload generation: a `WorkloadConfig` becomes a lazy, reproducible stream of `Request`s.

Here: validating a config into a plan, and streaming requests from it. Reading trace CSVs lives
in simulator/workload/traces.py, the per-column samplers in simulator/workload/samplers.py.

Conventions (the ones a reader of a report needs to know):

- Arrivals. Poisson, gamma and constant processes start the clock at 0 and place the *first*
  request at the first gap (not at 0): request i arrives at the sum of i + 1 gaps. Burst puts
  every request at 0. Trace arrivals are the trace's `arrived_at` minus the first used row's value,
  divided by `time_scale`, so a trace slice always starts at 0.
- Shared prefixes. A request joins prefix group g with probability `fraction_g` (at most one
  group); its system prompt precedes the user's prompt, so `prompt_len = prefix_len + sampled`.
- Lengths. A prompt and its output come from one row of a file when both are `trace` (the
  workload trace, row by row) or both `empirical` from one file (a random row; `empirical_pairing
  = "independent"` resamples each column on its own instead). Otherwise each is drawn on its own.
- Maximum length. A row longer than `max_seq_len` is clipped as Vidur's trace generators clip
  it: its prompt is cut by the excess (the shared prefix kept, at least one prompt token left), so
  the real answer length survives and nothing is rejected. Lengths drawn on their own are limited
  as a server limits them: a prompt that already reaches `max_seq_len` is kept as is, for the
  scheduler to reject with a reason (nothing is dropped here); otherwise the output is capped so
  that prompt + output <= max_seq_len, as a server's max-tokens cap does. `WorkloadStats` counts
  each case.
- Randomness. Only the `numpy.random.Generator` passed in is used; numbers are drawn in chunks of
  `CHUNK_SIZE` requests, in a fixed order per chunk (arrival gaps, prompt lengths, output lengths
  or the rows that give both, prefix-group draws), so the same seed gives the same requests and a
  million requests never sit in memory at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pagesim.simulator.core.config import ArrivalKind, LengthKind, SampleLengths, WorkloadConfig
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.limits import MAX_ARRIVAL_S
from pagesim.simulator.core.request import Request, SamplingKind, streamed_request
from pagesim.simulator.workload.number_checks import (
    bad_int,
    check_arrival,
    positive_float,
    positive_int,
)
from pagesim.simulator.workload.samplers import (
    Fixed,
    Independent,
    LengthPairs,
    LengthSource,
    PrefixGroups,
    Rows,
    Sampler,
    arrival_sampler,
    lengths_sampler,
)
from pagesim.simulator.workload.trace_files import BUILTIN_TRACES
from pagesim.simulator.workload.traces import load_trace, read_csv, resolve_trace

CHUNK_SIZE = 4096  # requests whose random numbers are drawn together


@dataclass(slots=True)
class WorkloadStats:
    """How the requests were made, for reports: counted for each request a consumer takes (a
    request drawn but dropped, as the engine drops the first one past `stop.max_time_s`, is not)."""

    num_requests: int = 0
    num_prompt_clipped: int = 0  # rows whose prompt was cut to fit max_seq_len (Vidur's rule)
    num_output_capped: int = 0  # outputs shortened so that prompt + output <= max_seq_len
    num_prompt_too_long: int = 0  # prompts >= max_seq_len, kept for the scheduler to reject
    num_with_prefix: int = 0  # requests that start with a shared system prompt
    length_source: LengthSource | None = None  # set when the stream starts

    def provenance(self) -> dict[str, object]:
        """The counts, and in words where lengths came from and how they were fit to the model."""
        source = self.length_source
        if source is not None and source.is_row:
            limit = "a row longer than max_seq_len has its prompt cut by the excess (Vidur)"
        else:
            limit = "outputs capped at max_seq_len - prompt; prompts >= max_seq_len rejected"
        return {
            "lengths": None if source is None else source.value,
            "max_seq_len_rule": limit,
            "num_requests": self.num_requests,
            "num_prompt_clipped": self.num_prompt_clipped,
            "num_output_capped": self.num_output_capped,
            "num_prompt_too_long": self.num_prompt_too_long,
            "num_with_prefix": self.num_with_prefix,
        }


# ------------------------------------------------------------------------------------ planning


@dataclass(slots=True)
class _Plan:
    num_requests: int
    arrivals: Sampler
    lengths: LengthPairs  # prompt (without a shared prefix) and output lengths
    source: LengthSource
    priority: Sampler
    groups: PrefixGroups
    group_tokens: np.ndarray  # [num_groups + 1] prefix tokens per group index; 0 for "none"
    sampling: SamplingKind
    num_seqs: int
    # Parallel samples of their own lengths (workload.sample_lengths = "independent"): how many
    # lengths a request draws beside its own; 0 when every sample runs the request's length.
    num_extra_lengths: int = 0
    stats: WorkloadStats = field(default_factory=WorkloadStats)
    # The key that places arrivals late, and how to bring them within the clock's range.
    arrival_knob: tuple[str, str] = ("workload.arrival.rate_per_s", "raise the rate")


def _trace_file(workload: WorkloadConfig) -> Path | None:
    by_name = by_path = None
    if workload.trace_name is not None:
        by_name = resolve_trace(workload.trace_name, "workload.trace_name")
    if workload.trace_path is not None:
        by_path = resolve_trace(workload.trace_path, "workload.trace_path")
    if by_name is not None and by_path is not None and by_name.resolve() != by_path.resolve():
        raise InputError(
            f"workload: trace_name ({workload.trace_name}) and trace_path ({workload.trace_path}) "
            "name different files; give one of them"
        )
    return by_path or by_name


def _plan(workload: WorkloadConfig, max_seq_len: int) -> _Plan:
    """Validate everything up front (so errors surface at the call, not mid-simulation)."""
    positive_int(max_seq_len, "max_seq_len")
    num_seqs = positive_int(workload.num_seqs, "workload.num_seqs")
    if workload.sampling is SamplingKind.SINGLE and num_seqs != 1:
        raise InputError(
            f"workload.num_seqs = {num_seqs} needs sampling = parallel or beam (single decodes 1)"
        )
    if workload.explicit:
        return _explicit_plan(workload, num_seqs)

    time_scale = positive_float(workload.time_scale, "workload.time_scale")
    num_requests = workload.num_requests
    if num_requests is not None:
        num_requests = positive_int(num_requests, "workload.num_requests")
    by_trace = [
        f"workload.{part}.kind = trace"
        for part, is_trace in (
            ("arrival", workload.arrival.kind is ArrivalKind.TRACE),
            ("prompt", workload.prompt.kind is LengthKind.TRACE),
            ("output", workload.output.kind is LengthKind.TRACE),
        )
        if is_trace
    ]
    path = _trace_file(workload)
    if by_trace and path is None:
        raise InputError(
            f"{by_trace[0]} needs workload.trace_name (built-in: {choices_text(BUILTIN_TRACES)}) "
            "or workload.trace_path"
        )
    trace = None
    if path is not None and (by_trace or num_requests is None):
        trace_field = (
            "workload.trace_name" if workload.trace_path is None else "workload.trace_path"
        )
        total = len(read_csv(path, trace_field))
        offset = workload.trace_offset
        if bad_int(offset, minimum=0) or offset >= total:
            raise InputError(
                f"workload.trace_offset: {offset!r} is not a row of {path} "
                f"(valid: 0 to {total - 1})"
            )
        available = total - offset
        if num_requests is None:
            num_requests = available
        elif num_requests > available:
            raise InputError(
                f"workload.num_requests: {num_requests} requested but {path} has only "
                f"{available} rows from trace_offset {offset}; lower one of them"
            )
        trace = load_trace(path, offset, num_requests, field=trace_field)
    if num_requests is None:
        raise InputError(
            "workload.num_requests: not set and no trace bounds the count; set num_requests "
            "(the engine may also stop by time, stop.max_time_s, but the workload needs a bound)"
        )

    groups = workload.prefix_groups
    for g, group in enumerate(groups):
        positive_int(group.num_tokens, f"workload.prefix_groups[{g}].num_tokens")
        fraction = positive_float(group.fraction, f"workload.prefix_groups[{g}].fraction", True)
        if fraction > 1:
            raise InputError(f"workload.prefix_groups[{g}].fraction must be <= 1, got {fraction}")
    fractions = np.array([group.fraction for group in groups], dtype=np.float64)
    if fractions.sum() > 1 + 1e-9:
        raise InputError(
            f"workload.prefix_groups: fractions sum to {fractions.sum():g} (> 1); a request "
            "joins at most one group, so they must sum to at most 1"
        )
    lengths, source = lengths_sampler(workload, trace)
    independent = workload.sample_lengths is SampleLengths.INDEPENDENT
    if independent and workload.sampling is not SamplingKind.PARALLEL:
        raise InputError(
            'workload.sample_lengths = "independent" needs sampling = "parallel" (beams share '
            "one length; a single sample has nothing to differ from)"
        )
    return _Plan(
        num_requests=num_requests,
        arrivals=arrival_sampler(workload.arrival, trace, path, time_scale),
        lengths=lengths,
        source=source,
        priority=Fixed(0),
        groups=PrefixGroups(np.cumsum(fractions)),
        group_tokens=np.array([group.num_tokens for group in groups] + [0], dtype=np.int64),
        sampling=workload.sampling,
        num_seqs=num_seqs,
        num_extra_lengths=num_seqs - 1 if independent else 0,
        arrival_knob=(
            ("workload.time_scale", "raise time_scale, or replay fewer rows")
            if workload.arrival.kind is ArrivalKind.TRACE
            else ("workload.arrival.rate_per_s", "raise the rate, or send fewer requests")
        ),
    )


def _explicit_plan(workload: WorkloadConfig, num_seqs: int) -> _Plan:
    for i, req in enumerate(workload.explicit):
        positive_int(req.prompt_len, f"workload.explicit[{i}].prompt_len")
        positive_int(req.output_len, f"workload.explicit[{i}].output_len")
        positive_float(req.arrival_s, f"workload.explicit[{i}].arrival_s", allow_zero=True)
        if isinstance(req.priority, bool) or not isinstance(req.priority, int | np.integer):
            raise InputError(f"workload.explicit[{i}].priority must be an integer")
    arrival_s = np.array([req.arrival_s for req in workload.explicit], dtype=np.float64)
    order = np.argsort(arrival_s, kind="stable")

    def rows(attr: str) -> Rows:
        return Rows(np.array([getattr(workload.explicit[i], attr) for i in order]))

    return _Plan(
        num_requests=len(order),
        arrivals=Rows(arrival_s[order]),
        lengths=Independent(rows("prompt_len"), rows("output_len")),
        source=LengthSource.EXPLICIT,
        priority=rows("priority"),
        groups=PrefixGroups(np.zeros(0)),
        group_tokens=np.zeros(1, dtype=np.int64),
        sampling=workload.sampling,
        num_seqs=num_seqs,
        arrival_knob=("workload.requests.arrival_s", "give an earlier arrival_s"),
    )


# ---------------------------------------------------------------------------------- generation


def _stream(plan: _Plan, max_seq_len: int, rng: np.random.Generator) -> Iterator[Request]:
    stats = plan.stats
    no_group = len(plan.group_tokens) - 1
    next_id = 0
    while next_id < plan.num_requests:
        n = min(CHUNK_SIZE, plan.num_requests - next_id)
        arrival_s = plan.arrivals.take(n, rng)
        if n and arrival_s.max() > MAX_ARRIVAL_S:
            late = int(np.argmax(arrival_s > MAX_ARRIVAL_S))
            knob, fix = plan.arrival_knob
            check_arrival(knob, next_id + late, float(arrival_s[late]), fix)
        user_len, output_len = plan.lengths.take(n, rng)
        group = plan.groups.take(n, rng)
        priority = plan.priority.take(n, rng)
        prefix_len = plan.group_tokens[group]
        cut = np.zeros(n, dtype=np.int64)
        if plan.source.is_row:
            # A row longer than the model's maximum loses prompt tokens, as many as it is too
            # long, and keeps its output: Vidur's trace replay does the same
            # (vidur/request_generator/trace_replay_request_generator.py, microsoft/vidur at
            # 7d47513: `num_prefill_tokens - diff_tokens`; its trace_request_length_generator.py
            # splits the excess between prompt and output instead). Unlike Vidur, the shared
            # prefix and one prompt token stay; an output that alone leaves no room is capped
            # below. The answer lengths a trace measured survive, and no row is rejected.
            excess = prefix_len + user_len + output_len - max_seq_len
            cut = np.clip(excess, 0, np.maximum(user_len - 1, 0))
            user_len = user_len - cut
        prompt_len = prefix_len + user_len
        room = max_seq_len - prompt_len  # <= 0: prompt too long, kept for the scheduler
        samples: list[tuple[int, ...]] | None = None
        if plan.num_extra_lengths:
            # The other samples' lengths, drawn from the same output distribution (whole rows'
            # outputs for a trace: other answers of the trace) after the request's own.
            extra = plan.lengths.take(n * plan.num_extra_lengths, rng)[1]
            lens = np.column_stack((output_len, extra.reshape(n, plan.num_extra_lengths)))
            lens = np.where((room[:, None] > 0) & (lens > room[:, None]), room[:, None], lens)
            samples = [tuple(row) for row in lens.tolist()]
            output_len = lens.max(axis=1)
        is_capped = (room > 0) & (output_len > room)
        output_len = np.where(is_capped, room, output_len)
        columns = zip(
            arrival_s.tolist(),
            prompt_len.tolist(),
            output_len.tolist(),
            group.tolist(),
            prefix_len.tolist(),
            priority.tolist(),
            (cut > 0).tolist(),
            is_capped.tolist(),
            (room <= 0).tolist(),
            samples if samples is not None else [()] * n,
            strict=True,
        )
        sampling, num_seqs = plan.sampling, plan.num_seqs
        for arrival, prompt, output, g, prefix, prio, clipped, capped, too_long, lens in columns:
            # Its fields in order (named ones cost more), made with no class call.
            yield streamed_request(
                next_id,  # request_id
                arrival,  # arrival_s
                prompt,  # prompt_len
                output,  # output_len
                None if g == no_group else g,  # prefix_group
                prefix,  # prefix_len
                sampling,
                num_seqs,
                prio,  # priority
                lens,  # sample_output_lens
            )
            # Counted once the consumer comes back for the next one: a request it dropped
            # (stopping early) is not in the counts.
            next_id += 1
            stats.num_requests += 1
            stats.num_prompt_clipped += clipped
            stats.num_output_capped += capped
            stats.num_prompt_too_long += too_long
            stats.num_with_prefix += g != no_group


def iter_requests(
    workload: WorkloadConfig,
    max_seq_len: int,
    rng: np.random.Generator,
    stats: WorkloadStats | None = None,
) -> Iterator[Request]:
    """Requests in non-decreasing arrival order, ids 0, 1, 2, ..., generated lazily.

    The configuration is validated now (InputError here, not at the first `next`). `stats`, when
    given, says now where the lengths come from, and counts each request the consumer takes.
    """
    if workload.mooncake is not None:  # rows with block hashes: simulator/workload/mooncake.py
        from pagesim.simulator.workload.mooncake import mooncake_requests

        positive_int(max_seq_len, "max_seq_len")
        return mooncake_requests(workload.mooncake, max_seq_len, stats or WorkloadStats())
    if workload.session_trace is not None:  # recorded turns: simulator/workload/session_trace.py
        from pagesim.simulator.workload.session_trace import session_trace_requests

        positive_int(max_seq_len, "max_seq_len")
        trace = workload.session_trace
        time_scale = positive_float(trace.time_scale, "workload.session_trace.time_scale")
        return session_trace_requests(trace.path, time_scale, max_seq_len, stats or WorkloadStats())
    plan = _plan(workload, max_seq_len)
    if stats is not None:
        plan.stats = stats
    plan.stats.length_source = plan.source
    return _stream(plan, max_seq_len, rng)
