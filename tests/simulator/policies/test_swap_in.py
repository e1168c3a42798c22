"""Regression: a parallel-sampling group swapped out while its samples share a partly filled
prompt block can come back.

Swapping in used to keep one free block per sequence on top of the group's blocks. A group of
n samples sharing its prompt's partial last block needs only n - 1 (copy-on-write copies), and
a request admitted because it fits the cache exactly could then never return: the scheduler
stalled with it swapped out.
"""

from __future__ import annotations

from sim_helpers import explicit_workload, scenario, system

from pagesim.simulator.core.config import Policy, PreemptionPolicy
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate


def test_group_sharing_a_partial_prompt_block_swaps_back_in() -> None:
    # vLLM V0: a group of 4 samples shares its prompt blocks, the partial last one included,
    # and is swapped as a whole. (V1 has no such group: n > 1 fans out into child requests,
    # tests/simulator/policies/test_vllm_v1.py.) The second request (9 blocks of prompt, 8 full
    # + 1 token) needs 12 blocks at full length, and V0 admits a group only with one free block
    # per sequence beside its prompt: 16 blocks is the smallest cache that runs both. It is
    # swapped out twice while the first one grows.
    s = scenario(
        explicit_workload(
            [(10, 30, 0.0), (129, 9, 0.0)], sampling=SamplingKind.PARALLEL, num_seqs=4
        ),
        system(Policy.VLLM_V0, num_kv_blocks=16, block_size=16, preemption=PreemptionPolicy.SWAP),
    )
    result = simulate(s, check_invariants=True)
    requests = result.requests
    assert list(requests["status"]) == ["finished", "finished"]
    assert requests["num_swaps"].iloc[1] == 2
