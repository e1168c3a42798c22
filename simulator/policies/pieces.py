"""The small strategy pieces the policies share, chosen once from the system's Enums.

    waiting queue   admission order: FCFS (preempted requests rejoin at the head, as vLLM does)
                    or priority (lower first, then arrival)
    victim key      whom preemption takes first: the maximum of this key among candidates

Cached-block eviction order is the block pool's (least recently freed first): mechanism, not a
choice here.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from pagesim.simulator.core.config import AdmissionOrder, SystemConfig, VictimPolicy
from pagesim.simulator.core.request import Request

T = TypeVar("T")
VictimKey = Callable[[Request], tuple[float, ...]]


class WaitingQueue(Generic[T]):
    """Requests (or per-request records) waiting for admission, in the admission order.

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


def victim_key(policy: VictimPolicy) -> VictimKey:
    """Sort key whose maximum is preempted first."""
    if policy is VictimPolicy.LAST_ARRIVED:
        return lambda r: (r.arrival_s, r.request_id)
    return lambda r: (r.num_generated, r.arrival_s, r.request_id)


def waiting_queue(system: SystemConfig, request_of: Callable[[T], Request]) -> WaitingQueue[T]:
    return WaitingQueue(system.admission, request_of)
