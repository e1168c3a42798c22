"""Warnings a person must see about a profile's step prices (the CLI prints them, the report shows
them): a profile measured on another GPU than the scenario's, and prices that would make the
scenario's GPU exceed its datasheet (MFU or MBU above 100%), checked on probe steps when the model
is built and on a run's averages when it ends."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping

from pagesim.simulator.core.catalog import GPUS, GPUSpec
from pagesim.simulator.core.plan import SeqWork, StepCost, StepPlan

_GPU_WORD = re.compile(r"[a-z]+\d+")  # "a100", "h200", "l40", "rtx4090" -> model words
# Steps a profile is asked to price when loaded: decode at batch 1, 64 and 256 over 1k and 4k of
# context, a 512- and a 2048-token prefill.
PROBES = (
    ("decode 1 x 1024", [(1, 1024, False)]),
    ("decode 64 x 1024", [(1, 1024, False)] * 64),
    ("decode 256 x 4096", [(1, 4096, False)] * 256),
    ("prefill 512", [(512, 512, True)]),
    ("prefill 2048", [(2048, 2048, True)]),
)


def gpu_words(name: object) -> set[str]:
    text = str(name).lower().replace(" ", "").replace("-", "").replace("_", "")
    words = set(_GPU_WORD.findall(str(name).lower()))
    return words | ({"rtx4090"} if "4090" in text else set())


def same_gpu(device: object, gpu_name: str) -> bool:
    """Whether a profile's device names the scenario's GPU (a100-80gb ~ "NVIDIA A100-SXM4-80GB")."""
    return bool(gpu_words(device) & gpu_words(gpu_name))


def other_gpu_reason(device: object, gpu: GPUSpec) -> str | None:
    """Why a profile measured on `device` cannot price `gpu`: the device names a catalog GPU
    and not this one (a profile's prices are its device's; the run refuses, as it refuses a
    profile of other shapes or another tensor-parallel degree). None for the same GPU, a CPU
    (the calibration pipeline's test runs) or a device no catalog GPU matches, which
    `profile_warnings` warns of instead."""
    if device == "cpu" or same_gpu(device, gpu.name):
        return None
    if not any(same_gpu(device, name) for name in GPUS):
        return None
    return (
        f"measured on {device!r}, but the replicas run on {gpu.name!r}: a profile prices the "
        f"GPU it was measured on; use a profile measured on {gpu.name} or execution.kind = "
        '"roofline"'
    )


def profile_warnings(
    device: object, gpu: GPUSpec, price: Callable[[StepPlan], StepCost]
) -> list[str]:
    """Warnings about a profile measured on `device`, priced by `price`, for a scenario on
    `gpu` (a device that names another catalog GPU is refused: `other_gpu_reason`)."""
    found = []
    if device != "cpu" and not same_gpu(device, gpu.name):
        found.append(
            f"the profile was measured on {device!r}, which pagesim cannot match to "
            f"{gpu.name!r}: its prices are that device's, not this one's"
        )
    peak, bw = gpu.fp16_flops, gpu.mem_bandwidth_bps
    worst: tuple[float, str, str] | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for label, shape in PROBES:
            plan = StepPlan.build([SeqWork(i, i, n, c, p) for i, (n, c, p) in enumerate(shape)])
            cost = price(plan)
            for what, share in (
                ("MFU", cost.flops / (peak * cost.duration_s)),
                ("MBU", cost.bytes_moved / (bw * cost.duration_s)),
            ):
                if share > 1 and (worst is None or share > worst[0]):
                    worst = (share, what, label)
    if worst is not None:
        share, what, label = worst
        found.append(
            f"the profile prices a {label} step at {what} {100 * share:.0f}% of "
            f"{gpu.name}'s datasheet: faster than this GPU can run (a profile of a faster "
            "GPU, or a broken one)"
        )
    return found


def utilization_warnings(
    summary: Mapping[str, object], gpu: str, device: object = None
) -> list[str]:
    """A run whose time-averaged MFU or MBU exceeds 100% was priced faster than its GPU `gpu`
    can run (reproducer 14): said once, naming the profile's `device` when there is one."""
    over = [
        f"{what} {100 * value:.0f}%"
        for key, what in (("mfu", "MFU"), ("mbu", "MBU"))
        if isinstance(value := summary.get(key), int | float) and value > 1
    ]
    if not over:
        return []
    source = f"a profile measured on {device}" if device else "the execution model"
    return [
        f"{' and '.join(over)} over the run, beyond the peak of {gpu}: its step times come from "
        f"{source}, faster than this GPU can be; use a profile measured on it, or the roofline"
    ]
