"""What a model is, as far as memory goes: its shapes, its weight dtype, its experts, its attention
kind per layer, and the KV bytes each of those sets.

KV bytes per token (one GPU, tensor parallelism t, KV element of b bytes), summed over the layers
that keep per-token KV:

    MHA/GQA layer   2 x max(1, kv_heads / t) x head_dim x b      (K and V; heads split over t)
    MLA layer       (kv_lora_rank + qk_rope_head_dim) x b        (one latent row, replicated on
                                                                  every TP rank, as vLLM does)
    state layer     0 per token; a fixed state per sequence      (Mamba / linear attention)

A sliding-window layer costs the same per token as a full one but keeps at most its window.
A dense 16-bit model with every layer full attention (the 2023 catalog) computes exactly as
before these kinds existed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from fractions import Fraction

from pagesim.simulator.core.errors import InputError, choices_text


class KVDtype(Enum):
    """Element type of the KV cache; sets bits per element.

    - fp8: e4m3 (or e5m2), 8 bits, one scale per layer (left out).
    - nvfp4: NVFP4 (vLLM v0.33.0 on, FlashInfer's trtllm-gen attention on Blackwell): 16 FP4
      (e2m1) elements share one FP8 scale, 4.5 bits: vLLM packs a head of `head_size` values
      into head_size / 2 + head_size / 16 bytes (vllm/utils/torch_utils.py
      nvfp4_kv_cache_full_dim, v0.34.0).
    """

    FP16 = "fp16"
    BF16 = "bf16"
    FP8 = "fp8"
    NVFP4 = "nvfp4"

    @property
    def bits(self) -> Fraction:
        return KV_BITS[self]

    def bytes_of(self, elements: int) -> int:
        """Bytes `elements` values of this type take (whole blocks of scaled values)."""
        return math.ceil(elements * self.bits / 8)


KV_BITS: dict[KVDtype, Fraction] = {
    KVDtype.FP16: Fraction(16),
    KVDtype.BF16: Fraction(16),
    KVDtype.FP8: Fraction(8),
    KVDtype.NVFP4: Fraction(4) + Fraction(8, 16),
}


def parse_kv_dtype(value: str, where: str = "kv dtype") -> KVDtype:
    try:
        return KVDtype(value.lower())
    except ValueError:
        valid = choices_text(d.value for d in KVDtype)
        raise InputError(f"{where}: unknown KV dtype {value!r}; valid: {valid}") from None


class WeightDtype(StrEnum):
    """Storage of the decoder layers' linear weights (embeddings and LM head stay 16-bit).
    (String enums, like QuantScope and LayerKind, so a ModelSpec's asdict() is plain JSON.)

    Bits per weight include the block scales each format stores:
    - int8 (W8A8 INT8, SmoothQuant-style as vLLM's compressed-tensors runs it): 8 bits, one
      scale per output channel (left out).
    - fp8 (W8A8, e4m3): 8 bits; DeepSeek-V3's one fp32 scale per 128 x 128 block adds 0.002 bit
      (its config.json quantization_config weight_block_size [128, 128]), left out.
    - int4 (W4A16, AWQ/GPTQ as AutoAWQ stores it): 4-bit weights, per group of 128 one fp16
      scale and one packed 4-bit zero point: 4 + (16 + 4) / 128 = 4.15625 bits.
    - mxfp4: OCP Microscaling Formats (MX) v1.0: 32 FP4 (e2m1) elements share one 8-bit (E8M0)
      scale: 4 + 8 / 32 = 4.25 bits. gpt-oss ships its experts so (config.json
      quantization_config quant_method "mxfp4").
    - nvfp4: NVIDIA's NVFP4 (Blackwell): 16 FP4 elements share one FP8 (e4m3) scale:
      4 + 8 / 16 = 4.5 bits (the one fp32 per-tensor scale left out).
    """

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    MXFP4 = "mxfp4"
    NVFP4 = "nvfp4"

    @property
    def bits(self) -> Fraction:
        return WEIGHT_BITS[self]

    @property
    def is_16_bit(self) -> bool:
        return self.bits == 16


WEIGHT_BITS: dict[WeightDtype, Fraction] = {
    WeightDtype.BF16: Fraction(16),
    WeightDtype.FP16: Fraction(16),
    WeightDtype.FP8: Fraction(8),
    WeightDtype.INT8: Fraction(8),
    WeightDtype.INT4: Fraction(4) + Fraction(16 + 4, 128),
    WeightDtype.MXFP4: Fraction(4) + Fraction(8, 32),
    WeightDtype.NVFP4: Fraction(4) + Fraction(8, 16),
}


def parse_weight_dtype(value: str, where: str = "weight dtype") -> WeightDtype:
    try:
        return WeightDtype(value.lower())
    except ValueError:
        valid = choices_text(d.value for d in WeightDtype)
        raise InputError(f"{where}: unknown weight dtype {value!r}; valid: {valid}") from None


class QuantScope(StrEnum):
    """Which weights a quantized checkpoint stores in its weight dtype."""

    LINEAR = "linear"  # every linear layer of the decoder layers (fp8, AWQ, GPTQ)
    EXPERTS = "experts"  # routed experts only (gpt-oss: attention and router stay bf16)


class LayerKind(StrEnum):
    """What one decoder layer keeps per sequence (Hugging Face `layer_types` names)."""

    FULL = "full_attention"
    SLIDING = "sliding_attention"
    STATE = "linear_attention"  # Mamba / gated DeltaNet: a fixed-size state, no per-token KV


@dataclass(frozen=True, slots=True)
class MoESpec:
    """Mixture of experts (DeepSeek / Qwen3-MoE / Mixtral / gpt-oss config.json fields)."""

    num_experts: int  # routed experts per MoE layer (n_routed_experts, num_experts, ...)
    experts_per_token: int  # num_experts_per_tok / experts_per_token
    expert_intermediate_size: int  # moe_intermediate_size (Mixtral, gpt-oss: intermediate_size)
    num_shared_experts: int = (
        0  # n_shared_experts (DeepSeek) or 1 with a shared expert (Qwen3-Next)
    )
    shared_intermediate_size: int = 0  # per shared expert
    num_dense_layers: int = 0  # first_k_dense_replace: the first layers keep a dense MLP

    def expert_params(self, hidden_size: int) -> int:
        """One routed expert: gate, up and down projections."""
        return 3 * hidden_size * self.expert_intermediate_size

    def layer_params(self, hidden_size: int, *, active: bool) -> int:
        """One MoE layer's MLP: the router, the shared experts and all (or, active, the
        `experts_per_token` chosen) routed experts."""
        routed = self.experts_per_token if active else self.num_experts
        shared = self.num_shared_experts * 3 * hidden_size * self.shared_intermediate_size
        return hidden_size * self.num_experts + shared + routed * self.expert_params(hidden_size)


@dataclass(frozen=True, slots=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3 config.json fields)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None  # None: queries projected directly (DeepSeek-V2-Lite)

    @property
    def cache_elements(self) -> int:
        """Elements cached per token per layer: the latent plus the shared RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def attention_params(self, hidden_size: int, num_heads: int) -> int:
        qk_head = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank is None:
            q = hidden_size * num_heads * qk_head
        else:
            q = hidden_size * self.q_lora_rank + self.q_lora_rank * num_heads * qk_head
        kv_down = hidden_size * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_up = self.kv_lora_rank * num_heads * (self.qk_nope_head_dim + self.v_head_dim)
        return q + kv_down + kv_up + num_heads * self.v_head_dim * hidden_size


@dataclass(frozen=True, slots=True)
class StateSpec:
    """Fixed per-sequence state of one linear-attention (gated DeltaNet) layer, Qwen3-Next's
    config.json fields: a causal-conv state of (kernel - 1) x (2 key dims + value dims) and a
    recurrent state of value_heads x key_head_dim x value_head_dim."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def elements(self) -> int:
        key_dim = self.num_key_heads * self.key_head_dim
        value_dim = self.num_value_heads * self.value_head_dim
        conv = (self.conv_kernel - 1) * (2 * key_dim + value_dim)
        recurrent = self.num_value_heads * self.key_head_dim * self.value_head_dim
        return conv + recurrent

    def params(self, hidden_size: int) -> int:
        """Projections in (q, k, v, gate z, and the b/a gates per value head) and out."""
        key_dim = self.num_key_heads * self.key_head_dim
        value_dim = self.num_value_heads * self.value_head_dim
        inward = hidden_size * (2 * key_dim + 2 * value_dim + 2 * self.num_value_heads)
        return inward + value_dim * hidden_size


DENSE_SHAPE_FIELDS = (
    "name",
    "num_layers",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "hidden_size",
    "intermediate_size",
    "vocab_size",
    "is_gated_mlp",
    "max_seq_len",
    "num_params",
)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Shapes of a decoder-only transformer, as its Hugging Face config.json gives them.

    The fields after `num_params` default to a dense 16-bit model whose layers are all full
    attention; `layer_kinds` empty means exactly that.
    """

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    is_gated_mlp: bool
    max_seq_len: int
    num_params: int  # parameters, for weight bytes; computed from shapes when not published
    weight_dtype: WeightDtype = WeightDtype.BF16
    quant_scope: QuantScope = QuantScope.LINEAR
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    layer_kinds: tuple[LayerKind, ...] = field(default=())
    sliding_window: int | None = None  # tokens a SLIDING layer keeps
    state: StateSpec | None = None  # what a STATE layer keeps
    tied_embeddings: bool = False
    # The checkpoint ships a multi-token-prediction module, which speculative method "mtp"
    # drafts with (DeepSeek-V3's num_nextn_predict_layers; hf_config.MTP_MODEL_TYPES).
    has_mtp: bool = False

    def dense_shape(self) -> dict[str, object]:
        """The fields a dense model is described by (what a calibration profile records): the
        2023 layout, so profiles of dense models read the same as before the new kinds."""
        return {name: getattr(self, name) for name in DENSE_SHAPE_FIELDS}

    # -- layers -----------------------------------------------------------------------------

    def kinds(self) -> tuple[LayerKind, ...]:
        return self.layer_kinds or (LayerKind.FULL,) * self.num_layers

    def kind_of(self, layer: int) -> LayerKind:
        return self.layer_kinds[layer] if self.layer_kinds else LayerKind.FULL

    def num_layers_of(self, kind: LayerKind) -> int:
        if not self.layer_kinds:
            return self.num_layers if kind is LayerKind.FULL else 0
        return self.layer_kinds.count(kind)

    @property
    def num_dense_mlp_layers(self) -> int:
        """Layers whose MLP is dense: all of a dense model's, a mixture of experts' first
        `num_dense_layers` (first_k_dense_replace)."""
        return (
            self.num_layers if self.moe is None else min(self.moe.num_dense_layers, self.num_layers)
        )

    def layer_classes(self) -> dict[tuple[LayerKind, bool], int]:
        """Layers counted by what their parameters depend on, (kind, whether the MLP is dense):
        parameter sums multiply a class's count instead of walking every layer (a config may
        give 10^6 layers, and each `kinds()` is a tuple of them)."""
        dense = self.num_dense_mlp_layers
        if not self.layer_kinds:
            classes = {
                (LayerKind.FULL, True): dense,
                (LayerKind.FULL, False): self.num_layers - dense,
            }
        else:
            classes = dict.fromkeys(((k, d) for k in LayerKind for d in (True, False)), 0)
            for kind in LayerKind:
                in_dense = self.layer_kinds[:dense].count(kind)
                classes[kind, True] = in_dense
                classes[kind, False] = self.layer_kinds.count(kind) - in_dense
        return {key: count for key, count in classes.items() if count}

    @property
    def num_kv_layers(self) -> int:
        """Layers that keep per-token KV (full and sliding-window attention)."""
        return self.num_layers - self.num_layers_of(LayerKind.STATE)

    # -- KV ---------------------------------------------------------------------------------

    def kv_heads_per_gpu(self, tensor_parallel: int = 1) -> int:
        """KV heads each GPU stores: max(1, kv_heads / t) (MQA/GQA heads are replicated)."""
        return max(1, self.num_kv_heads // tensor_parallel)

    def kv_bytes_per_token_per_layer(
        self, dtype: KVDtype = KVDtype.FP16, tensor_parallel: int = 1
    ) -> int:
        """One attention layer's KV bytes for one token on one GPU (see the module docstring).

        MLA under tensor parallelism: vLLM stores one latent "head" on every rank
        (vllm/config/model.py ModelConfig.get_num_kv_heads: `if self.use_mla: return 1`,
        "When using MLA during decode it becomes MQA"), so t GPUs each hold the whole row."""
        if self.mla is not None:
            return dtype.bytes_of(self.mla.cache_elements)
        return 2 * self.kv_heads_per_gpu(tensor_parallel) * dtype.bytes_of(self.head_dim)

    def kv_bytes_per_token(self, dtype: KVDtype = KVDtype.FP16, tensor_parallel: int = 1) -> int:
        """Per GPU, summed over every layer that keeps per-token KV (window layers included:
        until a sequence outgrows the window each of its tokens costs this much)."""
        return self.num_kv_layers * self.kv_bytes_per_token_per_layer(dtype, tensor_parallel)

    def state_bytes_per_seq(self, dtype: KVDtype = KVDtype.FP16, tensor_parallel: int = 1) -> int:
        """Fixed state of all STATE layers of one sequence, per GPU: heads split over t as
        vLLM shards the linear-attention heads. Stored in the KV dtype (an assumption: vLLM's
        mamba cache dtype defaults to the model's)."""
        if self.state is None:
            return 0
        per_layer = dtype.bytes_of(self.state.elements) // tensor_parallel
        return self.num_layers_of(LayerKind.STATE) * per_layer

    def kv_bytes_for_sequence(
        self, seq_len: int, dtype: KVDtype = KVDtype.FP16, tensor_parallel: int = 1
    ) -> int:
        """Exact bytes one sequence of `seq_len` tokens keeps: full layers every token, window
        layers at most the window, state layers their fixed state."""
        per_layer = self.kv_bytes_per_token_per_layer(dtype, tensor_parallel)
        window = self.sliding_window or seq_len
        full = self.num_layers_of(LayerKind.FULL) * seq_len
        sliding = self.num_layers_of(LayerKind.SLIDING) * min(seq_len, window)
        return (full + sliding) * per_layer + self.state_bytes_per_seq(dtype, tensor_parallel)

    # -- parameters -------------------------------------------------------------------------

    @property
    def attention_params(self) -> int:
        """One attention layer's projections."""
        if self.mla is not None:
            return self.mla.attention_params(self.hidden_size, self.num_heads)
        q_out = self.num_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        return self.hidden_size * (q_out + 2 * kv_out) + q_out * self.hidden_size

    @property
    def dense_mlp_params(self) -> int:
        return (3 if self.is_gated_mlp else 2) * self.hidden_size * self.intermediate_size

    def class_params(self, kind: LayerKind, is_dense: bool, *, active: bool = False) -> int:
        """One layer of `kind` with a dense MLP (`is_dense`) or routed experts."""
        if kind is LayerKind.STATE and self.state is not None:
            mixer = self.state.params(self.hidden_size)
        else:
            mixer = self.attention_params
        if is_dense or self.moe is None:
            return mixer + self.dense_mlp_params
        return mixer + self.moe.layer_params(self.hidden_size, active=active)

    def layer_params(self, layer: int, *, active: bool = False) -> int:
        is_dense = layer < self.num_dense_mlp_layers
        return self.class_params(self.kind_of(layer), is_dense, active=active)

    def _sum_layer_params(self, *, active: bool) -> int:
        return sum(
            count * self.class_params(kind, is_dense, active=active)
            for (kind, is_dense), count in self.layer_classes().items()
        )

    def count_params(self, *, active: bool = False) -> int:
        """Parameters from shapes: every layer's linear weights plus the embedding (and the LM
        head unless tied); `active`: only the experts one token routes to."""
        embeddings = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        return self._sum_layer_params(active=active) + embeddings

    @property
    def params_per_layer(self) -> int:
        """Linear-layer parameters one token touches in an average decoder layer: a dense
        layer's attention + MLP (as before MoE existed); for MoE the active experts only."""
        if self.moe is None and self.mla is None and not self.layer_kinds:
            return self.attention_params + self.dense_mlp_params
        return self._sum_layer_params(active=True) // self.num_layers

    # -- weights ----------------------------------------------------------------------------

    def quantized_params(self) -> int:
        """Parameters stored in `weight_dtype` (the rest stay 16-bit)."""
        if self.weight_dtype.is_16_bit:
            return 0
        if self.quant_scope is QuantScope.EXPERTS:
            if self.moe is None:
                return 0
            num_moe_layers = self.num_layers - self.num_dense_mlp_layers
            return num_moe_layers * self.moe.num_experts * self.moe.expert_params(self.hidden_size)
        return self._sum_layer_params(active=False)

    def weight_bytes(self, bytes_per_param: int = 2, tensor_parallel: int = 1) -> int:
        """Weight bytes each GPU holds (weights split evenly under tensor parallelism):
        16-bit parameters at `bytes_per_param`, quantized ones at their dtype's bits."""
        quantized = min(self.quantized_params(), self.num_params)
        plain = (self.num_params - quantized) * bytes_per_param
        packed = quantized * self.weight_dtype.bits / 8
        return int(plain + packed) // tensor_parallel
