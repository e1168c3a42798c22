"""The link: preset figures pinned to their sources, transfer sizes and times by hand."""

from __future__ import annotations

import pytest

from pagesim.simulator.cluster.link import transfer_bytes, transfer_s
from pagesim.simulator.core.catalog import get_model
from pagesim.simulator.core.errors import InputError
from pagesim.simulator.core.link import LINK_PRESETS, LinkConfig, link_preset
from pagesim.simulator.core.model_spec import KVDtype


def test_presets_carry_their_sourced_figures() -> None:
    figures = {n: (p.bandwidth_bytes_s, p.latency_s) for n, p in LINK_PRESETS.items()}
    assert figures == {
        "nvlink4": (450e9, 4e-6),  # 900 GB/s both ways (H100 datasheet); Vidur send/recv
        "ib-ndr": (50e9, 0.0),  # 400 Gb/s
        "ib-hdr": (25e9, 0.0),  # 200 Gb/s
        "roce-400g": (50e9, 0.0),
        "roce-200g": (25e9, 0.0),
        "pcie4": (25e9, 0.0),  # ~25 GB/s effective (docs/facts.md), an estimate
        "pcie5": (50e9, 0.0),  # ~50 GB/s effective (docs/facts.md), an estimate
    }
    for preset in LINK_PRESETS.values():
        assert "nominal" in preset.basis or "estimate" in preset.basis
    assert link_preset("IB-NDR", latency_s=2e-6) == LinkConfig(50e9, 2e-6, False, "ib-ndr")
    with pytest.raises(InputError, match="valid: nvlink4, ib-ndr"):
        link_preset("nvlink9")


def test_bytes_follow_the_decode_replicas_kv_shards() -> None:
    llama2 = get_model("llama-2-7b")  # 32 layers, 32 KV heads of 128: 524,288 B/token
    assert transfer_bytes(llama2, KVDtype.FP16, 10, 1) == 5_242_880
    assert transfer_bytes(llama2, KVDtype.FP16, 10, 4) == 5_242_880  # 8 heads on each of 4
    llama3 = get_model("llama-3-70b")  # 80 layers, 8 KV heads of 128: 327,680 B/token
    assert transfer_bytes(llama3, KVDtype.FP16, 10, 8) == 3_276_800
    # TP 16 > 8 KV heads: each GPU keeps (and must receive) one head, replicated twice.
    assert transfer_bytes(llama3, KVDtype.FP16, 10, 16) == 2 * 3_276_800


def test_a_transfer_is_latency_plus_bytes_over_its_lanes() -> None:
    link = LinkConfig(50e9, 1e-5)
    assert transfer_s(link, 100_000_000, 1) == pytest.approx(1e-5 + 2e-3, abs=1e-18)
    assert transfer_s(link, 100_000_000, 4) == pytest.approx(1e-5 + 5e-4, abs=1e-18)


def test_a_layerwise_transfer_hides_under_the_prefills_later_layers() -> None:
    # 4 layers, 8 ms of wire time (2 ms a layer), prefill step 4 ms (1 ms a layer): the last
    # three layers' compute (3 ms) hides 3 ms of it: 5 ms after the step's end.
    link = LinkConfig(1e9, 0.0, layerwise=True)
    assert transfer_s(link, 8_000_000, 1, num_layers=4, overlap_step_s=4e-3) == pytest.approx(5e-3)
    # A 40 ms step hides all but the last layer's share: 2 ms.
    assert transfer_s(link, 8_000_000, 1, num_layers=4, overlap_step_s=40e-3) == pytest.approx(2e-3)
    # Without layerwise the step overlaps nothing.
    plain = LinkConfig(1e9, 0.0)
    assert transfer_s(plain, 8_000_000, 1, num_layers=4, overlap_step_s=4e-3) == pytest.approx(8e-3)


def test_a_drafters_kv_travels_with_the_targets() -> None:
    # Llama-3-70B drafted by Llama-3-8B, decode TP 8: each GPU keeps one KV head of each, so
    # a token is 80 x 2 x 128 x 2 + 32 x 2 x 128 x 2 = 40,960 + 16,384 bytes per GPU.
    target, draft = get_model("llama-3-70b"), get_model("llama-3-8b")
    assert transfer_bytes(target, KVDtype.FP16, 10, 8, draft) == 10 * 8 * (40_960 + 16_384)
    # TP 16: both models' heads replicated, each GPU receives its copy.
    assert transfer_bytes(target, KVDtype.FP16, 10, 16, draft) == 10 * 16 * (40_960 + 16_384)
    assert transfer_bytes(target, KVDtype.FP16, 10, 8, None) == 3_276_800


def test_a_drafters_bytes_leave_after_the_targets_layers() -> None:
    # The layer-wise case above plus 1 ms of draft KV: written by the draft pass after the
    # target's last layer, it hides under nothing (5 + 1 ms; 2 + 1 ms under a long step).
    link = LinkConfig(1e9, 0.0, layerwise=True)
    args = {"num_layers": 4, "tail_bytes": 1_000_000}
    assert transfer_s(link, 9_000_000, 1, overlap_step_s=4e-3, **args) == pytest.approx(6e-3)
    assert transfer_s(link, 9_000_000, 1, overlap_step_s=40e-3, **args) == pytest.approx(3e-3)
    assert transfer_s(LinkConfig(1e9, 0.0), 9_000_000, 1, **args) == pytest.approx(9e-3)
