"""Issue 12's divergence table and metric list, one story each, step by step with exact block ids
and step contents, each naming the vLLM file, function and version it mirrors (docs/facts.md, "vLLM
behaviour by version"). Rows told elsewhere live with the mechanism they test (grep the row's
vLLM function name under tests/).

Block size 4 throughout; `prefix_len` tokens are shared with every other request that has them.
A work item reads (request, seq, new tokens, context after the step, is prefill).
"""

from __future__ import annotations

from sim_helpers import explicit_workload, paged_scheduler, request, scenario, system
from sim_helpers import step_and_check as _step
from sim_helpers import tables_of as _tables
from sim_helpers import work_of as _work

from pagesim.simulator.core.catalog import get_gpu, get_model
from pagesim.simulator.core.config import ContiguousAllocator, Policy
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.engine import simulate
from pagesim.simulator.kv.block_budget import kv_capacity
from pagesim.simulator.policies.paged import PagedScheduler
from pagesim.simulator.scenario.load import load_scenario


def _preempt_and_readmit(**knobs: object) -> tuple[PagedScheduler, list[StepPlan]]:
    """Two 8-token prompts that share nothing, 6 output tokens each, in 5 blocks: the first decode
    step has a block for request 0 only, so request 1 (the tail of the running list) is
    preempted by recompute and comes back when request 0 has finished."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=5, **knobs)
    for rid in (0, 1):
        sched.add_request(request(rid, 8, 6), 0.0)
    plans = [_step(sched, 0.1 * i) for i in range(8)]
    return sched, plans


def test_row3_v1_caches_prefixes_by_default_so_a_recomputed_request_rehits_its_own_blocks() -> None:
    """Row 3. vLLM v0.11.0 vllm/engine/arg_utils.py EngineArgs: enable_prefix_caching defaults
    to on under V1; v1/core/sched/scheduler.py _preempt_request frees the victim's blocks (tail
    first, v1/core/block_pool.py free_blocks) and puts it back in the waiting queue with
    num_computed_tokens = 0; on re-admission v1/core/kv_cache_manager.py get_computed_blocks
    finds whatever of its own full blocks has not been reused since."""
    sched, plans = _preempt_and_readmit()  # no knob set: the era's default
    assert sched.system.enable_prefix_cache is True
    assert _work(plans[0]) == [(0, 0, 8, 8, True), (1, 1, 8, 8, True)]
    # Step 1: request 0's 9th token takes block 4, the last free one; request 1 needs one too.
    assert _work(plans[1]) == [(0, 0, 1, 9, False)]
    assert [p.request_id for p in plans[1].preemptions] == [1]
    # Its blocks 2, 3 went to the free queue tail first (3, then 2); request 0's 13th token
    # (step 5) took block 3, so only block 2 (tokens 0-3) is still cached when request 1 returns
    # with its 8 prompt tokens and 1 generated token.
    assert [_work(p) for p in plans[2:6]] == [[(0, 0, 1, c, False)] for c in (10, 11, 12, 13)]
    assert _work(plans[6]) == [(1, 1, 5, 9, True)]  # 4 tokens hit, 5 recomputed
    assert _work(plans[7]) == [(1, 1, 1, 10, False)]
    assert plans[6].num_prefill_tokens == 5
    # Without prefix caching (V0's default) the same request recomputes all 9 tokens.
    _, off = _preempt_and_readmit(enable_prefix_cache=False)
    assert _work(off[6]) == [(1, 1, 9, 9, True)]


def test_row3_readmitted_block_table() -> None:
    """Row 3, the block ids: request 1 comes back to block 2 (its own cached tokens 0-3), then
    blocks 3 and 4 from the head of the free queue (v1/core/block_pool.py
    FreeKVCacheBlockQueue, v0.11.0)."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=5)
    for rid in (0, 1):
        sched.add_request(request(rid, 8, 6), 0.0)
    tables = []
    for i in range(8):
        _step(sched, 0.1 * i)
        tables.append(_tables(sched, 0, 1))
    assert tables[0] == {0: (0, 1), 1: (2, 3)}
    assert tables[1] == {0: (0, 1, 4)}
    assert tables[4] == {0: (0, 1, 4)}
    assert tables[5] == {}  # request 0 finished with block 3 as its 4th: freed 3, 4, 1, 0
    assert tables[6] == {1: (2, 3, 4)}


def test_row8_hit_rate_counts_each_admission_once_and_readmissions_apart() -> None:
    """Row 8 and metric "prefix hit rate". vLLM v1/metrics/stats.py PrefixCacheStats.record
    counts a lookup by a request with num_preemptions > 0 apart (preempted_queries,
    preempted_hits). Request 1 of the row-3 story: its first admission found nothing (8 of 8
    tokens computed), its re-admission found 4 of its 9 tokens, its own block 2."""
    sched, _ = _preempt_and_readmit()
    stats = sched.state.prefix_stats
    assert (stats.num_query_tokens, stats.num_hit_tokens) == (16, 0)
    assert (stats.num_readmit_query_tokens, stats.num_readmit_hit_tokens) == (9, 4)
    assert sched.prefix_hit_rate() == 0.0
    assert sched.prefix_readmit_hit_rate() == 4 / 9


def test_row8_a_request_retried_for_three_steps_is_counted_once() -> None:
    """Row 8: a waiting request whose blocks do not fit is looked up again every step; pagesim
    counts the lookup of the step that admits it only (as vLLM's scheduler.py does since it
    records at admission, "so unscheduled lookups are not counted"; v0.11.0's
    get_computed_blocks recorded every lookup: see the note)."""
    sched = paged_scheduler(Policy.VLLM_V1, num_blocks=4)
    sched.add_request(request(0, 8, 9, prefix_len=8), 0.0)
    plans = []
    for i in range(11):
        if i == 6:  # request 0 holds all 4 blocks (0, 1, 2, 3) from step 5 to its end, step 8
            sched.add_request(request(1, 12, 2, prefix_len=8), 0.6)
        plans.append(_step(sched, 0.1 * i))
        if i == 8:
            assert sched.kv.num_free_blocks == 4
    assert [_work(p) for p in plans[6:9]] == [[(0, 0, 1, c, False)] for c in (14, 15, 16)]
    assert _work(plans[9]) == [(1, 1, 4, 12, True)]  # hits blocks 0, 1 (8 tokens)
    stats = sched.state.prefix_stats
    assert (stats.num_query_tokens, stats.num_hit_tokens) == (8 + 12, 8)  # not 8 + 4 x 12, 4 x 8
    assert sched.prefix_hit_rate() == 0.4
    assert sched.prefix_readmit_hit_rate() is None


def test_item1_and_2_a_run_names_its_era_and_every_value_with_its_source() -> None:
    """Items 1 and 2: summary.json's provenance holds every knob in force and, for each default,
    the vLLM source it stands for (here the newest release, vLLM v0.34.0
    vllm/engine/arg_utils.py get_batch_defaults: an H200 is >= 70 GiB, under 160 GiB and not an
    A100, so vllm serve gets 8192 tokens and 1024 sequences)."""
    run = simulate(
        scenario(
            explicit_workload([(20, 4, 0.0)]),
            system(Policy.VLLM_V1),
            model="llama-3-8b",
            gpu="h200-sxm",
        )
    )
    provenance = run.provenance
    assert provenance["era"] == "vLLM V1 engine (vllm/v1/) of vLLM v0.34.0"
    knobs = provenance["system"]
    assert (knobs["max_num_batched_tokens"], knobs["max_num_seqs"]) == (8192, 1024)
    assert (knobs["enable_prefix_cache"], knobs["watermark"], knobs["preemption"]) == (
        True,
        0.0,
        "recompute",
    )
    assert knobs["defaults"] == "server"
    assert (knobs["vllm_version"], knobs["scheduler_reserve_full_isl"]) == ("0.34", True)
    sources = provenance["defaults_from"]
    assert sources["max_num_batched_tokens"].startswith("vLLM v0.34.0 engine/arg_utils.py")
    assert sources["scheduler_reserve_full_isl"].startswith("vLLM v0.34.0 config/scheduler.py")
    assert set(sources) == {
        "vllm_version",
        "scheduler_reserve_full_isl",
        "max_num_batched_tokens",
        "max_num_seqs",
        "enable_prefix_cache",
        "watermark",
        "preemption",
        "activation_reserve_gib",
        # The host overhead per step: an era default priced by the execution model (issue 13,
        # simulator/execution/overhead.py); V1's is an estimate and says so.
        "execution.step_overhead_s",
    }
    assert sources["execution.step_overhead_s"].startswith("estimate")
    v0 = simulate(scenario(explicit_workload([(20, 4, 0.0)]), system(Policy.VLLM_V0)))
    assert v0.provenance["era"] == (
        "vLLM V0 engine (vLLM 0.5-0.6, vllm/core/), without chunked prefill"
    )


def test_item7_memory_waste_scenario_has_the_papers_kv_budget() -> None:
    """Item 7. The vLLM paper (Kwon et al., SOSP 2023, §6.1, Table 1): OPT-13B on one
    A100-40GB, about 12 GB / 15.7K token slots of KV; its Orca systems place regions with a
    buddy allocator ("We assume Orca uses the buddy allocation algorithm")."""
    s = load_scenario("memory_waste_contiguous_vs_paged")
    assert (s.model, s.gpu) == (get_model("opt-13b"), get_gpu("a100-40gb"))
    for system_config in s.systems:
        capacity = kv_capacity(s, system_config)
        assert (capacity.num_gpu_blocks, capacity.block_size) == (983, 16)  # 15,728 slots
        assert capacity.block_bytes == 16 * 819_200
        assert capacity.num_gpu_blocks * capacity.block_bytes == 12_884_377_600  # 12.0 GiB
    orcas = [sc for sc in s.systems if sc.policy is Policy.ORCA]
    assert len(orcas) == 3
    assert {sc.contiguous_allocator for sc in orcas} == {ContiguousAllocator.BUDDY}


SIX = [(20, 12, 0.0)] * 4 + [(20, 6, 0.0)] * 2  # 4 requests of 12 steps, 2 of 6


def test_metric_slot_utilization_is_the_policys_own_batch_not_gpu_utilization() -> None:
    """Metric "slot utilization": useful slots / the policy's own slots (static: its batch size,
    8; V1: max_num_seqs, vLLM v0.11.0 arg_utils.py's 256 on an A100), not comparable across
    policies (the glossary says so). Under V1 every step's batch is the requests that ran
    (v1/core/sched/output.py SchedulerOutput.num_scheduled_tokens): 6 for 6 steps, then 4."""
    v1 = simulate(scenario(explicit_workload(SIX), system(Policy.VLLM_V1))).steps
    assert list(v1["num_batch_requests"]) == [6] * 6 + [4] * 6
    assert list(v1["slot_utilization"]) == [6 / 256] * 6 + [4 / 256] * 6


def test_metric_static_slot_utilization_counts_the_requests_that_made_a_token() -> None:
    """Metric "slot utilization" under static batching: 6 of 8 slots make a token in steps 0-5
    (the 2 short requests' 6th token in step 5), 4 of 8 in steps 6-11 (the long ones' 12th in
    step 11); the rest is padding."""
    static = simulate(scenario(explicit_workload(SIX), system(Policy.STATIC))).steps
    assert list(static["num_batch_requests"]) == [6] * 12  # the padded batch runs as one
    assert list(static["slot_utilization"]) == [0.75] * 6 + [0.5] * 6
