"""Regression: static and orca reject a request with more sequences than max_num_seqs, as the
paged policies do, rather than leaving it at the head of the queue until the engine stalls.
(Scenario files are validated so; a Scenario built in code was not.)"""

from __future__ import annotations

import pytest
from sim_helpers import explicit_workload, scenario, system

from pagesim.simulator.core.config import Policy
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.engine import simulate


@pytest.mark.parametrize("policy", [Policy.STATIC, Policy.ORCA, Policy.VLLM_V0, Policy.VLLM_V1])
def test_more_sequences_than_a_batch_holds_is_rejected(policy: Policy) -> None:
    s = scenario(
        explicit_workload([(10, 5, 0.0)], sampling=SamplingKind.PARALLEL, num_seqs=4),
        system(policy, max_num_seqs=2, static_batch_size=2),
    )
    requests = simulate(s).requests
    assert list(requests["status"]) == ["rejected"]
    assert requests["rejection_reason"].iloc[0] == "decodes 4 sequences; max_num_seqs is 2"
