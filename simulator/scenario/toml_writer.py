"""A resolved `Scenario` written back as TOML: every default filled in, every path absolute.

Reports and sweep folders keep this text beside their results, so a run can be read, and rerun,
without the file it came from. Its TOML literals are core/toml_text.py's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import fields, replace
from typing import Any

from pagesim.simulator.core.catalog import GPUS, MODELS
from pagesim.simulator.core.config import (
    ArrivalKind,
    LengthDist,
    LengthKind,
    Policy,
    SampleLengths,
    Scenario,
)
from pagesim.simulator.core.link import GB
from pagesim.simulator.core.toml_text import toml_value
from pagesim.simulator.scenario.schema import (
    GPU_FIGURES,
    KNOB_READERS,
    LENGTH_USES,
    SCHEMA,
    is_read,
    router_tables,
)


def _lines(header: str, fields: dict[str, object]) -> Iterator[str]:
    if all(value is None for value in fields.values()):
        return
    yield f"\n{header}"
    for key, value in fields.items():
        if value is not None:
            yield f"{key} = {toml_value(value)}"


def _fields(obj: Any) -> dict[str, object]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def _length_fields(d: LengthDist) -> dict[str, object]:
    fields: dict[str, object] = {"kind": d.kind}
    if d.kind is LengthKind.EMPIRICAL:
        fields |= {"trace": d.trace_name} if d.trace_name else {"path": d.path}
        fields["column"] = d.column
    else:
        fields |= {k: getattr(d, k) for k in LENGTH_USES[d.kind]}
    return fields


def describe_scenario(scenario: Scenario, overrides: Sequence[str] = ()) -> str:
    """The resolved scenario as TOML (defaults filled in, paths absolute), for reports.

    Loading the text back gives the same Scenario when the model and GPU are catalog presets.
    """
    s, w = scenario, scenario.workload
    out = ["# pagesim scenario as run: every default filled in, every path absolute"]
    if s.source is not None:
        out.append(f"# from {s.source}")
    out += [f"# override: {o}" for o in overrides]
    out += [f"name = {toml_value(s.name)}", f"description = {toml_value(s.description)}"]
    out.append(f"seed = {s.seed}")
    model: dict[str, object] = {"kv_dtype": s.kv_dtype, "tensor_parallel": s.tensor_parallel}
    model |= {"weight_dtype": s.model.weight_dtype, "data_parallel": s.data_parallel}
    model["expert_parallel"] = s.expert_parallel
    preset = MODELS.get(s.model.name)
    if preset is not None and replace(preset, weight_dtype=s.model.weight_dtype) == s.model:
        out += _lines("[model]", {"preset": s.model.name, **model})
    else:
        out += _lines("[model]", model)
        out.append(f"# from a config.json: {s.model}")
    g = s.gpu
    if GPUS.get(g.name) == g:
        out += _lines("[gpu]", {"preset": g.name})
    else:
        figures = {k: getattr(g, f) / unit for k, (_, f, unit) in GPU_FIGURES.items()}
        out += _lines("[gpu]", {"name": g.name, **figures})
    if s.data_parallel > 1 and s.expert_parallel:  # [wide_ep] is read only then
        out += _lines("[wide_ep]", _fields(s.wide_ep))
    e = s.execution
    inert = {"profile"} | ({"routing_skew"} if s.model.moe is None else set())  # not read
    out += _lines("[execution]", {f: getattr(e, f) for f in SCHEMA["execution"] if f not in inert})
    if e.profile_path is not None:
        out.append(f"profile = {toml_value(e.profile_path)}")
    fields: dict[str, object] = {"sampling": w.sampling, "num_seqs": w.num_seqs}
    by_rows = w.mooncake is not None or w.session_trace is not None
    if not w.explicit and not by_rows:
        fields["num_requests"] = w.num_requests
    if w.trace_path is not None:
        fields |= {"trace": w.trace_name or w.trace_path, "trace_offset": w.trace_offset}
        if w.arrival.kind is ArrivalKind.TRACE:
            fields["time_scale"] = w.time_scale
    if w.empirical_pairing is not None:
        fields["empirical_pairing"] = w.empirical_pairing
    if w.sample_lengths is not SampleLengths.SAME:
        fields["sample_lengths"] = w.sample_lengths
    out += _lines("[workload]", fields)
    if w.explicit:
        for r in w.explicit:
            out += _lines("[[workload.requests]]", _fields(r))
    elif w.mooncake is not None:
        m = w.mooncake
        trace: dict[str, object] = {"trace": m.trace_name or m.path, "offset": m.offset}
        trace |= {"num_requests": m.num_requests, "time_scale": m.time_scale}
        out += _lines("[workload.mooncake]", trace)
    elif w.session_trace is not None:
        st = w.session_trace
        out += _lines("[workload.session_trace]", {"path": st.path, "time_scale": st.time_scale})
    else:
        arrival: dict[str, object] = {"kind": w.arrival.kind}
        if w.arrival.kind in (ArrivalKind.POISSON, ArrivalKind.GAMMA, ArrivalKind.CONSTANT):
            arrival["rate_per_s"] = w.arrival.rate_per_s
        if w.arrival.kind is ArrivalKind.GAMMA:
            arrival["cv"] = w.arrival.cv
        out += _lines("[workload.arrival]", arrival)
        out += _lines("[workload.prompt]", _length_fields(w.prompt))
        out += _lines("[workload.output]", _length_fields(w.output))
        for group in w.prefix_groups:
            out += _lines("[[workload.prefix_groups]]", _fields(group))
        if w.sessions is not None:
            ss = w.sessions
            sessions: dict[str, object] = {"num_sessions": ss.num_sessions}
            sessions["think_time_s"] = ss.think_time_s
            out += _lines("[workload.sessions]", sessions)
            out += _lines("[workload.sessions.turns]", _length_fields(ss.turns))
            out += _lines("[workload.sessions.new_tokens]", _length_fields(ss.new_tokens))
    for system in s.systems:
        keys = {
            f: getattr(system, f)
            for f in SCHEMA["systems"][0]
            if system.policy in KNOB_READERS.get(f, ((system.policy,), ""))[0]  # no inert knob
        }
        if system.policy is not Policy.VLLM_V1:
            del keys["hybrid_kv_cache_manager"]  # vLLM V1's knob (core.defaults.system_knobs)
        if system.speculative is not None:  # an inline table: { method = "eagle", ... }
            keys["speculative"] = system.speculative.describe()
        if system.kv_offload is not None:  # { cpu_gib = 64, ... }
            keys["kv_offload"] = system.kv_offload.describe()
        out += _lines("[[systems]]", keys)
    out += _lines("[slo]", {"ttft_s": s.slo.ttft_s, "tpot_s": s.slo.tpot_s})
    out += _lines("[stop]", {"max_time_s": s.stop.max_time_s, "warmup_s": s.stop.warmup_s})
    if s.sweep:
        axes = [{"path": a.path, "values": list(a.values)} for a in s.sweep]
        out += _lines("[sweep]", {"axes": axes})
    asks = s.report
    if asks.key_metric is not None:
        report: dict[str, object] = {"key_metric": asks.key_metric}
        report |= {"metrics": list(asks.metrics) or None, "compare": asks.compare}
        report["reference"] = asks.reference
        out += _lines("[report]", report)
    if s.cluster is not None:
        out += _cluster_lines(s)
    if s.capacity is not None:
        c = s.capacity
        search: dict[str, object] = {"min_replicas": c.min_replicas}
        search["max_replicas"] = c.max_replicas
        search["gpus"] = [g.name for g in c.gpus] or None
        search["tensor_parallel"] = list(c.tensor_parallel) or None
        search["routers"] = list(c.routers) or None
        search["price_per_gpu_hour"] = dict(c.price_per_gpu_hour) or None
        search["currency"] = c.currency
        search["max_gpus"] = c.max_gpus
        search["prefill_tensor_parallel"] = list(c.prefill_tensor_parallel) or None
        search["decode_tensor_parallel"] = list(c.decode_tensor_parallel) or None
        out += _lines("[capacity]", search)
    return "\n".join(out) + "\n"


def _cluster_lines(s: Scenario) -> list[str]:
    cluster = s.cluster
    assert cluster is not None
    out: list[str] = []
    if cluster.colocated_systems:
        out += _lines("[cluster]", {"colocated_systems": list(cluster.colocated_systems)})
    router_keys = [f for f in SCHEMA["cluster"]["router"] if f != "by_system"]
    searched = s.capacity.routers if s.capacity is not None else ()
    for name, config, kinds in router_tables(cluster, searched):
        # a key no router here reads is left out (a file that set one is refused)
        keys = {f: getattr(config, f) for f in router_keys if is_read(f, kinds)}
        if name == "router" and cluster.router_by_system:
            keys["by_system"] = dict(cluster.router_by_system)
        out += _lines(f"[cluster.{name}]", keys)
    link = cluster.link
    if link is not None:
        fields: dict[str, object] = {"latency_s": link.latency_s, "layerwise": link.layerwise}
        if link.preset is None:
            fields["bandwidth_gb_s"] = link.bandwidth_bytes_s / GB
        else:
            fields["preset"] = link.preset
        out += _lines("[cluster.link]", fields)
    for pool in cluster.pools:
        fields = {"name": pool.name, "count": pool.count, "role": pool.role}
        fields |= {"system": pool.system, "tensor_parallel": pool.tensor_parallel}
        if pool.gpu != s.gpu:
            fields["gpu"] = pool.gpu.name
        out += _lines("[[cluster.pools]]", fields)
    return out
