"""The [model] and [gpu] sections: a catalog preset or a Hugging Face config.json; a GPU preset,
its datasheet figures replaced one by one, or a custom GPU.

The same idea in the core layer: simulator/core/catalog.py, whose presets these name.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pagesim.simulator.core.catalog import (
    GPUS,
    MODELS,
    GPUSpec,
    ModelSpec,
    custom_gpu,
    get_gpu,
    get_model,
    load_hf_config,
)
from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.scenario.hardware_fit import scale_up_limit_problem
from pagesim.simulator.scenario.schema import GPU_FIGURES
from pagesim.simulator.scenario.table import Table, display, is_file


def read_model(t: Table) -> ModelSpec:
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


def read_gpu(t: Table) -> GPUSpec:
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
        memory_gib, bandwidth_gbps, tflops, host_link_gbps = (figures[k] for k in GPU_FIGURES)
        gpu = custom_gpu(t.text("name"), memory_gib, bandwidth_gbps, tflops, host_link_gbps or 25.0)
        return _scale_up(t, gpu, None)
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
    return _scale_up(t, replace(gpu, **changes), gpu.scale_up_gpus)


def _scale_up(t: Table, gpu: GPUSpec, preset_gpus: int | None) -> GPUSpec:
    """[gpu] scale_up_gpus: at most the preset's domain (scenario/hardware_fit.py)."""
    value: int = t.integer("scale_up_gpus", gpu.scale_up_gpus, hi=1024)
    problem = scale_up_limit_problem(gpu, preset_gpus, value)
    if problem is not None:
        t.fail("scale_up_gpus", problem)
    return replace(gpu, scale_up_gpus=value)
