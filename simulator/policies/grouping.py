"""The one door between the paged policies and the decode fast path (simulator/fastpath/).

The fast path advances lone decoding sequences as one group, in closed form, instead of one by
one; its results are the per-step path's, bit for bit. It lives in its own subpackage, above the
policies: what a paged scheduler and its step policies ask of it is this protocol, and nothing
else. `PagedState.decode_group` holds one when the fast path is on (simulator/fastpath/attach.py
sets it) and is None otherwise: then none of this is called, and the per-step path reads
without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple, Protocol

from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.policies.seq_group import AddToStep, Demand, SeqGroup, StepBuilder


class Preempter(NamedTuple):
    """A step policy's preemption, for a running phase that keeps the members summed (vLLM
    V1's: fastpath/grouped_preemption.py)."""

    victim_of: Callable[[Iterable[SeqGroup]], SeqGroup]  # whom it takes among candidates
    # (group, step, now_s): takes a group (no member any more) off the GPU in this step
    preempt: Callable[[SeqGroup, StepBuilder, float], None]


class DecodeGrouping(Protocol):
    """What the per-step path asks of the decode group (its members are running groups)."""

    def schedule_running(
        self,
        running: list[SeqGroup],
        step: StepBuilder,
        budget: int,
        demand: Demand,
        add_to_step: AddToStep,
        preempter: Preempter | None = None,
        now_s: float = 0.0,
    ) -> int | None:
        """A step policy's running phase with the members summed, when that is exactly what its
        per-sequence loop would do with `demand` (making room with `preempter`, if given, at
        `now_s`): returns the budget left, or None (members released: the policy visits every
        running group one by one)."""
        ...

    def plan(self, step: StepBuilder, running: Sequence[SeqGroup]) -> StepPlan:
        """The plan of a step the members take part in (`step.is_grouped`)."""
        ...

    def complete(
        self, plan: StepPlan, now_s: float, joining: list[SeqGroup]
    ) -> tuple[int, list[SeqGroup]]:
        """`plan` ended at `now_s`: the members' tokens, and the members that finished (their
        last token at `now_s`); then the lone decoders `joining` become members."""
        ...

    def memory_terms(self, running: Sequence[SeqGroup]) -> tuple[list[int], int, int] | None:
        """What the memory breakdown takes of the members in closed form: None without members;
        else the indices in `running` of the groups that are no member (the KV cache walks
        theirs), the members' computed slots the KV cache has not been told of yet and their
        allocated slots a later token will fill."""
        ...

    def check_invariants(self) -> dict[int, int]:
        """Check the group's own sums; returns each member's true KV tokens by seq id (what the
        KV cache's walk of every block should see; none without members)."""
        ...
