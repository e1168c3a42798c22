"""The vLLM V1 changes between the releases a vllm-v1 system can follow (`vllm_version`), each
with the release it arrived in.

Each release was found by reading the official wheels on PyPI (vllm==X.Y.Z, unpacked), halving
the range between a release without the change and one with it until two neighbouring releases
differ. Everything not listed here is pagesim's single V1 model, checked at v0.11.0 and v0.34.0.

    release  file, function                                   what changed
    0.11.1   v1/core/sched/scheduler.py Scheduler.schedule    priority preemption of a request
                                                              scheduled earlier in the step gives
                                                              its tokens back to the budget (and
                                                              steps the loop index back); 0.11.0
                                                              left them counted, and skipped the
                                                              request after the current one
    0.11.1   engine/arg_utils.py (defaults)                   a defaulted max_num_batched_tokens
                                                              is capped at max_num_seqs x
                                                              max_model_len
    0.14.0   config/scheduler.py, config/vllm.py              async scheduling on by default
                                                              (`async_scheduling` None -> True
                                                              unless a feature cannot use it;
                                                              0.13.0: False)
    0.19.0   config/scheduler.py SchedulerConfig              scheduler_reserve_full_isl, on by
                                                              default (absent in 0.18.1)
    0.23.0   v1/core/sched/scheduler.py Scheduler.schedule    a waiting request is allocated its
                                                              speculative lookahead slots too
                                                              (not only one with computed
                                                              tokens), except for an async KV load
    0.24.0   v1/core/block_pool.py BlockPool.free_blocks      freed blocks without a hash go to
                                                              the head of the free queue, hashed
                                                              ones to the tail (0.23.0 prepended
                                                              only a sliding window's scratch
                                                              blocks)
    0.24.0   config/scheduler.py SchedulerConfig.watermark    the admission watermark option
                                                              (default 0)
    0.25.0   v1/core/sched/scheduler.py Scheduler.schedule    a waiting request with one token
                                                              to compute is padded to 1 + k
                                                              tokens beside decoding requests
                                                              (speculative decoding); from 0.30.0
                                                              also with no decode beside it if it
                                                              has computed tokens
    0.28.0   engine/arg_utils.py get_batch_defaults           a tier for GPUs of >= 160 GiB
    0.28.0   config/vllm.py VllmConfig.__post_init__          async scheduling by default with a
                                                              draft model too
    0.33.0   v1/core/sched/scheduler.py Scheduler.schedule    a priority request that preempted
                                                              itself lets the requests after it
                                                              still run (before: the running
                                                              phase stopped)

Between the selectable releases 0.33 and 0.34 nothing pagesim models changed (0.34.0's
`free_blocks(evict_first=...)` is for blocks another cache tier holds, which pagesim has not).
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.config import SpecMethod, SpeculativeConfig, VllmVersion

Release = tuple[int, int, int]

PRIORITY_RETURNS_BUDGET_SINCE: Release = (0, 11, 1)
CAPPED_DEFAULT_TOKENS_SINCE: Release = (0, 11, 1)
ASYNC_SCHEDULING_DEFAULT_SINCE: Release = (0, 14, 0)
ASYNC_DRAFT_MODEL_SINCE: Release = (0, 28, 0)
RESERVE_FULL_ISL_SINCE: Release = (0, 19, 0)
LOOKAHEAD_AT_ADMISSION_SINCE: Release = (0, 23, 0)
FREE_UNHASHED_FIRST_SINCE: Release = (0, 24, 0)
WATERMARK_OPTION_SINCE: Release = (0, 24, 0)
SPEC_PADDED_ADMISSION_SINCE: Release = (0, 25, 0)
BIG_GPU_TIER_SINCE: Release = (0, 28, 0)
PRIORITY_SELF_PREEMPT_CONTINUES_SINCE: Release = (0, 33, 0)


def release_text(release: Release) -> str:
    return "v" + ".".join(map(str, release))


@dataclass(frozen=True, slots=True)
class V1Rules:
    """The rules of one release that pagesim's V1 policy and KV cache switch on."""

    version: VllmVersion
    # v1/core/block_pool.py free_blocks: unhashed freed blocks are reused first
    frees_unhashed_first: bool
    # scheduler.py schedule: a scheduled priority victim's tokens return to the budget
    returns_victim_budget: bool
    # scheduler.py schedule: the running phase goes on after a request preempted itself
    continues_past_self_preemption: bool
    # scheduler.py schedule: waiting requests get their lookahead slots when admitted
    lookahead_at_admission: bool
    # scheduler.py schedule: a one-token admission is padded to 1 + k beside decodes
    pads_one_token_admission: bool


def v1_rules(version: VllmVersion) -> V1Rules:
    return V1Rules(
        version,
        frees_unhashed_first=version.has(FREE_UNHASHED_FIRST_SINCE),
        returns_victim_budget=version.has(PRIORITY_RETURNS_BUDGET_SINCE),
        continues_past_self_preemption=version.has(PRIORITY_SELF_PREEMPT_CONTINUES_SINCE),
        lookahead_at_admission=version.has(LOOKAHEAD_AT_ADMISSION_SINCE),
        pads_one_token_admission=version.has(SPEC_PADDED_ADMISSION_SINCE),
    )


def async_scheduling_default(version: VllmVersion, speculative: SpeculativeConfig | None) -> bool:
    """Whether the release runs V1 with async scheduling when the user says nothing: from
    v0.14.0 `SchedulerConfig.async_scheduling` defaults to None and `VllmConfig.__post_init__`
    turns it on unless a feature in use cannot take it. Of what pagesim models: speculative
    decoding by n-gram prompt lookup (vLLM "ngram", the CPU proposer) never can; by a draft
    model only from v0.28.0 (0.27.1 keeps the default off for it); EAGLE and MTP always could.
    (For the host-overhead model, simulator/execution/overhead.py, which prices the overlap.)"""
    if not version.has(ASYNC_SCHEDULING_DEFAULT_SINCE):
        return False
    method = None if speculative is None else speculative.method
    if method is SpecMethod.NGRAM:
        return False
    return method is not SpecMethod.DRAFT_MODEL or version.has(ASYNC_DRAFT_MODEL_SINCE)
