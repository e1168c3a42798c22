"""Expert placement over the EP group's GPUs, with EPLB on or off: the hottest GPU's share of the
routed-expert work, which every MoE layer of a lock-stepped DP group waits for.

Load model (an **estimate**, no measured distribution behind it): expert popularity follows the
Zipf law of moe_cost.selection_probabilities with the scenario's `routing_skew` s (0: every
expert equally popular). Which expert is how popular is a seeded draw (a permutation of the
popularity ranks over the expert ids, from the scenario seed), since no real router's ranking is
known. Only this static skew is modelled, not the step-to-step noise of a finite batch.

Placement without EPLB: vLLM's default `expert_placement_strategy = "linear"`
(vllm/config/parallel.py, v0.34): GPU j holds experts j E/n .. (j + 1) E/n - 1.

With EPLB (`--enable-eplb`, vLLM's default policy vllm/distributed/eplb/policy/default.py, after
DeepSeek's EPLB): R redundant slots (`num_redundant_experts`; by default the fewest making
(E + R) divisible by n: ParallelConfig.compute_eplb_num_redundant_experts) each go to the expert
whose load per replica is then highest (`replicate_experts`), and the E + R replicas, heaviest
first, each to the lightest GPU that still has a free slot (`balanced_packing`). The load is
known exactly here; vLLM measures it over a window of steps, so this is EPLB at its best.

`hot_share` = the hottest GPU's load / the mean GPU load (1 when perfectly even).
"""

from __future__ import annotations

import numpy as np

from pagesim.simulator.execution.moe_cost import selection_probabilities

# Separate stream of the scenario seed for the popularity draw (an arbitrary fixed tag).
_EXPERT_STREAM = 0x45504C42


def expert_loads(num_experts: int, experts_per_token: int, skew: float, seed: int) -> np.ndarray:
    """Each expert's expected selections per token (summing to k), ids drawn from `seed`."""
    q = np.array(selection_probabilities(num_experts, experts_per_token, skew))
    order = np.random.default_rng((seed, _EXPERT_STREAM)).permutation(num_experts)
    loads = np.empty(num_experts)
    loads[order] = q
    return loads


def linear_placement(loads: np.ndarray, num_gpus: int) -> np.ndarray:
    """Per-GPU load under vLLM's linear placement (contiguous blocks of E / n experts)."""
    per_gpu: np.ndarray = loads.reshape(num_gpus, -1).sum(axis=1)
    return per_gpu


def eplb_placement(loads: np.ndarray, num_gpus: int, num_redundant: int) -> np.ndarray:
    """Per-GPU load after EPLB's replication and balanced packing (module docstring)."""
    replicas = np.ones(len(loads), dtype=np.int64)
    for _ in range(num_redundant):
        replicas[int(np.argmax(loads / replicas))] += 1
    slot_loads = np.repeat(loads / replicas, replicas)
    per_gpu = len(slot_loads) // num_gpus
    gpu_load = np.zeros(num_gpus)
    gpu_items = np.zeros(num_gpus, dtype=np.int64)
    open_load = gpu_load.copy()  # full GPUs masked out with inf
    for slot in np.argsort(-slot_loads, kind="stable"):
        gpu = int(np.argmin(open_load))
        gpu_load[gpu] += slot_loads[slot]
        open_load[gpu] += slot_loads[slot]
        gpu_items[gpu] += 1
        if gpu_items[gpu] == per_gpu:
            open_load[gpu] = np.inf
    return gpu_load


def default_redundant(num_experts: int, num_gpus: int) -> int:
    """vLLM's default `num_redundant_experts` under EPLB: the fewest making E + R divisible."""
    return (num_gpus - num_experts % num_gpus) % num_gpus


def hot_share(gpu_loads: np.ndarray) -> float:
    """The hottest GPU's load over the mean (>= 1)."""
    mean = float(gpu_loads.mean())
    return float(gpu_loads.max()) / mean if mean > 0 else 1.0


def placement_hot_share(
    num_experts: int,
    experts_per_token: int,
    num_gpus: int,
    skew: float,
    seed: int,
    eplb: bool,
    num_redundant: int | None = None,
) -> float:
    """`hot_share` of the EP group's placement (module docstring)."""
    loads = expert_loads(num_experts, experts_per_token, skew, seed)
    if not eplb:
        return hot_share(linear_placement(loads, num_gpus))
    redundant = default_redundant(num_experts, num_gpus) if num_redundant is None else num_redundant
    return hot_share(eplb_placement(loads, num_gpus, redundant))
