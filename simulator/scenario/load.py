"""Scenario files: TOML -> one validated, frozen `Scenario`; `--set` overrides; sweep expansion.

Every problem with a scenario file is an `InputError` whose one-line message names the file, the
key (a dotted path such as `systems[1].policy`), what is wrong and the valid choices or range.
Nothing else escapes, however malformed the input. The schema (full reference in
docs/scenario-reference.md, `pagesim scenarios reference`; keys are config.py field names):

    name = "..."                  # default: the file's stem
    description = "..."           # its first line is what `pagesim scenarios list` shows
    seed = 0                      # RNG seed of the whole simulation
    [model]      preset = "llama-2-7b"  |  config = "path/to/config.json" (relative to this file)
                 kv_dtype = "fp16" | "bf16" | "fp8";  tensor_parallel = 1;  weight_dtype
                 (default: the model's); data_parallel = 1, expert_parallel = false (MoE)
    [wide_ep]    all2all_backend, eplb, redundant_experts, gpus_per_node, scaleout_gbps (with
                 data_parallel > 1: every DP rank simulated, cluster/dp_group.py)
    [gpu]        preset = "a100-80gb", and/or name, memory_gib, mem_bandwidth_gbps, fp16_tflops,
                 host_link_gbps (a preset's figures can be overridden one by one)
    [execution]  kind = "roofline" | "profile";  profile = "file.json" (relative to this file, a
                 bare file name in calibration/profiles/, or "builtin:<name>");  gemm_efficiency,
                 attention_bw_efficiency, weight_bw_efficiency (default: the GPU's fitted
                 factors); step_overhead_s, step_overhead_s_per_seq, frontend_s (default: the
                 engine era's),
                 async_scheduling; allreduce_bw_gbps, allreduce_latency_us,
                 custom_allreduce_stage_us (default: the GPU's interconnect);
                 fused_moe_bw_efficiency, routing_skew (MoE: Zipf exponent, 0 = uniform)
    [workload]   num_requests, trace ("azure-conv", "azure-code", "arxiv-summarization" or a CSV
                 path), trace_offset, time_scale, sampling = "single"|"parallel"|"beam", num_seqs,
                 empirical_pairing = "rows"|"independent" (two empirical lengths),
                 sample_lengths = "same"|"independent" (parallel samples; vllm-v1)
      [workload.arrival]           kind = poisson|gamma|constant|burst|trace, rate_per_s, cv
      [workload.prompt], [workload.output]
                                   kind = fixed (value) | uniform (low, high) | lognormal (mean, cv)
                                   | empirical (trace or path, column) | trace
      [[workload.prefix_groups]]   num_tokens, fraction
      [[workload.requests]]        prompt_len, output_len, arrival_s, priority (replace generators)
    [defaults]   any [[systems]] key but name: applies to every system that does not set it
    [[systems]]  name, policy = static|orca|vllm-v0|vllm-v1, and any SystemConfig field; also
                 tensor_parallel, weight_dtype, kv_dtype in place of [model]'s (system_overrides)
    [slo]        ttft_s, tpot_s
    [stop]       max_time_s, warmup_s
    [sweep]      axes = [{ path = "workload.arrival.rate_per_s", values = [1, 2, 4] }]  (1 or 2)
    [report]     key_metric, metrics, compare = "rank"|"agreement", reference (what it asks)

An override or sweep axis path is a dotted key into that schema: `systems.block_size` sets the
key in every system, `systems[0].block_size` in one. Override values are TOML values when they
parse as one (`2`, `2.5`, `true`, `"x"`, `[1, 2]`, `{ kind = "burst" }`), else bare strings.

This module reads [execution], [slo] and [stop], puts the sections together and holds the
file-level API (`load_scenario`, `expand_sweep`); the rest lives beside it: `schema` (the valid
keys and limits), `table` (`Table`, `ScenarioError`, values in messages), `catalog` ([model],
[gpu]), `workload` and `systems` (the two big sections), `traces` (trace CSV checks),
`overrides` (paths, `--set`, `--param`, [sweep]), `report` ([report]), `files` (finding and
reading scenario files), `toml_writer` (`describe_scenario`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from pagesim.simulator.core.catalog import KVDtype
from pagesim.simulator.core.config import (
    SLO,
    ExecutionConfig,
    ExecutionKind,
    Scenario,
    StopConfig,
    SweepAxis,
)
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.model_spec import WeightDtype
from pagesim.simulator.execution.moe_cost import ExpertLayout
from pagesim.simulator.execution.profile_file import check_profile
from pagesim.simulator.scenario.capacity import read_capacity
from pagesim.simulator.scenario.catalog import read_gpu, read_model
from pagesim.simulator.scenario.cluster import check_router_keys, read_cluster
from pagesim.simulator.scenario.deployments import check_deployments
from pagesim.simulator.scenario.disagg import check_disaggregated
from pagesim.simulator.scenario.files import (
    BUILTIN_DIR,
    builtin_commands,
    list_builtin,
    read_toml,
    resolve_scenario,
    scenario_to_toml_text,
)
from pagesim.simulator.scenario.hardware_fit import kv_dtype_problem, scale_up_problem
from pagesim.simulator.scenario.overrides import (
    apply_overrides,
    blame,
    check_path,
    parse_param,
    parse_value,
    read_sweep,
    with_value,
)
from pagesim.simulator.scenario.report import read_report
from pagesim.simulator.scenario.schema import MAX_AXES, MAX_SWEEP_POINTS, SCHEMA
from pagesim.simulator.scenario.system_overrides import check_own_degree
from pagesim.simulator.scenario.systems import read_systems
from pagesim.simulator.scenario.table import (
    Ctx,
    ScenarioError,
    Table,
    described,
    display,
    is_file,
    number_text,
    show,
    suggest,
)
from pagesim.simulator.scenario.toml_writer import describe_scenario
from pagesim.simulator.scenario.wide_ep import read_wide_ep
from pagesim.simulator.scenario.workload import read_workload
from pagesim.simulator.workload.trace_files import BUILTIN_TRACES

__all__ = [
    "BUILTIN_DIR",
    "BUILTIN_TRACES",
    "PROFILE_DIR",
    "SCHEMA",
    "ScenarioError",
    "builtin_commands",
    "check_path",
    "describe_scenario",
    "expand_sweep",
    "list_builtin",
    "load_scenario",
    "parse_param",
    "parse_scenario",
    "parse_value",
    "resolve_scenario",
    "scenario_to_toml_text",
]

# The measured profiles found by bare file name (package data).
PROFILE_DIR = Path(str(resources.files("pagesim.calibration"))) / "profiles"


# --- the sections --------------------------------------------------------------------------


BUILTIN_PREFIX = "builtin:"


def builtin_profiles() -> list[str]:
    """Names of the shipped profiles (`profile = "builtin:<name>"`)."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json")) if PROFILE_DIR.is_dir() else []


def _profile_path(t: Table) -> Path:
    text: str = t.text("profile")
    if text.startswith(BUILTIN_PREFIX):
        name = text[len(BUILTIN_PREFIX) :]
        path = PROFILE_DIR / f"{name}.json"
        if "/" in name or "\\" in name or not is_file(path):
            known = builtin_profiles()
            t.fail(
                "profile",
                f"no built-in profile {name!r}{suggest(name, known)}; built-in: "
                f"{choices_text(known) or 'none'}",
            )
        return path
    path = t.ctx.resolve(text)
    if is_file(path):
        return path
    candidates = [display(path)]
    if "/" not in text and "\\" not in text:
        installed: Path = PROFILE_DIR / text
        if is_file(installed):
            return installed
        candidates.append(display(installed))
    t.fail("profile", f"no such profile file {text!r} (looked for {' and '.join(candidates)})")


def _optional_fraction(t: Table, name: str) -> float | None:
    return t.fraction(name, None, lo_open=True) if t.has(name) else None


def _execution(t: Table) -> ExecutionConfig:
    # A profile given without a kind prices the steps: naming the file and silently keeping the
    # roofline surprised users. kind = "roofline" beside a profile still checks it.
    default = ExecutionKind.PROFILE if t.has("profile") else ExecutionKind.ROOFLINE
    kind = t.choice("kind", ExecutionKind, default)
    if kind is ExecutionKind.PROFILE and not t.has("profile"):
        t.fail("profile", 'required key is missing: kind = "profile" needs a profile file')
    # A profile given with kind = "roofline" is still checked (by `_check_profile`), so that a
    # sweep over execution.kind = ["roofline", "profile"] compares the two on one file.
    profile = _profile_path(t) if t.has("profile") else None
    return ExecutionConfig(
        kind=kind,
        profile_path=profile,
        gemm_efficiency=_optional_fraction(t, "gemm_efficiency"),
        attention_bw_efficiency=_optional_fraction(t, "attention_bw_efficiency"),
        weight_bw_efficiency=_optional_fraction(t, "weight_bw_efficiency"),
        step_overhead_s=t.number("step_overhead_s", None, hi=59.0),
        step_overhead_s_per_seq=t.number("step_overhead_s_per_seq", None, hi=1.0),
        async_scheduling=t.flag("async_scheduling", None),
        frontend_s=t.number("frontend_s", None, hi=59.0),
        allreduce_bw_gbps=t.number("allreduce_bw_gbps", None, hi=1e5, lo_open=True),
        allreduce_latency_us=t.number("allreduce_latency_us", None, hi=1e6),
        custom_allreduce_stage_us=t.number("custom_allreduce_stage_us", None, hi=1e6),
        fused_moe_bw_efficiency=_optional_fraction(t, "fused_moe_bw_efficiency"),
        swap_copy_latency_s=t.number(
            "swap_copy_latency_s", ExecutionConfig().swap_copy_latency_s, hi=1.0
        ),
        routing_skew=t.number("routing_skew", 0.0, hi=100.0),
    )


def _check_hardware_fit(model_t: Table, scenario: Scenario) -> None:
    """The tensor-parallel group in one scale-up domain, the KV dtype one vLLM runs there."""
    problem = scale_up_problem(scenario.gpu, scenario.tensor_parallel)
    if problem is not None:
        model_t.fail("tensor_parallel", problem)
    kv = kv_dtype_problem(scenario.gpu, scenario.model, scenario.kv_dtype, scenario.systems)
    if kv is not None:
        model_t.fail("kv_dtype", kv)


def _check_profile(top: Table, scenario: Scenario) -> None:
    """The profile, whenever one is given, read and checked against the scenario's model."""
    path = scenario.execution.profile_path
    uses = scenario.execution.kind is ExecutionKind.PROFILE or any(
        s.execution is ExecutionKind.PROFILE for s in scenario.systems
    )
    if path is None:
        if uses:
            who = next(s.name for s in scenario.systems if s.execution is ExecutionKind.PROFILE)
            top.fail("execution", f'system {who!r} is priced by "profile": give execution.profile')
        return
    try:
        check_profile(path, scenario.model, scenario.tensor_parallel, scenario.kv_dtype)
    except InputError as exc:
        top.table("execution").fail("profile", str(exc))


def parse_scenario(raw: dict[str, Any], source: Path | None = None) -> Scenario:
    """Validate a scenario's TOML table (as `tomllib` returns it) into a frozen `Scenario`.

    Relative paths resolve against `source`'s folder (the working directory when None). Every
    sweep axis value is checked too, one axis at a time, so a bad value fails before any run.
    """
    return _parse(raw, source, check_sweep=True)


def _parse(raw: object, source: Path | None, check_sweep: bool) -> Scenario:
    label = display(source) if source is not None else "<scenario>"
    ctx = Ctx(label, source.absolute().parent if source is not None else Path.cwd())
    if not isinstance(raw, dict):
        ctx.fail("", f"a scenario must be a TOML table, got {described(raw)}")
    top = Table(ctx, "", raw, SCHEMA)
    model_t = top.table("model", required=True)
    model = read_model(model_t)
    tp = model_t.integer("tensor_parallel", 1, hi=1024)
    if model.num_heads % tp:
        model_t.fail(
            "tensor_parallel", f"{tp} does not divide {model.name}'s {model.num_heads} heads"
        )
    weight_dtype = model_t.choice("weight_dtype", WeightDtype, model.weight_dtype)
    if weight_dtype is not model.weight_dtype:
        model = replace(model, weight_dtype=weight_dtype)
    dp = model_t.integer("data_parallel", 1, hi=1024)
    ep = model_t.flag("expert_parallel", False)
    layout_problem = ExpertLayout(tp, dp, ep).problem(model)
    if layout_problem is not None:
        model_t.fail(*layout_problem)
    execution_t = top.table("execution")
    skew = execution_t.data.get("routing_skew")
    if model.moe is None and skew is not None and skew != 0:  # 0, uniform, is the default
        execution_t.fail(
            "routing_skew",
            f"only used by a mixture of experts (how tokens pick routed experts); "
            f"{model.name} has no experts: remove it",
        )
    slo_t, stop_t = top.table("slo"), top.table("stop")
    stop = StopConfig(
        max_time_s=stop_t.number("max_time_s", None, hi=1e9, lo_open=True),
        warmup_s=stop_t.number("warmup_s", 0.0, hi=1e9),
    )
    if stop.max_time_s is not None and stop.warmup_s >= stop.max_time_s:
        stop_t.fail("warmup_s", f"must be < max_time_s ({number_text(stop.max_time_s)})")
    scenario = Scenario(
        name=top.text("name", source.stem if source is not None else "scenario"),
        model=model,
        gpu=read_gpu(top.table("gpu", required=True)),
        workload=read_workload(top.table("workload", required=True), model.max_seq_len),
        systems=(),  # read below, against everything else
        description=top.text("description", "", allow_empty=True),
        seed=top.integer("seed", 0, lo=0, hi=2**63 - 1),
        kv_dtype=model_t.choice("kv_dtype", KVDtype, KVDtype.FP16),
        tensor_parallel=tp,
        data_parallel=dp,
        expert_parallel=ep,
        wide_ep=read_wide_ep(top.table("wide_ep"), model, tp, dp, ep),
        execution=_execution(top.table("execution")),
        slo=SLO(
            ttft_s=slo_t.number("ttft_s", None, hi=1e6, lo_open=True),
            tpot_s=slo_t.number("tpot_s", None, hi=1e6, lo_open=True),
        ),
        stop=stop,
        sweep=read_sweep(top.table("sweep")),
        source=source,
    )
    systems, places = read_systems(top, scenario)
    scenario = replace(scenario, systems=systems)
    _check_hardware_fit(model_t, scenario)
    _check_profile(top, scenario)
    cluster = read_cluster(
        top.table("cluster"), scenario.gpu, model, tp, [s.name for s in scenario.systems]
    )
    if cluster is not None:
        scenario = replace(scenario, cluster=cluster)
        for i, pool in enumerate(cluster.pools):
            kv = kv_dtype_problem(pool.gpu, model, scenario.kv_dtype, scenario.systems)
            if kv is not None:
                top.ctx.fail(f"cluster.pools[{i}].gpu", kv)
    has_capacity = top.has("capacity")
    check_own_degree(ctx, scenario, {n: w for n, (_, w) in places.items()}, has_capacity)
    check_deployments(top, scenario, places)  # every pool's GPU and degree, as the run's
    check_disaggregated(top.table("cluster"), scenario)
    names = [s.name for s in scenario.systems]
    scenario = replace(scenario, report=read_report(top.table("report"), names))
    capacity = read_capacity(top.table("capacity"), scenario, has_capacity)
    if capacity is not None:
        scenario = replace(scenario, capacity=capacity)
    if scenario.cluster is not None:
        searched = capacity.routers if capacity is not None else ()
        check_router_keys(top.table("cluster"), scenario.cluster, searched)
    for i, axis in enumerate(scenario.sweep if check_sweep else ()):
        for j, value in enumerate(axis.values):
            point = with_value(raw, axis.path, value, ctx, f"sweep.axes[{i}]")
            try:
                _parse(point, source, check_sweep=False)
            except ScenarioError as exc:
                key = f"{exc.key}: " if exc.key else ""
                problem = f"{axis.path} = {show(value)}: {key}{exc.problem}"
                ctx.fail(f"sweep.axes[{i}].values[{j}]", problem)
    return scenario


# --- loading -------------------------------------------------------------------------------


def load_scenario(path: Path | str, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override and validate a scenario file (or a built-in by name)."""
    path = resolve_scenario(path)
    raw = read_toml(path)
    raw, applied = apply_overrides(raw, overrides, Ctx(display(path), path.parent))
    try:
        return _parse(raw, path, check_sweep=True)
    except ScenarioError as exc:
        raise blame(exc, applied) from None


def expand_sweep(
    path: Path | str,
    overrides: Sequence[str] = (),
    axes: Sequence[SweepAxis] | None = None,
    params: Sequence[str] = (),
) -> list[tuple[dict[str, object], Scenario]]:
    """One scenario per point of the sweep: the file's [sweep] axes, unless `axes` (typed) or
    `params` (CLI `--param path=v1,v2` texts, see `parse_param`) are given in their place.

    Points are the cartesian product of the axes' values, the first axis varying slowest; each
    comes with a dict mapping axis path -> value.
    """
    if params:
        axes = [*(axes or ()), *(parse_param(text) for text in params)]
    path = resolve_scenario(path)
    ctx = Ctx(display(path), path.parent)
    raw, applied = apply_overrides(read_toml(path), overrides, ctx)
    try:
        base = _parse(raw, path, check_sweep=axes is None)
    except ScenarioError as exc:
        raise blame(exc, applied) from None
    axes = base.sweep if axes is None else tuple(axes)
    if not axes:
        ctx.fail(
            "sweep",
            "no axes: the file has no [sweep] table; give the axes on the command line, e.g. "
            "--param workload.arrival.rate_per_s=1,2,4 (one or two --param), or add "
            "[sweep] axes = [{ path = ..., values = [...] }] to the file",
        )
    if len(axes) > MAX_AXES or len({a.path for a in axes}) < len(axes):
        ctx.fail(
            "sweep", f"give one or two distinct axes, got {choices_text(a.path for a in axes)}"
        )
    if math.prod(len(a.values) for a in axes) > MAX_SWEEP_POINTS:
        ctx.fail("sweep", f"more than {MAX_SWEEP_POINTS} points")
    points = []
    for values in itertools.product(*(a.values for a in axes)):
        point = dict(zip((a.path for a in axes), values, strict=True))
        point_raw = raw
        for axis_path, value in point.items():
            point_raw = with_value(point_raw, axis_path, value, ctx, f"sweep axis {axis_path!r}")
        try:
            points.append((point, _parse(point_raw, path, check_sweep=False)))
        except ScenarioError as exc:
            where = ", ".join(f"{k} = {show(v)}" for k, v in point.items())
            raise ScenarioError(
                exc.label, exc.key, f"{blame(exc, applied).problem} (at sweep point {where})"
            ) from None
    return points
