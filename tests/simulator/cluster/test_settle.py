"""A fleet hears of every ended request at the end of the step it ended in (cluster/replica.py
`_settle`): its cheap test compares the replica's queued groups with the count it keeps, which an
arrival must raise by what it queues (a V1 request with n > 1 queues n children), and the loop
may skip asking after a run of pure steps that finished nobody (`PureRuns.has_finished`)."""

from __future__ import annotations

import pytest

from pagesim.simulator.cluster.fleet import FleetRun, run_fleet
from pagesim.simulator.cluster.replica import Replica
from pagesim.simulator.core.cluster import ClusterConfig, PoolConfig, RouterConfig, RouterKind
from pagesim.simulator.core.config import Policy
from pagesim.simulator.core.request import SamplingKind
from pagesim.simulator.fastpath.pure_runs import PureRuns
from tests.sim_helpers import poisson_workload, scenario, system


def _run(seed: int, mp: pytest.MonkeyPatch, *, settle_after_every_run: bool) -> FleetRun:
    """Two V1 replicas behind least-outstanding (it routes on the counts `_settle` keeps),
    parallel sampling n = 3; every `_settle` checked to leave no ended request unreported."""
    missed: list[int] = []
    settle = Replica._settle

    def checked_settle(self: Replica) -> None:
        settle(self)
        missed.extend(r.request_id for r in self._in_flight if r.is_done)

    mp.setattr(Replica, "_settle", checked_settle)
    if settle_after_every_run:  # the loop asks after every run, as before it could skip
        always = property(lambda self: True, lambda self, value: None)
        mp.setattr(PureRuns, "has_finished", always, raising=False)
    workload = poisson_workload(200, 20.0, sampling=SamplingKind.PARALLEL, num_seqs=3)
    sc = scenario(workload, system(Policy.VLLM_V1), seed=seed)
    pool = PoolConfig("pool", 2, sc.gpu, sc.tensor_parallel)
    run = run_fleet(sc, ClusterConfig((pool,), RouterConfig(RouterKind.LEAST_OUTSTANDING)))
    assert missed == [], f"ended requests left unreported after a settle: {missed}"
    return run


@pytest.mark.parametrize("seed", [1, 2])
def test_fan_out_arrivals_leave_no_ended_request_unreported(seed: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        skipping = _run(seed, mp, settle_after_every_run=False)
    with pytest.MonkeyPatch.context() as mp:
        asking = _run(seed, mp, settle_after_every_run=True)
    assert skipping.routed_to == asking.routed_to
    assert skipping.in_flight_samples == asking.in_flight_samples
    assert skipping.end_s == asking.end_s
