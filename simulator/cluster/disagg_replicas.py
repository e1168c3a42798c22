"""The replicas of a disaggregated fleet (simulator/cluster/disagg.py): a prefill replica that
keeps finished requests' blocks until their KV has left, a decode replica that takes requests
whose prompt KV arrived."""

from __future__ import annotations

from collections.abc import Callable

import simpy

from pagesim.simulator.cluster.replica import Replica
from pagesim.simulator.core.config import Scenario, SystemConfig
from pagesim.simulator.core.plan import StepCost, StepPlan
from pagesim.simulator.core.request import Request
from pagesim.simulator.policies.paged import PagedScheduler


class _PagedReplica(Replica):
    """A replica of a disaggregated fleet: its scheduler must be paged (vLLM's)."""

    takes_windows = False  # its kinds' hooks look after every step (held blocks, transfers)

    def __init__(
        self,
        index: int,
        pool: str,
        scenario: Scenario,
        system: SystemConfig,
        env: simpy.Environment,
        on_done: Callable[[Replica, Request], None],
        *,
        check_invariants: bool = False,
    ) -> None:
        super().__init__(
            index, pool, scenario, system, env, on_done, check_invariants=check_invariants
        )
        self.paged = _paged(self)
        self._prepare()

    def _prepare(self) -> None:
        """What a kind of replica sets up once its paged scheduler is there."""


class PrefillReplica(_PagedReplica):
    """Keeps finished requests' blocks until their KV has left; remembers its last step's
    length (`last_step_s`: the compute a layer-wise transfer may overlap)."""

    def _prepare(self) -> None:
        self.paged.state.keeps_finished_blocks = True
        self.last_step_s = 0.0
        price = self.execution.price

        def timed(plan: StepPlan) -> StepCost:
            cost = price(plan)
            self.last_step_s = cost.duration_s
            return cost

        self._price_step = timed  # the loop's; `execution` stays the model (its run totals)

    def waits_on_others(self) -> bool:
        return bool(self.paged.state.held)


class DecodeReplica(_PagedReplica):
    """Receives requests whose prompt KV arrived; calls `after_step` after each step."""

    def _prepare(self) -> None:
        self.after_step: Callable[[DecodeReplica], None] = lambda replica: None

    def receive(self, request: Request) -> None:
        """`request` (its KV landed, queued by land_remote) is now this replica's to finish."""
        self.num_routed += 1
        self._in_flight.append(request)
        self._num_pending += 1
        self.wake()

    def _settle(self) -> None:
        super()._settle()
        self.after_step(self)


def _paged(replica: Replica) -> PagedScheduler:
    scheduler = replica.scheduler
    # run_disagg refuses a contiguous policy first (cluster/disagg_checks.py policy_reason)
    assert isinstance(scheduler, PagedScheduler), "a paged policy in a disaggregated pool"
    return scheduler
