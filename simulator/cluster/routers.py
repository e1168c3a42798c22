"""Routers: small policy objects that pick a replica for each arriving request.

A router sees only what a real one can (no peeking into a replica's scheduler):

| router | reads |
|---|---|
| round-robin | its own turn counter |
| random | its own seeded RNG |
| least-outstanding | its own count of requests in flight per replica (sent, response not ended) |
| least-kv | each replica's reported KV-cache use, as old as `report_interval_s` (ties: in flight) |
| power-of-two | two replicas drawn at random, then its own in-flight counts |
| session-affinity | the request's session id (its id when it has none), on a consistent-hash ring |
| prefix-aware | its own index of the prompt blocks it sent to each replica; its in-flight counts |

Every router breaks ties by the lowest replica index, so a run is reproducible.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from pagesim.simulator.core.cluster import RouterConfig, RouterKind
from pagesim.simulator.core.request import Request, prompt_segments
from pagesim.simulator.kv.prefix_hash import SequenceHasher

_MASK64 = (1 << 64) - 1
# Session ids are hashed as mix64(id ^ _KEY_DOMAIN), ring points as mix64(replica << 32 | point):
# without the domain bits, session i would land exactly on replica 0's point i.
_KEY_DOMAIN = 0xA5A5_5A5A_0000_0000


def mix64(x: int) -> int:
    """splitmix64's finalizer: a well-spread 64-bit hash of an int, the same in every process."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


class ReplicaLoad(Protocol):
    """What a replica reports (simulator/cluster/replica.py)."""

    def kv_used_share(self) -> float: ...


class LoadBoard:
    """Replicas' KV-use reports as a router reads them: refreshed when the last report is at
    least `interval_s` old (0: read live), so a value read is never older than `interval_s`.
    A replica that did not change since then reads the same either way."""

    def __init__(self, replicas: Sequence[ReplicaLoad], interval_s: float) -> None:
        self._replicas = replicas
        self._interval_s = interval_s
        self._reported_at: float | None = None
        self._kv: list[float] = []

    def kv_used_share(self, now_s: float) -> list[float]:
        stale = self._reported_at is None or now_s - self._reported_at >= self._interval_s
        if self._interval_s == 0 or stale:
            self._kv = [replica.kv_used_share() for replica in self._replicas]
            self._reported_at = now_s
        return self._kv


class Router:
    """Base: keeps the router's own count of requests in flight per replica."""

    def __init__(self, num_replicas: int) -> None:
        self.in_flight = [0] * num_replicas

    def route(self, request: Request, now_s: float) -> int:
        index = self.choose(request, now_s)
        self.in_flight[index] += 1
        return index

    def finished(self, index: int, request: Request) -> None:
        """The response of `request` from replica `index` ended (finished or rejected)."""
        self.in_flight[index] -= 1

    def choose(self, request: Request, now_s: float) -> int:
        raise NotImplementedError

    def least_in_flight(self, among: Sequence[int] | None = None) -> int:
        counts = self.in_flight
        candidates = range(len(counts)) if among is None else among
        return min(candidates, key=lambda i: (counts[i], i))


class RoundRobin(Router):
    def __init__(self, num_replicas: int) -> None:
        super().__init__(num_replicas)
        self._next = 0

    def choose(self, request: Request, now_s: float) -> int:
        index = self._next
        self._next = (index + 1) % len(self.in_flight)
        return index


class Random(Router):
    def __init__(self, num_replicas: int, rng: np.random.Generator) -> None:
        super().__init__(num_replicas)
        self._rng = rng

    def choose(self, request: Request, now_s: float) -> int:
        return int(self._rng.integers(len(self.in_flight)))


class LeastOutstanding(Router):
    def choose(self, request: Request, now_s: float) -> int:
        return self.least_in_flight()


class LeastKV(Router):
    def __init__(self, num_replicas: int, board: LoadBoard) -> None:
        super().__init__(num_replicas)
        self._board = board

    def choose(self, request: Request, now_s: float) -> int:
        kv = self._board.kv_used_share(now_s)
        counts = self.in_flight
        return min(range(len(counts)), key=lambda i: (kv[i], counts[i], i))


class PowerOfTwo(Router):
    """Mitzenmacher's power of two choices: the less loaded of two replicas drawn at random."""

    def __init__(self, num_replicas: int, rng: np.random.Generator) -> None:
        super().__init__(num_replicas)
        self._rng = rng

    def choose(self, request: Request, now_s: float) -> int:
        n = len(self.in_flight)
        if n == 1:
            return 0
        first, second = (int(i) for i in self._rng.choice(n, size=2, replace=False))
        return self.least_in_flight(sorted((first, second)))


class SessionAffinity(Router):
    """Consistent hashing on the session id: each replica owns `ring_points` points of a 64-bit
    ring; a session goes to the owner of the first point at or after its hash. Adding or
    removing a replica moves only the sessions of the points it gains or loses."""

    def __init__(self, num_replicas: int, ring_points: int) -> None:
        super().__init__(num_replicas)
        ring = sorted(
            (mix64((replica << 32) | point), replica)
            for replica in range(num_replicas)
            for point in range(ring_points)
        )
        self._points = [point for point, _ in ring]
        self._owners = [replica for _, replica in ring]

    def choose(self, request: Request, now_s: float) -> int:
        key = request.request_id if request.session_id is None else request.session_id
        at = bisect.bisect_left(self._points, mix64(key ^ _KEY_DOMAIN))
        return self._owners[at % len(self._points)]


class PrefixIndex:
    """The router's own record of the prompt blocks it sent to one replica, LRU-bounded.

    Block hashes are chained (simulator/kv/prefix_hash.py), so holding block i means the whole
    prefix up to it was sent. Blocks are touched deepest first, so a prefix is never older than
    its extensions and eviction (oldest first) keeps the index prefix-closed: the longest match
    is found by bisection.
    """

    def __init__(self, capacity_blocks: int) -> None:
        self._capacity = max(1, capacity_blocks)
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, hashes: Sequence[int]) -> int:
        """Leading blocks of `hashes` held."""
        lo, hi = 0, len(hashes)
        blocks = self._blocks
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if hashes[mid - 1] in blocks:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def insert(self, hashes: Sequence[int]) -> None:
        blocks = self._blocks
        for block in reversed(hashes):
            if block in blocks:
                blocks.move_to_end(block)
            else:
                blocks[block] = None
        while len(blocks) > self._capacity:
            blocks.popitem(last=False)


class PrefixAware(Router):
    """SGLang's cache-aware routing (sgl-router, src/policies/cache_aware.rs `select_worker`),
    the idea llm-d's prefix-cache scorer also scores by: while load is balanced, send a request
    to the replica that was sent the longest prefix of its prompt, if that prefix covers more
    than `cache_threshold` of it; otherwise, and whenever load is imbalanced (max - min in
    flight > `balance_abs_threshold` and max > `balance_rel_threshold` x min), to the replica
    with the fewest in flight. SGLang's index is a radix tree over text; this one holds block
    hashes of `block_tokens` tokens, bounded by each replica's KV capacity in such blocks."""

    def __init__(
        self, config: RouterConfig, block_tokens: int, capacity_blocks: Sequence[int]
    ) -> None:
        super().__init__(len(capacity_blocks))
        self._config = config
        self._block_tokens = block_tokens
        self.indexes = [PrefixIndex(blocks) for blocks in capacity_blocks]

    def hashes(self, request: Request) -> list[int]:
        hasher = SequenceHasher(self._block_tokens)
        for key, length in prompt_segments(request):
            hasher.extend(key, length)
        return hasher.block_hashes()

    def choose(self, request: Request, now_s: float) -> int:
        config, counts = self._config, self.in_flight
        hashes = self.hashes(request)
        low, high = min(counts), max(counts)
        is_imbalanced = (
            high - low > config.balance_abs_threshold and high > config.balance_rel_threshold * low
        )
        index = self.least_in_flight()
        if not is_imbalanced and hashes:
            matched = [idx.match(hashes) for idx in self.indexes]
            best = max(range(len(matched)), key=lambda i: (matched[i], -counts[i], -i))
            match_rate = matched[best] * self._block_tokens / request.prompt_len
            if match_rate > config.cache_threshold:
                index = best
        self.indexes[index].insert(hashes)
        return index


def make_router(
    config: RouterConfig,
    num_replicas: int,
    *,
    rng: np.random.Generator,
    board: LoadBoard,
    block_tokens: int,
    capacity_blocks: Sequence[int],
) -> Router:
    kind = config.kind
    if kind is RouterKind.ROUND_ROBIN:
        return RoundRobin(num_replicas)
    if kind is RouterKind.RANDOM:
        return Random(num_replicas, rng)
    if kind is RouterKind.LEAST_OUTSTANDING:
        return LeastOutstanding(num_replicas)
    if kind is RouterKind.LEAST_KV:
        return LeastKV(num_replicas, board)
    if kind is RouterKind.POWER_OF_TWO:
        return PowerOfTwo(num_replicas, rng)
    if kind is RouterKind.SESSION_AFFINITY:
        return SessionAffinity(num_replicas, config.ring_points)
    return PrefixAware(config, block_tokens, capacity_blocks)
