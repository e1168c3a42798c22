"""The host memory a fleet costs the simulator: every replica's KV block pools are built when the
run starts (a few Python list entries per block), so a run's blocks, summed over its replicas'
GPU and CPU pools, are bounded by `MAX_FLEET_KV_BLOCKS` (core/limits.py). The fleet refuses to
build beyond it, and `pagesim validate` and a fleet search's plan say so first, from the same
figures."""

from __future__ import annotations

from collections.abc import Sequence

from pagesim.simulator.core.deployments import Deployment
from pagesim.simulator.core.limits import MAX_FLEET_KV_BLOCKS
from pagesim.simulator.kv.block_budget import kv_capacity


def replica_blocks(deployment: Deployment) -> int:
    """KV blocks one replica of `deployment` builds: its GPU pool and its CPU swap pool."""
    capacity = kv_capacity(deployment.scenario, deployment.system)
    return capacity.num_gpu_blocks + capacity.num_cpu_blocks


def max_replicas_within(blocks_per_replica: int) -> int:
    """The most replicas of `blocks_per_replica` blocks a run may build."""
    return MAX_FLEET_KV_BLOCKS // max(1, blocks_per_replica)


def fleet_blocks_reason(pools: Sequence[Deployment]) -> str | None:
    """Why the replicas of `pools` (one system's run) are more than the simulator builds, or
    None when they fit."""
    per_pool = [(d, replica_blocks(d)) for d in pools]
    total = sum(d.count * blocks for d, blocks in per_pool)
    if total <= MAX_FLEET_KV_BLOCKS:
        return None
    biggest, blocks = max(per_pool, key=lambda pair: pair[0].count * pair[1])
    name = biggest.pool_name
    others = total - biggest.count * blocks
    room = max(0, MAX_FLEET_KV_BLOCKS - others) // max(1, blocks)
    return (
        f"the fleet of system {biggest.runs.name!r} would hold {total:,} KV blocks in all "
        f"({biggest.count:,} replicas of pool {name!r} hold {blocks:,} GPU and CPU blocks "
        f"each), more than the simulator's limit of {MAX_FLEET_KV_BLOCKS:,} for one run "
        f"(each block costs it about 80 bytes of host memory); give pool {name!r} at most "
        f"{room:,} replicas, or fewer blocks each (a larger block_size, less swap_space_gib)"
    )
