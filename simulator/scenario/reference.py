"""The scenario file reference, generated from the code so that it cannot drift from it.

`pagesim scenarios reference > docs/scenario-reference.md` writes it; tests/test_docs.py fails
when the committed file differs from `render_reference()`. What is generated: every table and
key of `schema.SCHEMA` (with key_docs.py's words), each closed set of values from its enum,
and the catalogs a scenario names: every model and GPU preset, link preset, built-in trace,
router, headline metric, shipped profile and vLLM release.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from enum import Enum
from typing import Any

from pagesim.simulator.core.catalog import (
    GIB,
    GPUS,
    MODELS,
    TENSOR_PEAKS,
    GPUSpec,
    ModelSpec,
    TensorPeaks,
)
from pagesim.simulator.core.cluster import PoolRole, RouterKind
from pagesim.simulator.core.config import (
    AdmissionOrder,
    ArrivalKind,
    Comparison,
    ContiguousAllocator,
    DefaultsMode,
    EmpiricalPairing,
    ExecutionKind,
    LengthKind,
    Policy,
    PreemptionPolicy,
    Reservation,
    SampleLengths,
    SpecMethod,
    VictimPolicy,
    VllmVersion,
)
from pagesim.simulator.core.defaults import driver_memory_bytes
from pagesim.simulator.core.link import LINK_PRESETS
from pagesim.simulator.core.model_spec import KVDtype, LayerKind, WeightDtype
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.scenario.key_docs import KEY_DOCS, SAME_AS, TABLE_DOCS
from pagesim.simulator.scenario.load import builtin_profiles
from pagesim.simulator.scenario.report import HEADLINE_METRICS
from pagesim.simulator.scenario.schema import GPU_FIGURES, SCHEMA
from pagesim.simulator.workload.mooncake import BUILTIN_MOONCAKE
from pagesim.simulator.workload.trace_files import BUILTIN_TRACES

WIDTH = 100
COMMAND = "pagesim scenarios reference > docs/scenario-reference.md"

_INTRO = (
    f"Generated from the code by `{COMMAND}`: do not edit it by hand. tests/test_docs.py fails "
    "when this file differs from what the command prints, so it lists exactly the keys the "
    "loader accepts (simulator/scenario/schema.py) and the models, GPUs and other presets the "
    "catalogs hold. The words for each key are in simulator/scenario/key_docs.py. How a file is "
    "read and which combinations are refused: [scenario-files.md](scenario-files.md); the "
    "built-in scenarios: [scenarios/README.md](../scenarios/README.md).",
    "A scenario is one TOML file. Keys are the field names of simulator/core/config.py; enums "
    'are written as their values (`"vllm-v1"`, `"last-arrived"`). Unknown keys, wrong types (a '
    "boolean is not an integer; an integer is accepted where a float is expected), values out "
    "of range, unknown choices and combinations that cannot work are refused when the file is "
    "loaded, with one message naming the file, the key, the problem and the valid choices or "
    "range: `pagesim validate SCENARIO` checks a file without running it.",
    "Every data file (trace, session trace, acceptance table) is read one way: UTF-8 (a BOM is "
    'fine), plain decimals ("1_0" and other scripts\' digits are not numbers), as many fields '
    "per row as the header, token counts from 1 to 10^9.",
)


def _values(enum: type[Enum]) -> tuple[str, ...]:
    return tuple(str(member.value) for member in enum)


def _choices() -> dict[str, tuple[str, ...]]:
    """Each key (its path, tables named as documented) that takes a closed set of values."""
    gpus, routers = tuple(GPUS), _values(RouterKind)
    return {
        "model.kv_dtype": _values(KVDtype),
        "model.weight_dtype": _values(WeightDtype),
        "gpu.preset": gpus,
        "execution.kind": _values(ExecutionKind),
        "workload.trace": tuple(BUILTIN_TRACES),
        "workload.sampling": _values(SamplingKind),
        "workload.empirical_pairing": _values(EmpiricalPairing),
        "workload.sample_lengths": _values(SampleLengths),
        "workload.arrival.kind": _values(ArrivalKind),
        "workload.prompt.kind": _values(LengthKind),
        "workload.prompt.trace": tuple(BUILTIN_TRACES),
        "workload.mooncake.trace": tuple(BUILTIN_MOONCAKE),
        "systems.policy": _values(Policy),
        "systems.reservation": _values(Reservation),
        "systems.contiguous_allocator": _values(ContiguousAllocator),
        "systems.preemption": _values(PreemptionPolicy),
        "systems.victim": _values(VictimPolicy),
        "systems.admission": _values(AdmissionOrder),
        "systems.execution": _values(ExecutionKind),
        "systems.defaults": _values(DefaultsMode),
        "systems.vllm_version": _values(VllmVersion),
        "systems.speculative.method": _values(SpecMethod),
        "systems.weight_dtype": _values(WeightDtype),
        "systems.kv_dtype": _values(KVDtype),
        "cluster.router.kind": routers,
        "cluster.router.by_system": routers,
        "cluster.pools.gpu": gpus,
        "cluster.pools.role": _values(PoolRole),
        "cluster.link.preset": tuple(LINK_PRESETS),
        "report.compare": _values(Comparison),
        "capacity.gpus": gpus,
        "capacity.routers": routers,
    }


def schema_tables(
    schema: dict[str, Any] | None = None, prefix: str = ""
) -> Iterator[tuple[str, bool, list[str]]]:
    """Every table of the schema, depth first: (dotted path, is an array of tables, its scalar
    keys); the top level is ""."""
    schema = SCHEMA if schema is None else schema
    yield prefix, False, [k for k, v in schema.items() if not isinstance(v, dict | list)]
    for key, value in schema.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, list):
            sub = list(schema_tables(value[0], path))
            yield path, True, sub[0][2]
            yield from sub[1:]
        elif isinstance(value, dict):
            yield from schema_tables(value, path)


def _wrap(text: str, first: str = "", rest: str | None = None) -> list[str]:
    """`text` wrapped at WIDTH, never inside a word or at a hyphen; a list item's later lines
    indented by two spaces."""
    if rest is None:
        rest = "  " if first else ""
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )


def _heading(path: str, is_array: bool) -> str:
    if not path:
        return "### Top level"
    return f"### `[[{path}]]`" if is_array else f"### `[{path}]`"


def _key_lines(path: str, keys: list[str], choices: dict[str, tuple[str, ...]]) -> list[str]:
    lines: list[str] = []
    for key in keys:
        text = KEY_DOCS[path][key]
        valid = choices.get(f"{path}.{key}" if path else key)
        if valid:
            text += " Valid: " + ", ".join(f"`{v}`" for v in valid) + "."
        if path == "gpu" and key in GPU_FIGURES:
            text += f" In (0, {GPU_FIGURES[key][0]:g}]."
        lines += _wrap(text, f"- `{key}`: ")
    return lines


def documented_as(path: str) -> str:
    """The table whose keys document table `path`: itself, or the one it takes its keys from
    (SAME_AS), for a sub-table too (`[defaults.speculative]` is `[systems.speculative]`)."""
    for table, source in SAME_AS.items():
        if path == table or path.startswith(f"{table}."):
            return source + path[len(table) :]
    return path


def _keys_section() -> list[str]:
    choices = _choices()
    lines = ["## Keys, table by table", ""]
    arrays = {path for path, is_array, _ in schema_tables() if is_array}
    for path, is_array, keys in schema_tables():
        source = documented_as(path)
        lines += [_heading(path, is_array), ""]
        if path in TABLE_DOCS:
            lines += [*_wrap(TABLE_DOCS[path]), ""]
        if source != path:
            names = ", ".join(f"`{k}`" for k in keys)
            where = _heading(source, source in arrays).removeprefix("### ")
            lines += _wrap(f"The keys of {where}, with the same meaning: {names}.")
        else:
            lines += _key_lines(path, keys, choices)
        lines.append("")
    return lines


def _attention(model: ModelSpec) -> str:
    if model.mla is not None:
        return f"MLA, latent {model.mla.kv_lora_rank} + rope {model.mla.qk_rope_head_dim}"
    kind = "MHA" if model.num_kv_heads == model.num_heads else "GQA"
    return f"{kind} {model.num_heads} / {model.num_kv_heads} x {model.head_dim}"


def _layers(model: ModelSpec) -> str:
    parts = [str(model.num_layers)]
    if model.sliding_window is not None:
        sliding = model.num_layers_of(LayerKind.SLIDING)
        parts.append(f"{sliding} sliding ({model.sliding_window})")
    if model.state is not None:
        parts.append(f"{model.num_layers_of(LayerKind.STATE)} state")
    return ", ".join(parts)


def _moe(model: ModelSpec) -> str:
    if model.moe is None:
        return "-"
    return f"{model.moe.experts_per_token} of {model.moe.num_experts}"


def _models_section() -> list[str]:
    intro = (
        "`[model] preset` and `draft_model` take these names; any Hugging Face config.json works "
        "too (`[model] config`). Sources: simulator/core/catalog.py and model_presets.py, "
        "[facts.md](facts.md). Attention: query heads / KV heads x head dim; layers: of which "
        "sliding-window (the window in tokens) or state; KV bytes per token at fp16 over all "
        "layers on one GPU (state layers keep none)."
    )
    lines = [
        "## Models",
        "",
        *_wrap(intro),
        "",
        "| model | layers | attention | MoE experts | max length | params (B) | weights "
        "| KV bytes/token |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model in MODELS.values():
        lines.append(
            f"| `{model.name}` | {_layers(model)} | {_attention(model)} | {_moe(model)} | "
            f"{model.max_seq_len:,} | {model.num_params / 1e9:.2f} | {model.weight_dtype.value} | "
            f"{model.kv_bytes_per_token():,} |"
        )
    return [*lines, ""]


def _peak(flops: float | None) -> str:
    return "-" if flops is None else f"{flops / 1e12:g}"


def _fp4(peaks: TensorPeaks) -> str:
    """The FP4 peak and the formats the tensor cores take, e.g. "9000 (nvfp4, mxfp4)"."""
    if peaks.fp4 is None:
        return "-"
    return f"{_peak(peaks.fp4)} ({', '.join(peaks.fp4_formats.split())})"


def _factors(gpu: GPUSpec) -> str:
    """`fitted` or whose fitted factors it borrows (from hardware.extrapolated's source)."""
    if gpu.factors.is_fitted:
        return "fitted"
    borrowed = gpu.factors.source.removeprefix("extrapolated: ").split("'s ")[0]
    return f"{borrowed}'s (extrapolated)"


def _gpus_section() -> list[str]:
    intro = (
        "`[gpu] preset`, `[[cluster.pools]] gpu` and `[capacity] gpus` take these names; a custom "
        "GPU gives its own figures. Datasheet figures (sources: [facts.md](facts.md), "
        "simulator/core/presets/gpus.toml); driver GiB: the memory vLLM's utilization applies to; "
        "dense tensor peaks in TFLOP/s (TOPS for INT8; FP4 with the formats its tensor cores "
        "take); domain: GPUs of one NVLink/xGMI domain ([gpu] scale_up_gpus, the largest "
        "tensor_parallel); step-cost factors fitted to Vidur's measurements of the GPU or taken "
        "from another ([step-costs.md](step-costs.md)); an all-reduce link marked estimate is "
        "scaled from the measured NVLink 4."
    )
    lines = [
        "## GPUs",
        "",
        *_wrap(intro),
        "",
        "| preset | memory GiB | driver GiB | bandwidth GB/s | BF16/FP16 | FP8 | INT8 | FP4 | "
        "host link GB/s | domain | step-cost factors | all-reduce link |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for gpu in GPUS.values():
        peaks = TENSOR_PEAKS.get(gpu.name)
        bf16, fp8, int8, fp4 = (
            (_peak(gpu.fp16_flops), "-", "-", "-")
            if peaks is None
            else (_peak(peaks.bf16), _peak(peaks.fp8), _peak(peaks.int8), _fp4(peaks))
        )
        lines.append(
            f"| `{gpu.name}` | {gpu.memory_bytes / GIB:g} | "
            f"{driver_memory_bytes(gpu) / GIB:.1f} | {gpu.mem_bandwidth_bps / 1e9:g} | {bf16} | "
            f"{fp8} | {int8} | {fp4} | {gpu.host_link_bps / 1e9:g} | {gpu.scale_up_gpus} | "
            f"{_factors(gpu)} | {gpu.interconnect.name} |"
        )
    return [*lines, ""]


def _links_section() -> list[str]:
    intro = (
        "`[cluster.link] preset`; per GPU port, one direction (simulator/core/presets/links.toml)."
    )
    lines = ["## Link presets", "", intro, ""]
    for name, preset in LINK_PRESETS.items():
        text = (
            f"{preset.bandwidth_bytes_s / 1e9:g} GB/s, latency {preset.latency_s * 1e6:g} us: "
            f"{preset.basis}"
        )
        lines += _wrap(text, f"- `{name}`: ")
    return [*lines, ""]


def _list_section(title: str, intro: str, names: list[str]) -> list[str]:
    lines = [f"## {title}", "", *_wrap(intro), ""]
    return [*lines, *_wrap(", ".join(f"`{n}`" for n in names) + "."), ""]


def render_reference() -> str:
    """The whole reference, as `pagesim scenarios reference` prints it."""
    lines = ["# Scenario file reference", ""]
    for paragraph in _INTRO:
        lines += [*_wrap(paragraph), ""]
    lines += [*_keys_section(), *_models_section(), *_gpus_section(), *_links_section()]
    lines += _list_section(
        "Traces",
        "`[workload] trace` and an empirical length's `trace` (files and provenance: "
        "simulator/workload/data/README.md):",
        list(BUILTIN_TRACES),
    )
    lines += _list_section(
        "Mooncake traces", "`[workload.mooncake] trace`:", list(BUILTIN_MOONCAKE)
    )
    lines += _list_section(
        "Routers",
        "`[cluster.router] kind`, `by_system`, `[capacity] routers` (what each reads: "
        "simulator/cluster/routers.py):",
        list(_values(RouterKind)),
    )
    lines += _list_section(
        "Headline metrics",
        "`[report] key_metric` and `metrics` (each defined in the report's glossary, "
        "reports/glossary.py):",
        list(HEADLINE_METRICS),
    )
    lines += _list_section(
        "Built-in profiles",
        '`[execution] profile = "builtin:<name>"`: Vidur\'s public measurements imported '
        "(calibration/profiles/README.md lists them with their errors):",
        builtin_profiles(),
    )
    lines += _list_section(
        "vLLM releases",
        "`vllm_version` (vllm-v1): the releases whose rules pagesim follows "
        "([engine-eras.md](engine-eras.md)):",
        list(_values(VllmVersion)),
    )
    return "\n".join(lines).rstrip("\n") + "\n"
