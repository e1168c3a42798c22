"""Reading a scenario's [workload] section: arrivals, prompt and output lengths, prefix groups,
explicit requests, and the trace they may read, into a `WorkloadConfig`.

Everything the workload will ask of a trace (its rows, its columns, its times) is checked here,
at the edge, so a bad trace fails before any run with the file, line and key to fix.
"""

from __future__ import annotations

from pathlib import Path

from pagesim.simulator.core.config import (
    ArrivalKind,
    ArrivalProcess,
    EmpiricalPairing,
    ExplicitRequest,
    LengthDist,
    LengthKind,
    MooncakeTrace,
    PrefixGroup,
    SampleLengths,
    SessionConfig,
    SessionTrace,
    WorkloadConfig,
)
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.limits import MAX_ARRIVAL_S, MAX_COUNT
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.scenario.schema import LENGTH_USES, SCHEMA
from pagesim.simulator.scenario.table import REQUIRED, Table, display, is_file
from pagesim.simulator.scenario.traces import check_csv, check_trace_span, trace_file
from pagesim.simulator.workload.mooncake import BUILTIN_MOONCAKE, read_mooncake
from pagesim.simulator.workload.number_checks import late_arrival
from pagesim.simulator.workload.session_trace import COLUMNS, read_session_trace
from pagesim.simulator.workload.trace_files import (
    ARRIVAL_COLUMN,
    BUILTIN_TRACES,
    OUTPUT_COLUMN,
    PROMPT_COLUMN,
)


def _length(t: Table, column: str, trace: Path | None, workload_key: str) -> LengthDist:
    """A prompt or output length distribution; `column` is the trace column it defaults to."""
    kind = t.choice("kind", LengthKind)
    uses = LENGTH_USES[kind]
    for name in t.data:
        if name != "kind" and name not in uses:
            used = f"it uses: {choices_text(uses)}" if uses else "it takes no other key"
            t.fail(name, f'not used with kind = "{kind.value}" ({used})')
    if kind is LengthKind.FIXED:
        return LengthDist(kind, value=t.integer("value"))
    if kind is LengthKind.UNIFORM:
        low = t.integer("low")
        high = t.integer("high", lo=low)
        return LengthDist(kind, low=low, high=high)
    if kind is LengthKind.LOGNORMAL:
        mean = t.number("mean", lo=1.0, hi=float(MAX_COUNT))
        return LengthDist(kind, mean=mean, cv=t.number("cv", 1.0, hi=100.0))
    if kind is LengthKind.TRACE:
        if trace is None:
            t.fail("kind", f'kind = "trace" needs {workload_key}.trace (the trace to read)')
        return LengthDist(kind, column=column)
    if t.has("trace") == t.has("path"):
        t.ctx.fail(
            t.key,
            "kind = \"empirical\" needs exactly one of 'trace' (a built-in trace: "
            f"{choices_text(BUILTIN_TRACES)}) or 'path' (a CSV file), and a 'column'",
        )
    if t.has("trace"):
        name = t.text("trace").lower()
        if name not in BUILTIN_TRACES:
            t.fail("trace", f"unknown trace {name!r}; valid: {choices_text(BUILTIN_TRACES)}")
        path, trace_name = BUILTIN_TRACES[name], name
    else:
        path, trace_name = t.ctx.resolve(t.text("path")), None
    info = check_csv(t.ctx, t.path("trace" if trace_name else "path"), path)
    if not t.has("column") and column not in info.columns:
        t.fail(
            "column", f"required key is missing; the file's columns: {choices_text(info.columns)}"
        )
    chosen = t.text("column", column)
    check_csv(t.ctx, t.path("column"), path, tokens=[chosen])
    return LengthDist(kind, path=path, trace_name=trace_name, column=chosen)


# [workload] keys that generate requests: meaningless beside explicit [[workload.requests]]
_GENERATOR_KEYS = tuple(
    k for k in SCHEMA["workload"] if k not in ("sampling", "num_seqs", "requests", "sample_lengths")
)


def _mooncake(t: Table) -> MooncakeTrace:
    """[workload.mooncake]: a built-in Mooncake trace or a JSON-lines file, checked now."""
    m = t.table("mooncake")
    text = m.text("trace")
    name = text.lower() if text.lower() in BUILTIN_MOONCAKE else None
    path = BUILTIN_MOONCAKE[name] if name is not None else m.ctx.resolve(text)
    if name is None and not is_file(path):
        m.fail(
            "trace",
            f"unknown trace {text!r}: neither a built-in Mooncake trace "
            f"({choices_text(BUILTIN_MOONCAKE)}) nor an existing JSON-lines file",
        )
    try:
        rows = read_mooncake(path, display(path))
    except InputError as exc:
        m.fail("trace", str(exc))
    offset = m.integer("offset", 0, lo=0)
    if offset >= len(rows):
        m.fail("offset", f"must be < {len(rows)}, the rows of {display(path)!r}")
    count = m.integer("num_requests", None)
    if count is not None and offset + count > len(rows):
        m.fail(
            "num_requests",
            f"{count} requests from row {offset} need {offset + count} rows; "
            f"{display(path)!r} has {len(rows)}",
        )
    scale = m.number("time_scale", 1.0, hi=1e6, lo_open=True)
    last = len(rows) - 1 if count is None else offset + count - 1
    span_s = (rows.timestamps_ms[last] - rows.timestamps_ms[offset]) / 1000.0 / scale
    _check_span(m, f"row {last + 1}", span_s, "raise time_scale, or replay fewer rows")
    return MooncakeTrace(path, name, offset, count, scale)


def _session_trace(t: Table) -> SessionTrace:
    """[workload.session_trace]: a CSV of recorded turns, checked now."""
    st = t.table("session_trace")
    path = st.ctx.resolve(st.text("path"))
    if not is_file(path):
        st.fail("path", f"no such file {display(path)!r} (a CSV of turns: {','.join(COLUMNS)})")
    try:
        turns = read_session_trace(path, display(path))
    except InputError as exc:
        st.fail("path", str(exc))
    scale = st.number("time_scale", 1.0, hi=1e6, lo_open=True)
    span_s = (turns[-1].arrived_at - turns[0].arrived_at) / scale
    _check_span(st, f"line {turns[-1].line}", span_s, "raise time_scale, or shorten the trace")
    return SessionTrace(path, scale)


def _check_span(t: Table, what: str, span_s: float, fix: str) -> None:
    """A trace's `what` (its last row replayed) arrives within the simulated clock's range."""
    problem = late_arrival(what, span_s, fix)
    if problem is not None:
        t.fail("time_scale", problem)


def _sessions(t: Table) -> SessionConfig:
    """[workload.sessions]: multi-turn conversations started by [workload.arrival]."""
    s = t.table("sessions")
    return SessionConfig(
        num_sessions=s.integer("num_sessions"),
        turns=_length(s.table("turns", required=True), "", None, s.key),
        new_tokens=_length(s.table("new_tokens", required=True), "", None, s.key),
        think_time_s=s.number("think_time_s", hi=1e6),
    )


def read_workload(t: Table, max_seq_len: int) -> WorkloadConfig:
    sampling = t.choice("sampling", SamplingKind, SamplingKind.SINGLE)
    num_seqs = t.integer("num_seqs", 1, hi=1024)
    if sampling is SamplingKind.SINGLE and num_seqs > 1:
        t.fail("num_seqs", 'must be 1 with sampling = "single"; use "parallel" or "beam" for more')
    sample_lengths = t.choice("sample_lengths", SampleLengths, SampleLengths.SAME)
    if sample_lengths is SampleLengths.INDEPENDENT and sampling is not SamplingKind.PARALLEL:
        t.fail("sample_lengths", '"independent" needs sampling = "parallel"; beams share a length')
    requests = t.tables("requests")
    if requests:
        for name in _GENERATOR_KEYS:
            if t.has(name):
                t.fail(name, "not used with [[workload.requests]], which replace the generators")
        explicit = tuple(
            ExplicitRequest(
                prompt_len=r.integer("prompt_len"),
                output_len=r.integer("output_len"),
                arrival_s=r.number("arrival_s", 0.0, hi=MAX_ARRIVAL_S),
                priority=r.integer("priority", 0, lo=-MAX_COUNT),
            )
            for r in requests
        )
        return WorkloadConfig(
            arrival=ArrivalProcess(ArrivalKind.BURST),  # unused: each request has arrival_s
            prompt=LengthDist(LengthKind.FIXED),
            output=LengthDist(LengthKind.FIXED),
            num_requests=len(explicit),
            sampling=sampling,
            num_seqs=num_seqs,
            explicit=explicit,
        )  # explicit requests give one length each: sample_lengths has nothing to draw from
    if "requests" in t.data:
        t.fail("requests", "must hold at least one request when given")
    for table in ("mooncake", "session_trace"):
        if not t.has(table):
            continue
        for name in _GENERATOR_KEYS:
            if name != table and t.has(name):
                t.fail(name, f"not used with [workload.{table}], whose rows give every request")
        return WorkloadConfig(
            arrival=ArrivalProcess(ArrivalKind.TRACE),  # unused: the rows have their times
            prompt=LengthDist(LengthKind.TRACE),
            output=LengthDist(LengthKind.TRACE),
            sampling=sampling,
            num_seqs=num_seqs,
            mooncake=_mooncake(t) if table == "mooncake" else None,
            session_trace=_session_trace(t) if table == "session_trace" else None,
        )
    sessions = None
    if t.has("sessions"):
        sessions = _sessions(t)
        if t.has("num_requests"):
            t.fail("num_requests", "not used with [workload.sessions]; set sessions.num_sessions")
    trace_name, trace_path = None, None
    if t.has("trace"):
        trace_name, trace_path = trace_file(t, "trace")
    else:
        for name in ("trace_offset", "time_scale"):
            if t.has(name):
                t.fail(name, "only used with workload.trace")
    required = None if trace_path or sessions else REQUIRED
    num_requests = t.integer("num_requests", required)
    offset = t.integer("trace_offset", 0, lo=0)

    arrival_t = t.table("arrival")
    if not t.has("arrival"):
        if trace_path is None:
            t.fail("arrival", "required table [workload.arrival] is missing")
        arrival_t = Table(t.ctx, arrival_t.key, {"kind": "trace"}, arrival_t.schema)
    arrival = _arrival(arrival_t, t, trace_path)
    if t.has("time_scale") and arrival.kind is not ArrivalKind.TRACE:
        t.fail("time_scale", 'only used with [workload.arrival] kind = "trace"')
    lengths = []
    for role, column in (("prompt", PROMPT_COLUMN), ("output", OUTPUT_COLUMN)):
        sub = t.table(role)
        if not t.has(role):
            if trace_path is None:
                t.fail(role, f"required table [workload.{role}] is missing")
            sub = Table(t.ctx, sub.key, {"kind": "trace"}, sub.schema)
        lengths.append(_length(sub, column, trace_path, t.key))
    time_scale = t.number("time_scale", 1.0, hi=1e6, lo_open=True)
    if trace_path is not None:
        _check_trace_use(t, trace_path, offset, num_requests, arrival, time_scale, *lengths)
    pairing = _pairing(t, *lengths)
    groups = tuple(
        PrefixGroup(g.integer("num_tokens", hi=max_seq_len), g.fraction("fraction"))
        for g in t.tables("prefix_groups")
    )
    if sum(g.fraction for g in groups) > 1.0 + 1e-9:
        t.fail("prefix_groups", "the groups' fractions add up to more than 1")
    return WorkloadConfig(
        arrival=arrival,
        prompt=lengths[0],
        output=lengths[1],
        num_requests=num_requests,
        trace_name=trace_name,
        trace_path=trace_path,
        trace_offset=offset,
        time_scale=time_scale,
        prefix_groups=groups,
        sampling=sampling,
        num_seqs=num_seqs,
        empirical_pairing=pairing,
        sample_lengths=sample_lengths,
        sessions=sessions,
    )


def _pairing(t: Table, prompt: LengthDist, output: LengthDist) -> EmpiricalPairing | None:
    """`empirical_pairing`: only with two empirical lengths; "rows" only from one file."""
    chosen = t.choice("empirical_pairing", EmpiricalPairing, None)
    if chosen is None:
        return None
    pairing = EmpiricalPairing(chosen)
    if prompt.kind is not LengthKind.EMPIRICAL or output.kind is not LengthKind.EMPIRICAL:
        t.fail(
            "empirical_pairing",
            'only used when [workload.prompt] and [workload.output] both have kind = "empirical"',
        )
    assert prompt.path is not None and output.path is not None  # _length sets it for empirical
    if pairing is EmpiricalPairing.ROWS and prompt.path.resolve() != output.path.resolve():
        t.fail(
            "empirical_pairing",
            f'"rows" draws both lengths from one row of one file, but the prompt reads '
            f"{prompt.trace_name or display(prompt.path)!r} and the output "
            f"{output.trace_name or display(output.path)!r}; read one file, "
            'or set "independent"',
        )
    return pairing


def _check_trace_use(
    t: Table,
    path: Path,
    offset: int,
    num_requests: int | None,
    arrival: ArrivalProcess,
    time_scale: float,
    *lengths: LengthDist,
) -> None:
    """The workload's trace is read by something, holds the rows it is asked for, and replays
    its arrival times within the simulated clock's range."""
    is_read = arrival.kind is ArrivalKind.TRACE or any(d.kind is LengthKind.TRACE for d in lengths)
    if not is_read:
        t.fail("trace", 'not used: no [workload.arrival|prompt|output] has kind = "trace"')
    # Whatever reads it, the workload reads both token columns, and the times where present.
    info = check_csv(t.ctx, t.path("trace"), path, tokens=[PROMPT_COLUMN, OUTPUT_COLUMN])
    if ARRIVAL_COLUMN in info.columns:
        check_csv(t.ctx, t.path("trace"), path, times=[ARRIVAL_COLUMN])
    shown = display(path)
    if offset >= info.num_rows:
        t.fail("trace_offset", f"must be < {info.num_rows}, the rows of {shown!r}")
    if num_requests is not None and offset + num_requests > info.num_rows:
        t.fail(
            "num_requests",
            f"{num_requests} requests from row {offset} need {offset + num_requests} rows; "
            f"{shown!r} has {info.num_rows}",
        )
    if arrival.kind is ArrivalKind.TRACE:
        last = info.num_rows - 1 if num_requests is None else offset + num_requests - 1
        check_trace_span(t.ctx, t.path("time_scale"), path, info, (offset, last), time_scale)


def _arrival(t: Table, workload: Table, trace: Path | None) -> ArrivalProcess:
    kind = t.choice("kind", ArrivalKind)
    uses_rate = kind in (ArrivalKind.POISSON, ArrivalKind.GAMMA, ArrivalKind.CONSTANT)
    if t.has("rate_per_s") and not uses_rate:
        t.fail("rate_per_s", f'not used with kind = "{kind.value}"')
    if t.has("cv") and kind is not ArrivalKind.GAMMA:
        t.fail("cv", f'only used with kind = "gamma", not "{kind.value}"')
    if kind is ArrivalKind.TRACE:
        if trace is None:
            t.fail("kind", 'kind = "trace" needs workload.trace (a trace with timestamps)')
        check_csv(t.ctx, workload.path("trace"), trace, times=[ARRIVAL_COLUMN])
    rate = t.number("rate_per_s", lo=0.0, hi=1e6, lo_open=True) if uses_rate else 1.0
    return ArrivalProcess(kind, rate, t.number("cv", 1.0, lo=0.0, hi=100.0, lo_open=True))
