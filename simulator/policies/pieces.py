"""The small strategy pieces the policies share, chosen once from the system's Enums.

    waiting queue   admission order: FCFS (preempted requests rejoin at the head, as vLLM does)
                    or priority (lower first, then arrival)
    victim key      whom preemption takes first: the maximum of this key among candidates
    eviction order  which free KV block is reused first (kv.block_pool.EvictionOrder)

and, for the paged policies, what their era's prefix cache does (`PagedPieces`).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from pagesim.simulator.core.config import AdmissionOrder, SystemConfig, VictimPolicy
from pagesim.simulator.core.request import Request
from pagesim.simulator.kv.block_pool import EvictionOrder

T = TypeVar("T")
VictimKey = Callable[[Request], tuple[float, ...]]


class WaitingQueue(Protocol[T]):
    """Requests (or per-request records) waiting for admission, in the admission order; the
    head is `queue[0]`. FCFS keeps arrival order and lets recompute-preempted requests rejoin
    at the head, as vLLM does (`FcfsQueue`); PRIORITY orders by (priority, arrival, id), and
    preempted requests fall back into place (`PriorityQueue`)."""

    def push(self, item: T, /) -> None: ...
    def push_front(self, item: T, /) -> None: ...
    def pop(self) -> T: ...
    def remove(self, item: T, /) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> T: ...
    def __iter__(self) -> Iterator[T]: ...


class FcfsQueue(deque[T]):
    """First come, first served: a deque, so that the questions a policy asks every step,
    `len(queue)` and the head `queue[0]`, run in C."""

    push = deque.append
    push_front = deque.appendleft  # a preempted request ahead of later arrivals

    def pop(self) -> T:  # type: ignore[override]
        """The head (a deque's own `pop` takes the tail)."""
        return self.popleft()


class PriorityQueue(Generic[T]):
    """Lower priority first, then arrival, then id: a heap."""

    def __init__(self, request_of: Callable[[T], Request]) -> None:
        self._request_of = request_of
        self._heap: list[tuple[int, float, int, T]] = []

    def _key(self, item: T) -> tuple[int, float, int, T]:
        r = self._request_of(item)
        return (r.priority, r.arrival_s, r.request_id, item)

    def push(self, item: T) -> None:
        heapq.heappush(self._heap, self._key(item))

    push_front = push  # a preempted request falls back into its place

    def pop(self) -> T:
        return heapq.heappop(self._heap)[3]

    def remove(self, item: T) -> None:
        """Take `item` out from anywhere in the queue (a landed remote prompt admitted past a
        head that does not fit: policies/remote_kv.py)."""
        self._heap.remove(self._key(item))
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __getitem__(self, index: int) -> T:
        return self._heap[0][3] if index == 0 else sorted(self._heap)[index][3]

    def __iter__(self) -> Iterator[T]:
        return (entry[3] for entry in sorted(self._heap))


def victim_key(policy: VictimPolicy, admission: AdmissionOrder = AdmissionOrder.FCFS) -> VictimKey:
    """Sort key whose maximum is preempted first. Under priority admission the least urgent
    goes first (vLLM V1 v1/core/sched/scheduler.py: `max(self.running, key=lambda r:
    (r.priority, r.arrival_time))`), then the victim policy's order."""
    if admission is AdmissionOrder.PRIORITY:
        if policy is VictimPolicy.LAST_ARRIVED:
            return lambda r: (r.priority, r.arrival_s, r.request_id)
        return lambda r: (r.priority, r.num_generated, r.arrival_s, r.request_id)
    if policy is VictimPolicy.LAST_ARRIVED:
        return lambda r: (r.arrival_s, r.request_id)
    return lambda r: (r.num_generated, r.arrival_s, r.request_id)


@dataclass(frozen=True, slots=True)
class PagedPieces:
    """A paged policy's pieces: its victim key and what its era's KV cache does."""

    victim_key: VictimKey
    eviction: EvictionOrder
    duplicate_hashes: bool  # V1 caches a block under a hash another block holds too
    caches_at_allocation: bool  # V1 caches blocks when allocated (same-step hits)
    admission_counts_cached_blocks: bool  # V0 counts cached prompt blocks against free ones
    decode_keeps_block_per_seq: bool  # V0 decodes a group only with 1 free block per sequence


def paged_pieces(system: SystemConfig, *, is_v1: bool) -> PagedPieces:
    """The pieces of vLLM V1 (v1/core/block_pool.py, kv_cache_manager.py; v0.11.0 to v0.34.0
    alike: where freed blocks join the queue changed in v0.24.0, PagedState.rules) or V0
    (core/block_manager_v1.py, evictor; 0.5.4), with the system's victim choice."""
    if is_v1:
        # Without a prefix cache no block holds a hash, and one LRU queue is the plain FIFO.
        eviction = EvictionOrder.LRU if system.enable_prefix_cache else EvictionOrder.PLAIN_FIRST
        key = victim_key(system.victim, system.admission)
        return PagedPieces(key, eviction, True, True, False, False)
    return PagedPieces(
        victim_key(system.victim), EvictionOrder.PLAIN_FIRST, False, False, True, True
    )


@dataclass(slots=True)
class PrefixStats:
    """Prompt tokens looked up in the prefix cache and found there, once per successful
    admission; a preempted request's re-admission (which mostly finds its own blocks) counted
    apart."""

    num_query_tokens: int = 0
    num_hit_tokens: int = 0
    num_readmit_query_tokens: int = 0
    num_readmit_hit_tokens: int = 0

    def record(self, request: Request, num_query_tokens: int, num_hit_tokens: int) -> None:
        if request.num_preemptions:
            self.num_readmit_query_tokens += num_query_tokens
            self.num_readmit_hit_tokens += num_hit_tokens
        else:
            self.num_query_tokens += num_query_tokens
            self.num_hit_tokens += num_hit_tokens

    @property
    def hit_rate(self) -> float:
        return self.num_hit_tokens / self.num_query_tokens if self.num_query_tokens else 0.0

    @property
    def readmit_hit_rate(self) -> float | None:
        if not self.num_readmit_query_tokens:
            return None
        return self.num_readmit_hit_tokens / self.num_readmit_query_tokens


def waiting_queue(system: SystemConfig, request_of: Callable[[T], Request]) -> WaitingQueue[T]:
    if system.admission is AdmissionOrder.FCFS:
        return FcfsQueue()
    return PriorityQueue(request_of)
