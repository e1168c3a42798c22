"""A system's KV offload tier ([systems.kv_offload]): CPU memory behind the GPU prefix cache,
as vLLM's native KV offloading gives it (`vllm serve --kv-offloading-size GIB
--kv-offloading-backend native`, v0.33.0+; v0.11.0: `--kv-transfer-config` naming the
OffloadingConnector). simulator/policies/offload.py runs it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KVOffloadConfig:
    """`cpu_gib`: the CPU buffer, summed over the replica's tensor-parallel ranks (vLLM's
    kv_offloading_size); `load_gbps` / `store_gbps`: each rank's host link per direction
    (host to GPU for loads, GPU to host for stores), GB/s; None: the GPU's host link."""

    cpu_gib: float
    load_gbps: float | None = None
    store_gbps: float | None = None

    def describe(self) -> dict[str, object]:
        """The scenario keys that are set, as plain values (provenance, the TOML writer)."""
        keys: dict[str, object] = {"cpu_gib": self.cpu_gib}
        if self.load_gbps is not None:
            keys["load_gbps"] = self.load_gbps
        if self.store_gbps is not None:
            keys["store_gbps"] = self.store_gbps
        return keys
