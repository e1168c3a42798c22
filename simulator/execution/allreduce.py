"""Which all-reduce vLLM runs for a tensor-parallel step, and what one call costs.

vLLM does not send every all-reduce through NCCL. Its group coordinator tries its own kernels
first (vLLM v0.6.4: vllm/distributed/parallel_state.py GroupCoordinator.all_reduce, then
device_communicators/custom_all_reduce.py CustomAllreduce.should_custom_ar; the kernel's choice
in csrc/custom_all_reduce.cuh CustomAllreduce::allreduce):

- **custom all-reduce** when the group is 2, 4, 6 or 8 GPUs, either two GPUs or every pair on
  NVLink (`full_nvlink`; on more PCIe-only GPUs it disables itself), and the message is under
  `max_size`, 8 MiB (and a multiple of 16 bytes, which a 16-bit hidden state of a multiple of 8
  always is). The kernel: one-shot (`cross_device_reduce_1stage`) for two GPUs, or a message under
  512 KiB on up to 4 GPUs or under 256 KiB on up to 8; two-shot (`..._2stage`) otherwise;
- **NCCL** (pynccl) for everything else: the measured medians of core/presets/interconnects.toml.

vLLM v0.11 (the V1 era): the same kernels and rule, but with torch symmetric memory on (its
default on Hopper) the custom kernel's limit on Hopper is min(8 MiB, CUSTOM_ALL_REDUCE_MAX_SIZES)
(vllm/distributed/device_communicators/all_reduce_utils.py): 8 MiB at 2 and 4 GPUs, 512 KiB at
6, 256 KiB at 8; larger messages go to symmetric memory (up to 64 MiB), which pagesim does not
model and prices as NCCL. Later releases add NCCL symmetric memory and FlashInfer's fused
all-reduce (v0.33+): not modelled either (NCCL's figures, or the custom kernel where it still
runs).

Inside a CUDA graph the kernel reads the inputs in place (their buffers registered at capture);
run eagerly (prefills, batches beyond the largest captured one) it first copies the input into
its pre-registered buffer (`all_reduce(registered=False)`), priced here as the message read and
written once at the GPU's datasheet bandwidth. A link whose scenario sets its own figures
(`allreduce_latency_us`, `allreduce_bw_gbps`) takes them for every call: no custom kernel.
"""

from __future__ import annotations

from enum import Enum

from pagesim.simulator.core.hardware import Interconnect
from pagesim.simulator.execution.overhead import EngineEra
from pagesim.simulator.execution.roofline_terms import allreduce_call_s

MIB = 1 << 20
KIB = 1 << 10
CUSTOM_MAX_BYTES = 8 * MIB  # CustomAllreduce(max_size=8192 * 1024), v0.6.4 and v0.11
CUSTOM_GROUP_SIZES = (2, 4, 6, 8)  # CustomAllreduce._SUPPORTED_WORLD_SIZES
# v0.11 all_reduce_utils.CUSTOM_ALL_REDUCE_MAX_SIZES["9.0"] (Hopper) above 4 GPUs; 2 and 4 GPUs'
# 64 and 32 MiB stay capped by max_size.
HOPPER_V1_MAX_BYTES = {6: 512 * KIB, 8: 256 * KIB}
HOPPER_GPUS = frozenset(("h100-sxm", "h200-sxm"))  # compute capability 9.0


class Route(Enum):
    """The kernel one all-reduce call runs."""

    ONE_SHOT = "custom one-shot"
    TWO_SHOT = "custom two-shot"
    NCCL = "nccl"


# The members read as globals (every step shape's calls ask): core/request.py says why.
_ONE_SHOT, _TWO_SHOT, _NCCL = Route.ONE_SHOT, Route.TWO_SHOT, Route.NCCL
_V1 = EngineEra.V1


def route(
    message_bytes: float, num_gpus: int, link: Interconnect, era: EngineEra, gpu_name: str
) -> Route:
    """vLLM's choice for one call (module docstring), by the engine era's release."""
    if link.custom is None or num_gpus not in CUSTOM_GROUP_SIZES:
        return _NCCL
    limit = CUSTOM_MAX_BYTES
    if era is _V1 and gpu_name in HOPPER_GPUS:
        limit = min(limit, HOPPER_V1_MAX_BYTES.get(num_gpus, limit))
    if not message_bytes < limit:
        return _NCCL
    if num_gpus == 2 or (
        (num_gpus <= 4 and message_bytes < 512 * KIB) or message_bytes < 256 * KIB
    ):
        return _ONE_SHOT
    return _TWO_SHOT


def call_s(
    message_bytes: float,
    num_gpus: int,
    link: Interconnect,
    chosen: Route,
    is_graphed: bool,
    copy_bps: float,
) -> float:
    """One call's seconds on `link` (its figures at `num_gpus`: Interconnect.at)."""
    custom = link.custom
    if chosen is _NCCL or custom is None:
        return float(allreduce_call_s(message_bytes, num_gpus, link))
    if chosen is _ONE_SHOT:
        seconds = custom.stage_s + (num_gpus - 1) * message_bytes / custom.one_shot_bps
    else:
        seconds = (
            2 * custom.stage_s + 2 * (num_gpus - 1) / num_gpus * message_bytes / custom.two_shot_bps
        )
    if not is_graphed:  # the input copied into the registered buffer first
        seconds += 2 * message_bytes / copy_bps
    return seconds


class StepAllReduce:
    """A step's all-reduces: `calls` per step (two per layer) of its tokens' hidden states, each
    the kernel vLLM of `era` runs (None: NCCL's, as the operators were measured); cached per
    (tokens, graphed)."""

    def __init__(
        self,
        calls: int,
        bytes_per_token: float,
        num_gpus: int,
        link: Interconnect,
        era: EngineEra | None,
        gpu_name: str,
        copy_bps: float,
    ) -> None:
        self.calls, self.bytes_per_token, self.num_gpus = calls, bytes_per_token, num_gpus
        self.link, self.era, self.gpu_name, self.copy_bps = link, era, gpu_name, copy_bps
        self._cache: dict[tuple[int, bool], float] = {}

    def route_of(self, num_tokens: int) -> Route:
        if self.era is None:
            return _NCCL
        message = num_tokens * self.bytes_per_token
        return route(message, self.num_gpus, self.link, self.era, self.gpu_name)

    def step_s(self, num_tokens: int, is_graphed: bool = False) -> float:
        """Seconds of the step's calls (0 without tensor parallelism: no calls)."""
        if not self.calls:
            return 0.0
        key = (num_tokens, is_graphed)
        found = self._cache.get(key)
        if found is None:
            message = num_tokens * self.bytes_per_token
            chosen = self.route_of(num_tokens)
            one = call_s(message, self.num_gpus, self.link, chosen, is_graphed, self.copy_bps)
            found = self._cache[key] = self.calls * one
        return found
