"""Regression: a parallel-sampling group swapped out while its samples share a partly filled
prompt block can come back.

Swapping in used to keep one free block per sequence on top of the group's blocks. A group of
n samples sharing its prompt's partial last block needs only n - 1 (copy-on-write copies), and
a request admitted because it fits the cache exactly could then never return: the scheduler
stalled with it swapped out.
"""

from __future__ import annotations

import pytest
from sim_helpers import explicit_workload, scenario, system

from pagesim.simulator.core.config import Policy, PreemptionPolicy
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate


@pytest.mark.parametrize("policy", [Policy.VLLM_V1])
def test_group_sharing_a_partial_prompt_block_swaps_back_in(policy: Policy) -> None:
    # (Under V0 this cache is too small: V0 also keeps one free block per sequence to decode,
    # so both requests are rejected up front; tests/simulator/policies/test_vllm_v0.py.)
    # 4 samples each. The second request (9 blocks of prompt, 8 full + 1 token) fills the 12
    # blocks exactly at full length; it is swapped out while the first one grows.
    s = scenario(
        explicit_workload(
            [(10, 30, 0.0), (129, 9, 0.0)], sampling=SamplingKind.PARALLEL, num_seqs=4
        ),
        system(policy, num_kv_blocks=12, block_size=16, preemption=PreemptionPolicy.SWAP),
    )
    result = simulate(s, check_invariants=True)
    requests = result.requests
    assert list(requests["status"]) == ["finished", "finished"]
    assert requests["num_swaps"].iloc[1] == 1
