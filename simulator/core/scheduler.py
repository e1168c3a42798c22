"""What the engine and the recorder ask of a batching policy: the engine-facing protocol.

A scheduler is a plain object (no SimPy). The engine calls `add_request` on arrivals, then per
iteration `schedule(now)` -> StepPlan, prices the plan, advances time, and calls
`complete(plan, now)`, which acts on what the plan says. Implementations live in
`simulator.policies`.
"""

from __future__ import annotations

from typing import Protocol

from pagesim.simulator.core.memory import MemoryBreakdown, MemoryRow
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.core.request import Request


class Scheduler(Protocol):
    arrivals_done: bool
    # Output tokens produced so far, one per sequence per token (what `output_len x num_seqs`
    # counts at the end): read at the edges of the arrival window for throughput.
    num_output_tokens: int

    def add_request(self, request: Request, now_s: float) -> None:
        """A request arrived: it waits, or is rejected with a reason at once."""
        ...

    def schedule(self, now_s: float) -> StepPlan:
        """Decide the next iteration. An empty plan means: nothing to do until something changes."""
        ...

    def complete(self, plan: StepPlan, now_s: float) -> None:
        """`plan` finished at `now_s`: advance tokens, finish requests, free memory."""
        ...

    @property
    def has_pending(self) -> bool:
        """Some request is waiting, running or swapped."""
        ...

    def queue_lengths(self) -> tuple[int, int, int]:
        """(running, waiting, swapped) request counts."""
        ...

    def memory_breakdown(self) -> MemoryBreakdown: ...

    def memory_row(self) -> MemoryRow:
        """`memory_breakdown()`'s fields in order (its `row`), which the step log reads after
        every step: a policy may answer it without building the breakdown."""
        ...

    def check_invariants(self) -> None:
        """Raise AssertionError if the policy's or the KV cache's bookkeeping is inconsistent;
        changes nothing (tests call it after every step)."""
        ...

    @property
    def kv_capacity_slots(self) -> int: ...

    # Batch slots for slot utilization (with the plan's sequences less its padding, the
    # useful ones): the most sequences one iteration may hold.
    batch_capacity: int

    def next_wakeup_s(self, now_s: float) -> float | None:
        """A time to re-plan although nothing arrives (static batching's fill timeout)."""
        ...

    def mark_arrivals_done(self) -> None: ...

    def prefix_hit_rate(self) -> float | None:
        """Share of prompt tokens served from the prefix cache, once per first admission; None
        without a prefix cache."""
        ...

    def prefix_readmit_hit_rate(self) -> float | None:
        """The same over re-admissions after recompute preemption; None without any."""
        ...
