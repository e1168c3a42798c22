"""Frozen configuration of a fleet: pools of replicas and the router in front of them.

Parsed at the edge by simulator/scenario/cluster.py from a scenario's [cluster] section; a
scenario without one runs a single replica (simulator/engine.py) exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from pagesim.simulator.core.catalog import GPUSpec
from pagesim.simulator.core.link import LinkConfig


class RouterKind(Enum):
    """How the router picks a replica (simulator/cluster/routers.py says what each one reads)."""

    ROUND_ROBIN = "round-robin"
    RANDOM = "random"
    LEAST_OUTSTANDING = "least-outstanding"  # fewest requests in flight (the router's own count)
    LEAST_KV = "least-kv"  # lowest reported KV-cache use
    POWER_OF_TWO = "power-of-two"  # two replicas at random, the one with fewer in flight
    SESSION_AFFINITY = "session-affinity"  # consistent hashing on the session id
    PREFIX_AWARE = "prefix-aware"  # longest prefix it routed there, unless load is imbalanced


@dataclass(frozen=True, slots=True)
class RouterConfig:
    kind: RouterKind = RouterKind.ROUND_ROBIN
    # Replicas report their KV use (and queue) this often; a router reads the last report. 0:
    # every read is current. vLLM serves such gauges on /metrics, which a gateway scrapes.
    report_interval_s: float = 0.0
    # prefix-aware, SGLang's cache-aware policy (sgl-router src/policies/mod.rs, `impl Default
    # for CacheAwareConfig`): route by prefix only while load is balanced, i.e. unless
    # max - min > balance_abs_threshold and max > balance_rel_threshold x min (in-flight
    # requests); and only to a replica matching more than cache_threshold of the prompt.
    cache_threshold: float = 0.5
    balance_abs_threshold: int = 32
    balance_rel_threshold: float = 1.1
    # Tokens per entry of the router's own prefix index (it hashes prompts in blocks of this
    # size); None: the replica's KV block size.
    prefix_block_tokens: int | None = None
    # Points per replica on the session-affinity hash ring: libketama's 160 (40 MD5 digests of
    # 4 points each per server, ketama.c), the consistent hashing memcached clients use.
    ring_points: int = 160


class PoolRole(Enum):
    """What a pool's replicas do (prefill/decode disaggregation: simulator/cluster/disagg.py)."""

    BOTH = "both"  # colocated: prefill and decode on the same replica
    PREFILL = "prefill"  # computes prompts (and their first token), then hands the KV over
    DECODE = "decode"  # receives a prompt's KV and decodes


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """`count` identical replicas: a system (policy and knobs), a GPU and a tensor-parallel
    degree. `system` names one of the scenario's [[systems]]; None runs the system simulated."""

    name: str
    count: int
    gpu: GPUSpec
    tensor_parallel: int = 1
    system: str | None = None
    role: PoolRole = PoolRole.BOTH


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    pools: tuple[PoolConfig, ...]
    router: RouterConfig = RouterConfig()
    # (system name, router kind): the router a system runs behind when it is not router.kind,
    # so that one scenario compares routers as it compares systems (router_comparison).
    router_by_system: tuple[tuple[str, RouterKind], ...] = ()
    # Disaggregated fleets (pools with role prefill / decode): the KV link between them and a
    # router per phase (None: `router`).
    link: LinkConfig | None = None
    prefill_router: RouterConfig | None = None
    decode_router: RouterConfig | None = None
    # Systems that run the same pools colocated (every role "both", behind `router`): a
    # disaggregated fleet beside a colocated one with the same GPUs, in one scenario.
    colocated_systems: tuple[str, ...] = ()

    @property
    def is_disaggregated(self) -> bool:
        return any(pool.role is not PoolRole.BOTH for pool in self.pools)

    def for_system(self, system: str) -> ClusterConfig:
        """The fleet `system` runs on: these pools colocated when it is a colocated system."""
        if system not in self.colocated_systems:
            return self
        pools = tuple(replace(pool, role=PoolRole.BOTH) for pool in self.pools)
        return replace(self, pools=pools)

    def router_for(self, system: str) -> RouterConfig:
        for name, kind in self.router_by_system:
            if name == system:
                return replace(self.router, kind=kind)
        return self.router

    @property
    def num_replicas(self) -> int:
        return sum(pool.count for pool in self.pools)
