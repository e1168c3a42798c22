"""Scenario files: TOML -> one validated, frozen `Scenario`; `--set` overrides; sweep expansion.

Every problem with a scenario file is an `InputError` whose one-line message names the file, the
key (a dotted path such as `systems[1].policy`), what is wrong and the valid choices or range.
Nothing else escapes, however malformed the input. The schema (full reference, with examples, in
scenarios/README.md; keys are simulator/core/config.py field names):

    name = "..."                  # default: the file's stem
    description = "..."           # its first line is what `pagesim scenarios list` shows
    seed = 0                      # RNG seed of the whole simulation
    [model]      preset = "llama-2-7b"  |  config = "path/to/config.json" (relative to this file)
                 kv_dtype = "fp16" | "bf16" | "fp8";  tensor_parallel = 1
    [gpu]        preset = "a100-80gb", and/or name, memory_gib, mem_bandwidth_gbps, fp16_tflops,
                 host_link_gbps (a preset's figures can be overridden one by one)
    [execution]  kind = "roofline" | "profile";  profile = "file.json" (relative to this file, or
                 a bare file name in calibration/profiles/);  gemm_efficiency,
                 attention_bw_efficiency, weight_bw_efficiency, step_overhead_s, allreduce_bw_gbps
    [workload]   num_requests, trace ("azure-conv", "azure-code", "arxiv-summarization" or a CSV
                 path), trace_offset, time_scale, sampling = "single"|"parallel"|"beam", num_seqs
      [workload.arrival]           kind = poisson|gamma|constant|burst|trace, rate_per_s, cv
      [workload.prompt], [workload.output]
                                   kind = fixed (value) | uniform (low, high) | lognormal (mean, cv)
                                   | empirical (trace or path, column) | trace
      [[workload.prefix_groups]]   num_tokens, fraction
      [[workload.requests]]        prompt_len, output_len, arrival_s, priority (replace generators)
    [defaults]   any [[systems]] key but name: applies to every system that does not set it
    [[systems]]  name, policy = static|orca|vllm-v0|vllm-v1, and any SystemConfig field
    [slo]        ttft_s, tpot_s
    [stop]       max_time_s, warmup_s
    [sweep]      axes = [{ path = "workload.arrival.rate_per_s", values = [1, 2, 4] }]  (1 or 2)

An override or sweep axis path is a dotted key into that schema: `systems.block_size` sets the
key in every system, `systems[0].block_size` in one. Override values are TOML values when they
parse as one (`2`, `2.5`, `true`, `"x"`, `[1, 2]`, `{ kind = "burst" }`), else bare strings.

This module reads the small sections and holds the file-level API; the rest lives beside it:
scenario_schema (the valid keys and limits), scenario_table (`Table`, `ScenarioError`, values in
messages), scenario_workload and scenario_systems (the two big sections), scenario_traces (trace
CSV checks), scenario_overrides (paths, `--set`, `--param`), scenario_toml (`describe_scenario`).
"""

from __future__ import annotations

import itertools
import math
import tomllib
from collections.abc import Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from pagesim.simulator.core.catalog import (
    GPUS,
    MODELS,
    GPUSpec,
    KVDtype,
    ModelSpec,
    custom_gpu,
    get_gpu,
    get_model,
    load_hf_config,
)
from pagesim.simulator.core.config import (
    SLO,
    ExecutionConfig,
    ExecutionKind,
    Scenario,
    StopConfig,
    SweepAxis,
)
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.scenario.overrides import (
    apply_overrides,
    blame,
    check_path,
    parse_param,
    parse_value,
    with_value,
)
from pagesim.simulator.scenario.schema import (
    GPU_FIGURES,
    MAX_AXES,
    MAX_SWEEP_POINTS,
    SCHEMA,
)
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
)
from pagesim.simulator.scenario.toml_writer import describe_scenario
from pagesim.simulator.scenario.workload import read_workload
from pagesim.simulator.workload.trace_files import BUILTIN_TRACES

__all__ = [
    "BUILTIN_DIR",
    "BUILTIN_TRACES",
    "PROFILE_DIR",
    "SCHEMA",
    "ScenarioError",
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

# The scenario library and the measured profiles found by bare file name (package data).
BUILTIN_DIR = Path(str(resources.files("pagesim.scenarios")))
PROFILE_DIR = Path(str(resources.files("pagesim.calibration"))) / "profiles"

MAX_FILE_BYTES = 16 * 2**20  # a scenario file


# --- the sections --------------------------------------------------------------------------


def _model(t: Table) -> ModelSpec:
    if t.has("preset") == t.has("config"):
        t.ctx.fail(
            t.key,
            "give exactly one of 'preset' (a catalog model: "
            f"{choices_text(MODELS)}) or 'config' (a path to a Hugging Face config.json)",
        )
    if t.has("preset"):
        name = t.text("preset")
        try:
            return get_model(name)
        except InputError as exc:
            t.fail("preset", str(exc))
    path = t.ctx.resolve(t.text("config"))
    if not is_file(path):
        t.fail("config", f"no such model config file {display(path)!r}")
    try:
        spec = load_hf_config(display(path))  # the catalog's messages name the path given
    except InputError as exc:
        t.fail("config", str(exc))
    except (RecursionError, ValueError, TypeError, OverflowError, AttributeError) as exc:
        t.fail("config", f"{display(path)}: unusable config.json ({type(exc).__name__}: {exc})")
    if min(spec.num_layers, spec.num_heads, spec.head_dim, spec.hidden_size, spec.num_params) < 1:
        t.fail("config", f"{display(path)}: the shapes give a layer, head or size of 0")
    return spec


def _gpu(t: Table) -> GPUSpec:
    figures = {
        key: t.number(key, None, hi=hi, lo_open=True) for key, (hi, _, _) in GPU_FIGURES.items()
    }
    if not t.has("preset"):
        missing = [k for k in ("name", *list(GPU_FIGURES)[:3]) if not t.has(k)]
        if missing:
            t.ctx.fail(
                t.key,
                f"give 'preset' (one of: {choices_text(GPUS)}) or a custom GPU's name, "
                f"memory_gib, mem_bandwidth_gbps and fp16_tflops (missing: "
                f"{choices_text(missing)}; host_link_gbps defaults to 25)",
            )
        numbers = [figures[k] for k in GPU_FIGURES]
        return custom_gpu(t.text("name"), *numbers[:3], numbers[3] or 25.0)
    name = t.text("preset")
    try:
        gpu = get_gpu(name)
    except InputError as exc:
        t.fail("preset", str(exc))
    changes: dict[str, Any] = {"name": t.text("name", gpu.name)}
    for key, value in figures.items():
        if value is not None:  # a preset's datasheet figure replaced, e.g. a 141 GiB H200 as 144
            _, field, unit = GPU_FIGURES[key]
            changes[field] = int(value * unit) if field == "memory_bytes" else value * unit
    return replace(gpu, **changes)


def _profile_path(t: Table) -> Path:
    text = t.text("profile")
    path = t.ctx.resolve(text)
    if is_file(path):
        return path
    candidates = [display(path)]
    if "/" not in text and "\\" not in text:
        installed = PROFILE_DIR / text
        if is_file(installed):
            return installed
        candidates.append(display(installed))
    t.fail("profile", f"no such profile file {text!r} (looked for {' and '.join(candidates)})")


def _execution(t: Table) -> ExecutionConfig:
    kind = t.choice("kind", ExecutionKind, ExecutionKind.ROOFLINE)
    if kind is ExecutionKind.PROFILE and not t.has("profile"):
        t.fail("profile", 'required key is missing: kind = "profile" needs a profile file')
    # A profile given with kind = "roofline" is still checked, so that a sweep over
    # execution.kind = ["roofline", "profile"] compares the two on one file.
    profile = _profile_path(t) if t.has("profile") else None
    base = ExecutionConfig()
    return ExecutionConfig(
        kind=kind,
        profile_path=profile,
        gemm_efficiency=t.fraction("gemm_efficiency", base.gemm_efficiency, lo_open=True),
        attention_bw_efficiency=t.fraction(
            "attention_bw_efficiency", base.attention_bw_efficiency, lo_open=True
        ),
        weight_bw_efficiency=t.fraction(
            "weight_bw_efficiency", base.weight_bw_efficiency, lo_open=True
        ),
        step_overhead_s=t.number("step_overhead_s", base.step_overhead_s, hi=60.0),
        allreduce_bw_gbps=t.number(
            "allreduce_bw_gbps", base.allreduce_bw_gbps, hi=1e5, lo_open=True
        ),
    )


def _sweep(t: Table) -> tuple[SweepAxis, ...]:
    axes_raw = t.data.get("axes", [])
    if not isinstance(axes_raw, list):
        t.fail("axes", f"expected an array of {{ path, values }} tables, got {described(axes_raw)}")
    if len(axes_raw) > MAX_AXES:
        t.fail("axes", f"at most {MAX_AXES} axes, got {len(axes_raw)}")
    axes: list[SweepAxis] = []
    schema = {"path": None, "values": None}
    for i, item in enumerate(axes_raw):
        a = Table(t.ctx, f"{t.path('axes')}[{i}]", item, schema)
        path = a.text("path")
        try:
            check_path(path)
        except InputError as exc:
            a.fail("path", str(exc))
        if path.split(".")[0].split("[")[0] == "sweep":
            a.fail("path", "a sweep axis cannot change [sweep] itself")
        values = a.data.get("values")
        if not isinstance(values, list) or not values:
            got = "nothing" if values is None else described(values)
            a.fail("values", f"expected a non-empty array of values, got {got}")
        if len(values) > MAX_SWEEP_POINTS:
            a.fail("values", f"at most {MAX_SWEEP_POINTS} values, got {len(values)}")
        if any(path == other.path for other in axes):
            a.fail("path", f"{path!r} is already an axis")
        axes.append(SweepAxis(path, tuple(values)))
    return tuple(axes)


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
    model = _model(model_t)
    tp = model_t.integer("tensor_parallel", 1, hi=1024)
    if model.num_heads % tp:
        model_t.fail(
            "tensor_parallel", f"{tp} does not divide {model.name}'s {model.num_heads} heads"
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
        gpu=_gpu(top.table("gpu", required=True)),
        workload=read_workload(top.table("workload", required=True), model.max_seq_len),
        systems=(),  # read below, against everything else
        description=top.text("description", "", allow_empty=True),
        seed=top.integer("seed", 0, lo=0, hi=2**63 - 1),
        kv_dtype=model_t.choice("kv_dtype", KVDtype, KVDtype.FP16),
        tensor_parallel=tp,
        execution=_execution(top.table("execution")),
        slo=SLO(
            ttft_s=slo_t.number("ttft_s", None, hi=1e6, lo_open=True),
            tpot_s=slo_t.number("tpot_s", None, hi=1e6, lo_open=True),
        ),
        stop=stop,
        sweep=_sweep(top.table("sweep")),
        source=source,
    )
    scenario = replace(scenario, systems=read_systems(top, scenario))
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


# --- files ---------------------------------------------------------------------------------


def _read_toml(path: Path) -> dict[str, Any]:
    ctx = Ctx(display(path), path.parent)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            ctx.fail("", f"larger than {MAX_FILE_BYTES >> 20} MiB: not a scenario file")
        data = path.read_bytes()
    except OSError as exc:
        ctx.fail("", f"cannot read: {exc.strerror or exc}")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        ctx.fail("", f"not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line})")
    except tomllib.TOMLDecodeError as exc:
        ctx.fail("", f"not valid TOML: {exc}")
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        ctx.fail("", f"not valid TOML: {str(exc).split(';')[0]}")
    except RecursionError:
        ctx.fail("", "not valid TOML: arrays or tables nested too deeply")


def resolve_scenario(name_or_path: str | Path) -> Path:
    """A scenario file: an existing path, or the name of a built-in (with or without .toml)."""
    path = Path(name_or_path)
    if is_file(path):
        return path
    stem = str(name_or_path).removesuffix(".toml")
    builtin = BUILTIN_DIR / f"{stem}.toml"
    if "/" not in stem and "\\" not in stem and is_file(builtin):
        return builtin
    names = choices_text(name for name, _ in list_builtin())
    raise InputError(
        f"{str(name_or_path)!r}: no such scenario file or built-in; built-ins: {names}"
    )


def list_builtin() -> list[tuple[str, str]]:
    """(name, first line of its description) of every built-in scenario, sorted by name."""
    found = []
    for path in sorted(BUILTIN_DIR.glob("*.toml")):
        try:
            description = tomllib.loads(path.read_text("utf-8")).get("description", "")
        except (OSError, ValueError):
            description = ""
        lines = str(description).strip().splitlines()
        found.append((path.stem, lines[0].strip() if lines else ""))
    return found


def load_scenario(path: Path | str, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override and validate a scenario file (or a built-in by name)."""
    path = resolve_scenario(path)
    raw = _read_toml(path)
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
    raw, applied = apply_overrides(_read_toml(path), overrides, ctx)
    try:
        base = _parse(raw, path, check_sweep=axes is None)
    except ScenarioError as exc:
        raise blame(exc, applied) from None
    axes = base.sweep if axes is None else tuple(axes)
    if not axes:
        ctx.fail("sweep", "no axes: add [sweep] axes = [{ path = ..., values = [...] }]")
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


def scenario_to_toml_text(path: Path | str, overrides: Sequence[str] = ()) -> str:
    """The scenario file's text as run: the overrides applied on top, as leading comments."""
    path = resolve_scenario(path)
    text = path.read_bytes().decode("utf-8", errors="replace")
    if not overrides:
        return text
    header = "".join(f"#   {o}\n" for o in overrides)
    return f"# pagesim: overrides applied on top of this file:\n{header}\n{text}"
