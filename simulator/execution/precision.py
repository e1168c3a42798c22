"""Which tensor-core peak a model's linear layers run at, by weight dtype and GPU.

    bf16 / fp16          16-bit GEMM (W16A16)                       the 16-bit peak
    fp8                  W8A8 on FP8 tensor cores (Ada, Hopper,      the FP8 peak
                         Blackwell, CDNA 3/4)
                         W8A16 where the chip has none (Ampere)      the 16-bit peak
    int8                 W8A8 on INT8 tensor cores                   the INT8 peak
    nvfp4, mxfp4         W4A4 where the chip's FP4 tensor cores      the FP4 peak
                         take the format (Blackwell: both; MI355X:
                         mxfp4); routed experts in mxfp4 on
                         Blackwell W4A8 (MXFP8 activations)          the FP8 peak
    int4, and FP4        W4A16: weights dequantized to 16 bit        the 16-bit peak
    elsewhere

Sources: vLLM's FP8 documentation (docs/features/quantization/fp8.md, "FP8 computation is
supported on NVIDIA GPUs with compute capability >= 8.9 (Ada Lovelace, Hopper, Blackwell). FP8
models will run on compute capability >= 7.5 (Turing) as weight-only W8A16, utilizing FP8
Marlin"; vllm-project/vllm PR 5975 brought FP8 Marlin to Ampere). FP4, vLLM v0.34.0 (NVFP4 and
MXFP4 checkpoints load from v0.11.0, the first release of the ones pagesim models with them):
- NVFP4 (ModelOpt `modelopt_fp4`, compressed-tensors W4A4): W4A4 through CUTLASS/FlashInfer on
  compute capability 10.x (model_executor/kernels/linear/__init__.py `init_nvfp4_linear_kernel`,
  nvfp4/flashinfer.py); on Hopper and older the MarlinNvFp4 weight-only kernel (W4A16); on ROCm
  only an emulation (EmulationNvFp4LinearKernel), priced here as W4A16 (its dequantization
  cost, larger than Marlin's, is not priced).
- MXFP4: linear layers W4A4 through FlashInfer's CuteDSL kernel on Blackwell
  (mxfp4/flashinfer.py, `kMxfp4Dynamic` activations) and AITER's on gfx950, the MI355X
  (mxfp4/aiter.py AiterMxfp4LinearKernel, `supports_mx()`); routed experts
  (fused_moe/oracle/mxfp4.py, the backends' priority): on Blackwell FlashInfer TRTLLM
  MXFP4 x MXFP8 (W4A8), on ROCm AITER's CK W4A16 kernel first (gfx950 and gfx942), on Hopper
  Triton/Marlin W4A16.
- INT4 (AWQ/GPTQ): Marlin, W4A16 everywhere.

The weight-only kernels' dequantization cost is not priced (an assumption: Marlin is built to hide
it under the weight stream); their weight bytes are the dtype's (model_spec.WEIGHT_BITS).

A GPU's dtype peak scales with its 16-bit figure: peak = the GPU's `fp16_flops` x (datasheet
dtype peak / datasheet 16-bit peak), so a preset whose fp16_tflops a scenario replaces keeps its
ratios, and a 16-bit model uses `fp16_flops` itself (exactly as before dtypes were priced).
"""

from __future__ import annotations

from dataclasses import dataclass

from pagesim.simulator.core.catalog import TENSOR_PEAKS, GPUSpec, ModelSpec, TensorPeaks
from pagesim.simulator.core.model_spec import QuantScope, WeightDtype


@dataclass(frozen=True, slots=True)
class GemmPeak:
    """The peak one kind of linear layer runs at on one GPU."""

    flops: float  # FLOP/s (OP/s for int8)
    mode: str  # "W16A16", "W8A8 fp8", "W8A16 (fp8 Marlin)", "W8A8 int8", "W4A4 nvfp4", "W4A16"
    note: str  # where the figure comes from, for the report


def gemm_peak(gpu: GPUSpec, dtype: WeightDtype, routed_experts: bool = False) -> GemmPeak:
    """The peak a linear layer with `dtype` weights runs at on `gpu` (module docstring);
    `routed_experts`: a MoE layer's routed experts, whose FP4 kernels differ."""
    peaks = TENSOR_PEAKS.get(gpu.name)
    base = gpu.fp16_flops
    if dtype.is_16_bit:
        return GemmPeak(base, "W16A16", "the GPU's 16-bit peak")
    if dtype in (WeightDtype.MXFP4, WeightDtype.NVFP4) and peaks is not None:
        fp4 = _fp4_peak(gpu, peaks, dtype, routed_experts)
        if fp4 is not None:
            return fp4
    if dtype in (WeightDtype.INT4, WeightDtype.MXFP4, WeightDtype.NVFP4):
        return GemmPeak(
            base,
            "W4A16",
            f"4-bit weights dequantized to 16-bit GEMMs (no {dtype.value} tensor-core path)",
        )
    if peaks is None:
        return GemmPeak(
            base,
            f"W{dtype.value}, at the 16-bit peak",
            f"{gpu.name}: no datasheet peak per dtype known here; priced at its 16-bit peak",
        )
    if dtype is WeightDtype.FP8:
        if peaks.fp8 is None:
            return GemmPeak(
                base,
                "W8A16 (fp8 Marlin)",
                f"{gpu.name} has no FP8 tensor cores: vLLM runs FP8 weight-only (W8A16) via "
                "FP8 Marlin at the 16-bit peak",
            )
        return GemmPeak(base * peaks.fp8 / peaks.bf16, "W8A8 fp8", peaks.source)
    assert dtype is WeightDtype.INT8
    if peaks.int8 is None:
        return GemmPeak(
            base,
            "W8A8 int8, at the 16-bit peak",
            f"{gpu.name}: no verified dense INT8 peak; priced at its 16-bit peak (an assumption)",
        )
    return GemmPeak(base * peaks.int8 / peaks.bf16, "W8A8 int8", peaks.source)


def _fp4_peak(
    gpu: GPUSpec, peaks: TensorPeaks, dtype: WeightDtype, routed_experts: bool
) -> GemmPeak | None:
    """The FP4 tensor-core path vLLM takes for `dtype` on `gpu`, or None: W4A16 (docstring)."""
    if not peaks.runs_fp4(dtype.value) or peaks.fp4 is None:
        return None
    if routed_experts and dtype is WeightDtype.MXFP4:
        if not peaks.runs_fp4("nvfp4"):  # not Blackwell: ROCm's AITER CK W4A16 MoE comes first
            return None
        assert peaks.fp8 is not None  # every FP4 chip has FP8 tensor cores
        return GemmPeak(
            gpu.fp16_flops * peaks.fp8 / peaks.bf16,
            "W4A8 mxfp4 x mxfp8",
            f"vLLM's FlashInfer TRTLLM MXFP4 x MXFP8 MoE at the FP8 peak; {peaks.source}",
        )
    return GemmPeak(
        gpu.fp16_flops * peaks.fp4 / peaks.bf16,
        f"W4A4 {dtype.value}",
        f"{dtype.value} on FP4 tensor cores; {peaks.source}",
    )


@dataclass(frozen=True, slots=True)
class LinearSplit:
    """A model's linear layers on one GPU under t-way tensor parallelism, all layers summed, in
    two groups that may differ in dtype: the weights every step reads whole ("fixed":
    attention, dense MLPs, routers, shared experts) and the routed experts, read only where a
    token routes (execution/moe_cost.py)."""

    fixed_flops_per_token: float
    fixed_weight_bytes: float
    fixed_peak: GemmPeak
    plain_flops_per_token: float  # of the fixed group, run at the 16-bit peak whatever its dtype
    plain_peak: GemmPeak
    expert_flops_per_token: float  # the k routed experts of every MoE layer, one token
    expert_bytes: float  # one routed expert of one layer, whole (all its TP shards)
    expert_peak: GemmPeak

    @property
    def flops_per_token(self) -> float:
        return self.fixed_flops_per_token + self.plain_flops_per_token + self.expert_flops_per_token

    def compute_s_per_token(self, gemm_efficiency: float) -> float:
        """Seconds of GEMM compute per token, each group at its own peak."""
        return (
            self.fixed_flops_per_token / self.fixed_peak.flops
            + self.plain_flops_per_token / self.plain_peak.flops
            + self.expert_flops_per_token / self.expert_peak.flops
        ) / gemm_efficiency


def linear_split(model: ModelSpec, gpu: GPUSpec, tensor_parallel: int) -> LinearSplit:
    """Split `model`'s linear weights as `LinearSplit` says, each group in its dtype:
    QuantScope.LINEAR stores every decoder linear weight in `weight_dtype`, EXPERTS only the
    routed experts (model_spec.py). MLA's kv_b_proj counts 16-bit when quantized: vLLM's MLA
    backend keeps bf16 copies of W_UK and W_UV for the absorbed decode's batched matmuls
    (vllm/v1/attention/backends/mla/common.py, "we currently do not have quantized bmm's")."""
    t = tensor_parallel
    dtype = model.weight_dtype
    quantized_fixed = not dtype.is_16_bit and model.quant_scope is QuantScope.LINEAR
    fixed_dtype = dtype if quantized_fixed else WeightDtype.BF16
    fixed_params = 0
    expert_params = 0
    plain_params = 0  # 16-bit whatever the scope (MLA's absorbed kv_b_proj copies)
    moe = model.moe
    one_expert = moe.expert_params(model.hidden_size) if moe is not None else 0
    for (kind, is_dense), num_layers in model.layer_classes().items():
        params = model.class_params(kind, is_dense, active=True)
        if moe is not None and not is_dense:
            routed = moe.experts_per_token * one_expert
            params -= routed
            expert_params += routed * num_layers
        if model.mla is not None and quantized_fixed:
            mla = model.mla
            kv_up = mla.kv_lora_rank * model.num_heads * (mla.qk_nope_head_dim + mla.v_head_dim)
            params -= kv_up
            plain_params += kv_up * num_layers
        fixed_params += params * num_layers
    fixed_bytes = float(fixed_params * fixed_dtype.bits / 8 + plain_params * 2) / t
    return LinearSplit(
        fixed_flops_per_token=2 * fixed_params / t,
        fixed_weight_bytes=fixed_bytes,
        fixed_peak=gemm_peak(gpu, fixed_dtype),
        plain_flops_per_token=2 * plain_params / t,
        plain_peak=gemm_peak(gpu, WeightDtype.BF16),
        expert_flops_per_token=2 * expert_params / t,
        expert_bytes=float(one_expert * dtype.bits / 8),
        expert_peak=gemm_peak(gpu, dtype, routed_experts=True),
    )
