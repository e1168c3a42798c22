"""The link a disaggregated fleet moves KV over, from its prefill replicas to its decode replicas.

A transfer of `num_bytes` over `lanes` lanes (GPU ports working in parallel) takes

    latency_s + num_bytes / (lanes x bandwidth_bytes_s)

and, with `layerwise`, overlaps the prefill's later layers (simulator/cluster/link.py says how).
Bandwidth is per lane and per direction: one GPU's NVLink, or the one NIC (InfiniBand / RoCE
port) or PCIe x16 slot a GPU sends through.

Presets: core/presets/links.toml, each figure with its source. "nominal" = the datasheet's line
rate, which no transfer reaches; "effective" = what a bulk copy achieves (an estimate, labelled
as such in `basis`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.errors import InputError, choices_text
from pagesim.simulator.core.hardware import GB, LinkPreset
from pagesim.simulator.core.preset_files import shipped_presets

__all__ = ["GB", "LINK_PRESETS", "LinkConfig", "LinkPreset", "link_preset"]


@dataclass(frozen=True, slots=True)
class LinkConfig:
    """One link kind. `bandwidth_bytes_s` per lane (GPU port), one direction."""

    bandwidth_bytes_s: float
    latency_s: float = 0.0
    # Send layer l's KV while layers > l compute (a layer-wise connector: vLLM's
    # KVConnectorBase_V1.save_kv_layer, called per attention layer in the forward pass).
    layerwise: bool = False
    preset: str | None = None  # the preset it came from, if any (for reports and write-back)


# The presets, by name (core/presets/links.toml: each figure with its source).
LINK_PRESETS: dict[str, LinkPreset] = shipped_presets().links


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
