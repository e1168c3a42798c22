"""Reading [systems.kv_offload] (or [defaults.kv_offload]) into a `KVOffloadConfig`
(core/offload.py), which policies/offload.py runs.

    [systems.kv_offload]
    cpu_gib = 64          # the CPU buffer over the replica's GPUs (vLLM --kv-offloading-size)
    load_gbps = 25        # host -> GPU per GPU, GB/s (default: the GPU's host link)
    store_gbps = 25       # GPU -> host per GPU, GB/s (default: the GPU's host link)

The tier must hold at least one KV block (checked with the GPU's block: scenario/systems.py).
"""

from __future__ import annotations

from pagesim.simulator.core.offload import KVOffloadConfig
from pagesim.simulator.scenario.table import Table

MAX_CPU_GIB = 1e5
MAX_LINK_GBPS = 1e5


def read_kv_offload(parent: Table, key: str) -> KVOffloadConfig:
    t = parent.table(key)
    return KVOffloadConfig(
        cpu_gib=t.number("cpu_gib", hi=MAX_CPU_GIB, lo_open=True),
        load_gbps=t.number("load_gbps", None, hi=MAX_LINK_GBPS, lo_open=True),
        store_gbps=t.number("store_gbps", None, hi=MAX_LINK_GBPS, lo_open=True),
    )
