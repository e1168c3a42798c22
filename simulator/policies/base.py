"""What every batching policy shares: the waiting queue, request bookkeeping, the engine-facing API.

A scheduler is a plain class (no SimPy): the engine calls `add_request` on arrivals, then per
iteration `schedule(now)` -> StepPlan, prices it, advances time, and calls `complete(plan, now)`.
Policies (static, orca, vllm-v0, vllm-v1) subclass `Scheduler`; the small strategy pieces they
share — admission order, victim choice — live here as tiny objects, chosen once from Enums.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from pagesim.simulator.core.config import AdmissionOrder, SystemConfig, VictimPolicy
from pagesim.simulator.core.memory import MemoryBreakdown
from pagesim.simulator.core.plan import StepPlan
from pagesim.simulator.core.request import Request, RequestStatus

T = TypeVar("T")


class WaitingQueue(Generic[T]):
    """Requests (or per-request state) waiting for admission, in the admission policy's order.

    FCFS keeps arrival order and lets recompute-preempted requests rejoin at the head, as vLLM
    does. PRIORITY orders by (priority, arrival, id); preempted requests fall back into place.
    """

    def __init__(self, order: AdmissionOrder, request_of: Callable[[T], Request]) -> None:
        self._order = order
        self._request_of = request_of
        self._fifo: deque[T] = deque()
        self._heap: list[tuple[int, float, int, T]] = []
        # The one in use, for `__len__` (asked several times a step).
        self._items: deque[T] | list[tuple[int, float, int, T]] = (
            self._fifo if order is AdmissionOrder.FCFS else self._heap
        )

    def _key(self, item: T) -> tuple[int, float, int, T]:
        r = self._request_of(item)
        return (r.priority, r.arrival_s, r.request_id, item)

    def push(self, item: T) -> None:
        if self._order is AdmissionOrder.FCFS:
            self._fifo.append(item)
        else:
            heapq.heappush(self._heap, self._key(item))

    def push_front(self, item: T) -> None:
        """A preempted request returning to the queue ahead of later arrivals."""
        if self._order is AdmissionOrder.FCFS:
            self._fifo.appendleft(item)
        else:
            heapq.heappush(self._heap, self._key(item))

    def peek(self) -> T:
        return self._fifo[0] if self._order is AdmissionOrder.FCFS else self._heap[0][3]

    def pop(self) -> T:
        if self._order is AdmissionOrder.FCFS:
            return self._fifo.popleft()
        return heapq.heappop(self._heap)[3]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        if self._order is AdmissionOrder.FCFS:
            return iter(self._fifo)
        return (entry[3] for entry in sorted(self._heap))


def victim_key(policy: VictimPolicy) -> Callable[[Request], tuple[float, ...]]:
    """Sort key whose maximum is preempted first."""
    if policy is VictimPolicy.LAST_ARRIVED:
        return lambda r: (r.arrival_s, r.request_id)
    return lambda r: (r.num_generated, r.arrival_s, r.request_id)


class Scheduler(ABC):
    """Engine-facing API of a batching policy."""

    def __init__(self, system: SystemConfig, max_seq_len: int) -> None:
        self.system = system
        self.max_seq_len = max_seq_len
        self.arrivals_done = False

    # -- engine API -------------------------------------------------------------------------
    @abstractmethod
    def add_request(self, request: Request, now_s: float) -> None:
        """A request arrived."""

    @abstractmethod
    def schedule(self, now_s: float) -> StepPlan:
        """Decide the next iteration. An empty plan means: nothing to do until something changes."""

    @abstractmethod
    def complete(self, plan: StepPlan, now_s: float) -> None:
        """`plan` finished at `now_s`: advance tokens, finish requests, free memory."""

    @property
    @abstractmethod
    def has_pending(self) -> bool:
        """Some request is waiting, running or swapped."""

    @abstractmethod
    def queue_lengths(self) -> tuple[int, int, int]:
        """(running, waiting, swapped) request counts."""

    @abstractmethod
    def memory_breakdown(self) -> MemoryBreakdown: ...

    @abstractmethod
    def check_invariants(self) -> None: ...

    @property
    @abstractmethod
    def kv_capacity_slots(self) -> int: ...

    @property
    def batch_capacity(self) -> int:
        """Batch slots for slot utilization: the most sequences one iteration may hold."""
        return self.system.max_num_seqs

    def useful_slots(self, plan: StepPlan) -> int:
        """Slots of `plan` doing useful work (static batching overrides: padding is not useful)."""
        return plan.num_seqs

    def next_wakeup_s(self, now_s: float) -> float | None:
        """A time to re-plan although nothing arrives (static batching's fill timeout)."""
        return None

    def mark_arrivals_done(self) -> None:
        self.arrivals_done = True

    def prefix_hit_rate(self) -> float | None:
        """Share of prompt tokens served from the prefix cache; None without a prefix cache."""
        return None

    # -- helpers for policies -------------------------------------------------------------
    def _too_long_reason(self, request: Request) -> str | None:
        if request.prompt_len >= self.max_seq_len:
            return (
                f"prompt of {request.prompt_len} tokens reaches the model's maximum length "
                f"of {self.max_seq_len}"
            )
        return None

    def _too_many_seqs_reason(self, request: Request) -> str | None:
        if request.num_seqs > self.system.max_num_seqs:
            return (
                f"decodes {request.num_seqs} sequences; max_num_seqs is {self.system.max_num_seqs}"
            )
        return None

    @staticmethod
    def _finish(request: Request, now_s: float) -> None:
        request.transition(RequestStatus.FINISHED, now_s)

    @staticmethod
    def _produce_token(request: Request, now_s: float) -> bool:
        """One output token per sequence produced at `now_s`; True when the request is done."""
        request.num_generated += 1
        if request.first_token_s is None:
            request.first_token_s = now_s
        if request.num_generated >= request.output_len:
            request.last_token_s = now_s
            return True
        return False
