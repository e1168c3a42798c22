"""What calibration measures one layer of: its shapes on one GPU, and a prepared measurement."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pagesim.simulator.core.catalog import ModelSpec

FP16_BYTES = 2


@dataclass(frozen=True, slots=True)
class LayerShapes:
    """One decoder layer's shapes on one GPU (tensor-parallel shards), as calibration measures."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    is_gated_mlp: bool
    tensor_parallel: int

    @classmethod
    def from_model(cls, model: ModelSpec, tensor_parallel: int = 1) -> LayerShapes:
        t = tensor_parallel
        return cls(
            num_heads=max(1, model.num_heads // t),
            num_kv_heads=model.kv_heads_per_gpu(t),
            head_dim=model.head_dim,
            hidden_size=model.hidden_size,
            intermediate_size=max(1, model.intermediate_size // t),
            vocab_size=max(1, model.vocab_size // t),
            is_gated_mlp=model.is_gated_mlp,
            tensor_parallel=t,
        )

    def gemms(self) -> list[tuple[str, int, int]]:
        """(name, in_features, out_features) of the layer's linear layers, gate+up fused."""
        q_out = self.num_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        up = (2 if self.is_gated_mlp else 1) * self.intermediate_size
        return [
            ("qkv", self.hidden_size, q_out + 2 * kv_out),
            ("out", q_out, self.hidden_size),
            ("gate_up" if self.is_gated_mlp else "up", self.hidden_size, up),
            ("down", self.intermediate_size, self.hidden_size),
        ]

    @property
    def lm_head(self) -> tuple[int, int]:
        return self.hidden_size, self.vocab_size

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V bytes of one token in one layer (fp16)."""
        return 2 * self.num_kv_heads * self.head_dim * FP16_BYTES


@dataclass(frozen=True, slots=True)
class Prepared:
    fn: Callable[[], object]
    bytes: int  # fewest bytes the work must move through device memory
    flops: int
