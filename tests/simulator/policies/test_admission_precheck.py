"""Admission's check before the sequence is added (policies/admission.py: `admit`'s own
`fits_after_hits` for a group without block hashes, `_checked_before_adding` for one with them)
against admission the whole way (add the sequence, check, free it again, as for a hybrid cache):
random loaded replicas run twice, once with the check and once with it turned off, and must give
the same frames bit for bit. The check is a second statement of admission's rules
(first step, whole-prompt reserve, the first allocation, a prefix hit on free blocks): were the
two to disagree in either direction, a request would be admitted or refused at another step.

The cases are drawn tight (small pools, prefix groups, recompute preemption, whole-prompt
admission on and off) so that the check refuses heads, some with prefix hits on free blocks; the
last test says how often each verdict came."""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sim_helpers import poisson_workload, scenario, system

from pagesim.simulator.core.config import (
    Policy,
    PreemptionPolicy,
    PrefixGroup,
    Scenario,
    VllmVersion,
)
from pagesim.simulator.engine import simulate
from pagesim.simulator.kv.paged_cache import PagedKVCache
from pagesim.simulator.policies import admission

NUM_CASES = 16
VERDICTS: Counter[str] = Counter()
pytestmark = pytest.mark.xdist_group("admission-precheck-cases")  # the last test reads VERDICTS


def _case(seed: int) -> Scenario:
    rng = np.random.default_rng(seed)
    block_size = int(rng.choice([4, 16]))
    workload = poisson_workload(
        int(rng.integers(15, 40)),
        float(rng.uniform(10.0, 60.0)),
        prompt_mean=float(rng.choice([60, 200, 500])),
        output_mean=float(rng.choice([30, 120])),
        prefix_groups=(PrefixGroup(int(rng.choice([32, 96])), 0.6),) if rng.random() < 0.6 else (),
    )
    knobs: dict[str, object] = dict(
        block_size=block_size,
        num_kv_blocks=int(rng.choice([700, 1500, 3000])) // block_size,
        max_num_seqs=int(rng.choice([8, 64])),
        preemption=PreemptionPolicy(rng.choice([p.value for p in PreemptionPolicy])),
        enable_prefix_cache=bool(rng.random() < 0.7),
    )
    policy = Policy.VLLM_V1 if rng.random() < 0.75 else Policy.VLLM_V0
    if policy is Policy.VLLM_V1:
        knobs["vllm_version"] = VllmVersion(rng.choice([v.value for v in VllmVersion]))
        knobs["max_num_batched_tokens"] = int(rng.choice([128, 512, 2048]))
        if rng.random() < 0.4:
            knobs["scheduler_reserve_full_isl"] = bool(rng.random() < 0.5)
    return scenario(workload, system(policy, **knobs), seed=seed)


def _frames(
    s: Scenario, monkeypatch: pytest.MonkeyPatch
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, object], list[tuple[int, int]]]:
    """The run's frames and summary, and its KV caches' prefix lookups (queries, hits), which
    no frame shows: a refused head's lookup counts as the whole way's add and free."""
    caches: list[PagedKVCache] = []
    init = PagedKVCache.__init__

    def kept(self: PagedKVCache, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        caches.append(self)

    monkeypatch.setattr(PagedKVCache, "__init__", kept)
    result = simulate(s, check_invariants=True)
    monkeypatch.setattr(PagedKVCache, "__init__", init)
    lookups = [(c.num_prefix_query_tokens, c.num_prefix_hit_tokens) for c in caches]
    return result.steps, result.requests, result.summary, lookups


@pytest.mark.parametrize("seed", range(NUM_CASES))
def test_the_check_before_adding_admits_as_the_whole_way_does(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = _case(seed)
    checked, fits = admission._checked_before_adding, admission.fits_after_hits

    def counted(*args: object, **kwargs: object) -> bool | None:
        verdict = checked(*args, **kwargs)  # type: ignore[arg-type]
        assert args[3], "a group with block hashes"
        VERDICTS[f"{verdict} with hashes"] += 1
        return verdict

    def counted_fits(*args: object, **kwargs: object) -> bool:
        verdict = fits(*args, **kwargs)  # type: ignore[arg-type]
        if sys._getframe(1).f_code.co_name == "admit":  # a hashless group's check
            VERDICTS[f"{verdict}"] += 1
        return verdict

    monkeypatch.setattr(admission, "_checked_before_adding", counted)
    monkeypatch.setattr(admission, "fits_after_hits", counted_fits)
    steps, requests, summary, lookups = _frames(s, monkeypatch)
    # No check before adding: admit goes the whole way, as for a hybrid cache.
    monkeypatch.setattr(admission, "PagedKVCache", type("NoCache", (), {}))
    whole_steps, whole_requests, whole_summary, whole_lookups = _frames(s, monkeypatch)
    pd.testing.assert_frame_equal(steps, whole_steps, check_exact=True)
    pd.testing.assert_frame_equal(requests, whole_requests, check_exact=True)
    assert summary == whole_summary
    assert lookups == whole_lookups


def test_the_cases_took_every_verdict() -> None:
    """Run after the cases above (one worker, in order): the cases refused and admitted heads
    by the check, some of them with block hashes, and left some to the whole way."""
    if sum(VERDICTS.values()) == 0:
        pytest.skip("run with the cases above (the whole module)")
    print(dict(VERDICTS))
    assert VERDICTS["True"] and VERDICTS["False"], VERDICTS
    assert VERDICTS["False with hashes"] and VERDICTS["True with hashes"], VERDICTS
