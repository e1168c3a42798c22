"""The link a disaggregated fleet moves KV over, from its prefill replicas to its decode replicas.

A transfer of `num_bytes` over `lanes` lanes (GPU ports working in parallel) takes

    latency_s + num_bytes / (lanes x bandwidth_bytes_s)

and, with `layerwise`, overlaps the prefill's later layers (simulator/cluster/link.py says how).
Bandwidth is per lane and per direction: one GPU's NVLink, or the one NIC (InfiniBand / RoCE
port) or PCIe x16 slot a GPU sends through.

Presets, each figure with its source. "nominal" = the datasheet's line rate, which no transfer
reaches; "effective" = what a bulk copy achieves (an estimate, labelled as such in `basis`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.errors import InputError, choices_text

GB = 1e9


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """One link kind. `bandwidth_bytes_s` per lane (GPU port), one direction."""

    bandwidth_bytes_s: float
    latency_s: float = 0.0
    # Send layer l's KV while layers > l compute (a layer-wise connector: vLLM's
    # KVConnectorBase_V1.save_kv_layer, called per attention layer in the forward pass).
    layerwise: bool = False
    preset: str | None = None  # the preset it came from, if any (for reports and write-back)


@dataclass(frozen=True, slots=True)
class LinkPreset:
    bandwidth_bytes_s: float
    latency_s: float
    basis: str  # nominal or effective, and where each figure comes from


# The latency of a transfer is the fixed cost of one (small) send. Only NVLink has a measured
# figure at hand; for the others no public per-transfer figure of a KV connector's path was
# found, so their presets carry 0 and a scenario sets `latency_s` from a measurement.
LINK_PRESETS: dict[str, LinkPreset] = {
    "nvlink4": LinkPreset(
        450 * GB,
        4e-6,
        "NVLink 4 (H100/H200 SXM): 900 GB/s per GPU both directions together (NVIDIA H100 "
        "datasheet), 450 GB/s per direction, nominal; latency 4 us measured: NCCL send/recv of "
        "2,048 bytes between two GPUs of one node, median 0.004 ms (Vidur profiling data, "
        "network/h100_pairwise_nvlink/send_recv.csv). The same file's 64 MiB send takes "
        "0.235 ms: 286 GB/s effective.",
    ),
    "ib-ndr": LinkPreset(
        50 * GB,
        0.0,
        "InfiniBand NDR, 400 Gb/s per port (NVIDIA ConnectX-7 / Quantum-2), 50 GB/s, nominal",
    ),
    "ib-hdr": LinkPreset(
        25 * GB,
        0.0,
        "InfiniBand HDR, 200 Gb/s per port (NVIDIA ConnectX-6 / Quantum), 25 GB/s, nominal",
    ),
    "roce-400g": LinkPreset(
        50 * GB, 0.0, "RoCE v2 over 400 GbE (NVIDIA ConnectX-7), 50 GB/s per port, nominal"
    ),
    "roce-200g": LinkPreset(
        25 * GB, 0.0, "RoCE v2 over 200 GbE (NVIDIA ConnectX-6 Dx), 25 GB/s per port, nominal"
    ),
    "pcie4": LinkPreset(
        25 * GB,
        0.0,
        "PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b = 31.5 GB/s per direction nominal "
        "(PCI-SIG); ~25 GB/s effective, an estimate (the GPU presets' host-link figure)",
    ),
    "pcie5": LinkPreset(
        50 * GB,
        0.0,
        "PCIe 5.0 x16: 32 GT/s x 16 lanes = 63 GB/s per direction nominal (PCI-SIG); "
        "~50 GB/s effective, an estimate (the GPU presets' host-link figure)",
    ),
}


def link_preset(
    name: str, *, latency_s: float | None = None, layerwise: bool = False
) -> LinkConfig:
    """The preset `name` as a LinkConfig (its latency replaced when `latency_s` is given)."""
    preset = LINK_PRESETS.get(name.lower())
    if preset is None:
        raise InputError(f"unknown link preset {name!r}; valid: {choices_text(LINK_PRESETS)}")
    return LinkConfig(
        preset.bandwidth_bytes_s,
        preset.latency_s if latency_s is None else latency_s,
        layerwise,
        name.lower(),
    )
