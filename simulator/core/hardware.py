"""What a GPU preset brings beyond its datasheet: the roofline's step-cost factors and the
interconnect its tensor-parallel all-reduce crosses.

Every figure says where it comes from. "Fitted" figures are the output of
`pagesim calibrate fit-roofline` on the Vidur project's public measurements (microsoft/vidur, MIT;
files and dates in calibration/vidur_csv.py, the fit in calibration/roofline_fit.py, its errors in
calibration/profiles/README.md); a test reruns the fit and checks these constants. GPUs the data
lacks take the factors of the closest measured GPU, marked `is_fitted = False` so the report says
they are extrapolated; their datasheet peaks (catalog.py) still scale every term.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class RooflineFactors:
    """Shares of datasheet peaks and fixed costs that the roofline's terms use (roofline_terms.py).

    Linear layers, GEMM by GEMM (execution/gemm.py): the slower of compute and weight streaming
    plus `gemm_overlap` times the faster (they overlap imperfectly between the extremes), plus
    `gemm_launch_s` per GEMM; compute counts whole output tiles of `gemm_tile_m` x `gemm_tile_n`
    in whole waves over `gemm_num_sms` SMs (0: no quantization, a smooth curve).
    """

    gemm_efficiency: float  # share of peak FLOP/s a large GEMM reaches
    gemm_overlap: float  # share of the faster of compute / memory that does not overlap, [0, 1]
    gemm_launch_s: float  # fixed cost of each GEMM (launch, tail)
    weight_bw_efficiency: float  # share of peak bandwidth streaming weights
    small_ops_layer_s: float  # fixed cost per layer of the 2 norms, rotary, activation, add
    small_ops_bw_efficiency: float  # their bytes' share of peak bandwidth
    attention_bw_efficiency: float  # decode attention's KV read, KV writes and CoW copies
    attention_layer_s: float  # fixed cost per layer of one decode attention call
    attention_seq_s: float  # decode attention's cost per sequence per layer
    # Prefill attention: (query, key) pairs against cached context run in whole tiles at
    # `attention_flops_efficiency`; the causal triangle of the new tokens, half-empty tiles on the
    # diagonal, at `attention_causal_efficiency`; plus a cost per new token and query head on the
    # GPU, and per call.
    attention_flops_efficiency: float
    attention_causal_efficiency: float
    attention_token_s: float
    attention_prefill_layer_s: float
    source: str
    is_fitted: bool  # False: taken from another GPU (extrapolated)
    gemm_tile_m: int = 0  # tokens per output tile (chosen by the fit)
    gemm_tile_n: int = 0  # output features per tile
    gemm_num_sms: int = 0  # SMs a wave of tiles fills (the chip's datasheet count); 0: smooth


@dataclass(frozen=True, slots=True)
class CustomAllReduce:
    """vLLM's own all-reduce kernels on a link where every GPU reaches every other over NVLink
    (csrc/custom_all_reduce.cuh; simulator/execution/allreduce.py says when vLLM runs which).
    One call of a B-byte message over t GPUs:

        one-shot  stage_s + (t - 1) B / one_shot_bps               (each GPU reads every peer's
                                                                     input and reduces it)
        two-shot  2 stage_s + 2 (t - 1) / t B / two_shot_bps       (reduce-scatter, all-gather)

    `stage_s` is one barrier-synchronised stage as a model step sees it: the kernel's own latency
    plus the wait for the slowest GPU to arrive, which a microbenchmark in lockstep does not see.
    """

    stage_s: float
    one_shot_bps: float  # bytes read from peers per second, per GPU
    two_shot_bps: float
    source: str
    is_fitted: bool


@dataclass(frozen=True, slots=True)
class Interconnect:
    """The link a tensor-parallel all-reduce crosses: per call `latency_s + ring bytes / bw`, ring
    bytes = 2 (t - 1) / t x the message (NCCL's bus-bandwidth convention).

    Where the link was measured, messages up to `ALLREDUCE_KNOT_BYTES[-1]` instead take the
    measured medians (`small_by_workers`: one time per knot, per GPU count, as measured),
    interpolated linearly in log size and held flat below the first knot: at small sizes NCCL
    switches protocol and algorithm with the size, and the medians do not follow one curve: in
    places a larger message was measured faster, in runs of neighbouring sizes (regimes, not
    noise: calibration/allreduce_fit.knots_s), so the table is not non-decreasing in size
    (roofline_terms.allreduce_call_s).
    """

    name: str
    allreduce_latency_s: float  # for a GPU count not in `by_workers`
    allreduce_bw_bps: float  # bus bandwidth per GPU
    source: str
    is_fitted: bool
    by_workers: tuple[tuple[int, float, float], ...] = ()  # (GPUs, latency s, bus bw B/s)
    # (GPUs, seconds per call at each of ALLREDUCE_KNOT_BYTES): measured medians
    small_by_workers: tuple[tuple[int, tuple[float, ...]], ...] = ()
    small_s: tuple[float, ...] = ()  # this count's knots (set by `at`); () : the formula only
    # vLLM's custom all-reduce on this link; None where it cannot run (not every pair of GPUs on
    # NVLink) or is not modelled (2 GPUs over PCIe with peer-to-peer): NCCL's figures above.
    custom: CustomAllReduce | None = None

    def at(self, num_gpus: int) -> Interconnect:
        """This link's figures for an all-reduce over `num_gpus` GPUs (NCCL picks other
        algorithms and protocols at other counts: fitted one by one where measured)."""
        small = dict(self.small_by_workers).get(num_gpus, ())
        for count, latency, bandwidth in self.by_workers:
            if count == num_gpus:
                return replace(
                    self,
                    allreduce_latency_s=latency,
                    allreduce_bw_bps=bandwidth,
                    by_workers=(),
                    small_by_workers=(),
                    small_s=small,
                )
        return replace(self, by_workers=(), small_by_workers=(), small_s=small)


# Message sizes (bytes) of the measured all-reduce knots: every half octave from 8 KiB (one token
# of a 4096-wide model) to 4 MiB; above, latency + bytes / bandwidth (fitted to the larger sizes).
ALLREDUCE_KNOT_BYTES = tuple(2 ** (13 + k / 2) for k in range(19))


def extrapolated(factors: RooflineFactors, measured_gpu: str) -> RooflineFactors:
    """`factors` used for a GPU nobody measured here: the report says so."""
    return replace(
        factors,
        source=f"extrapolated: {measured_gpu}'s fitted factors, this GPU's datasheet peaks",
        is_fitted=False,
    )


_FIT = "fitted by `pagesim calibrate fit-roofline` to Vidur's {} measurements"

# A100-SXM4-80GB: Vidur compute/a100 (Llama-2-7B/70B, Llama-3-8B/70B, TP 1-8, 1-8192 tokens) and
# the attention of Llama-2-70B at TP 2 (block 16, FlashAttention backend, Kineto timings).
# GEMMs in 64 x 128 tiles over 108 SMs (the tile: the fit's best of calibration/roofline_fit.py's
# GEMM_TILES; the SMs: NVIDIA A100 whitepaper).
A100 = RooflineFactors(
    gemm_efficiency=0.7613,
    gemm_overlap=0.1459,
    gemm_launch_s=5.152e-06,
    weight_bw_efficiency=0.7934,
    small_ops_layer_s=1.113e-05,
    small_ops_bw_efficiency=0.5159,
    attention_bw_efficiency=0.7674,
    attention_layer_s=1.531e-05,
    attention_seq_s=7.211e-09,
    attention_flops_efficiency=0.4622,
    attention_causal_efficiency=0.2164,
    attention_token_s=2.271e-09,
    attention_prefill_layer_s=1.669e-05,
    source=_FIT.format("a100-80gb"),
    is_fitted=True,
    gemm_tile_m=64,
    gemm_tile_n=128,
    gemm_num_sms=108,
)
# H100-SXM: Vidur compute/h100 (Llama-2-7B/70B, TP 1-8). No attention measured: the attention
# factors are the A100's (extrapolated; the report says so through `attention_source`). GEMMs in
# 128 x 128 tiles over 132 SMs (NVIDIA H100 whitepaper, SXM5).
H100 = replace(
    A100,
    gemm_efficiency=0.7918,
    gemm_overlap=0.2378,
    gemm_launch_s=4.815e-06,
    weight_bw_efficiency=0.8895,
    small_ops_layer_s=1.027e-05,
    small_ops_bw_efficiency=0.5765,
    source=_FIT.format("h100-sxm"),
    gemm_tile_m=128,
    gemm_tile_n=128,
    gemm_num_sms=132,
)
# A40: Vidur compute/a40 (Llama-2-7B/70B, TP 1-8); attention as for the H100. GEMMs in 64 x 128
# tiles over 84 SMs (A40 datasheet: 10,752 CUDA cores, 128 per SM). L40S, L4 and RTX 4090 borrow
# these factors (catalog.py) and so quantize as an 84-SM chip: an extrapolation (they have 142,
# 58 and 128 SMs), which the report already flags as such.
A40 = replace(
    A100,
    gemm_efficiency=0.8128,
    gemm_overlap=0.2106,
    gemm_launch_s=3.956e-06,
    weight_bw_efficiency=0.785,
    small_ops_layer_s=7.062e-06,
    small_ops_bw_efficiency=0.741,
    source=_FIT.format("a40"),
    gemm_tile_m=64,
    gemm_tile_n=128,
    gemm_num_sms=84,
)
# A GPU given by its figures alone ([gpu] name = ..., no preset).
GENERIC_FACTORS = extrapolated(A100, "a100-80gb")


def _us(*values: float) -> tuple[float, ...]:
    return tuple(v * 1e-6 for v in values)


# vLLM's custom all-reduce on NVSwitch nodes (CustomAllReduce). Bandwidths: least squares of
# vLLM's own benchmark of its kernels on 4 H100s in CUDA graphs (vllm-project/vllm PR #24532,
# September 2025, benchmarks/kernels/benchmark_device_communicators.py: ca_1stage 10, 14, 19,
# 23, 30, 38 us and ca_2stage 17, 18, 25, 26, 35, 42 us at 0.5, 1, 1.5, 2, 3, 4 MiB), refit by
# calibration/published_fit.microbenchmark_fit: one-shot 396 GB/s of peer reads per GPU at a 6.4 us
# intercept, two-shot 212 GB/s at 12.3 us (two stages of 6.2 us). A100: the same shares of NVLink
# 3's 300 GB/s per direction as of NVLink 4's 450 (NVIDIA A100 and H100 datasheets: 600 and 900
# GB/s both ways), an estimate. The stage latency is fitted to the published end-to-end runs of
# vLLM's CI (calibration/published_fit.py, builds 9523 and 9555), one figure for A100 and H100:
# 14.9 us, against the lockstep microbenchmark's 6.2-6.4 us per stage. In a model step a stage
# also waits for the slowest GPU to arrive (their kernels since the last all-reduce never end
# at once), which a microbenchmark of back-to-back all-reduces does not see; the per-call total
# it gives, ~16 us for a decode step's 128 KiB on 4 GPUs, is inside the 9-21 us that SGLang's
# PR #2904 measured for vLLM's kernel run eagerly on 4 H100s (January 2025).
_CUSTOM_FIT = (
    "stage latency fitted to vLLM CI builds 9523/9555 (calibration/published_fit.py); "
    "bandwidths: vLLM PR #24532's H100 kernel benchmark"
)
CUSTOM_STAGE_S = 14.94e-6  # fitted (above), one figure for both NVLink generations
NVLINK4_CUSTOM = CustomAllReduce(CUSTOM_STAGE_S, 396e9, 212e9, _CUSTOM_FIT, True)
NVLINK3_CUSTOM = CustomAllReduce(
    CUSTOM_STAGE_S,
    396e9 * 300 / 450,
    212e9 * 300 / 450,
    f"{_CUSTOM_FIT}, scaled to NVLink 3",
    True,
)

# All-reduce links. DGX nodes (every GPU on NVSwitch): fitted to Vidur's
# network/<node>/all_reduce.csv. Per GPU count (NCCL's algorithm and protocol change with it):
# the measured medians at ALLREDUCE_KNOT_BYTES (8 KiB .. 4 MiB, every half octave; the median of
# the file's medians within x1.5 of the size), and latency + bytes / bandwidth fitted above 4 MiB;
# over all counts and sizes, one curve, for other counts. The knots are not non-decreasing: they
# follow NCCL's measured size regimes (e.g. 4 A100s: 21 us at 64 KiB, 61-62 us at 128-256 KiB,
# 26 us at 512 KiB; 2 H100s: 40 us at 64 KiB, 17 us at 128 KiB), which a non-decreasing fit
# missed by up to 83% (calibration/allreduce_fit.knots_s, calibration/profiles/ERRORS.md).
# fmt: off
DGX_A100 = Interconnect(
    "nvlink3 (DGX A100)",
    3.848e-05,
    1.543e11,
    _FIT.format("network/a100_dgx all-reduce"),
    True,
    by_workers=((2, 4.241e-05, 1.679e11), (4, 6.003e-05, 1.833e11), (8, 6.554e-05, 1.715e11)),
    small_by_workers=(
        (2, _us(46, 55, 55, 55, 60, 53, 49, 56, 51, 47,
            39, 45, 54, 59, 59, 55, 58, 62, 66)),
        (4, _us(20, 20, 20, 20, 21, 21, 21, 42, 61, 62,
            61.5, 28, 26, 41, 61, 52, 58, 72, 91)),
        (8, _us(31, 31, 31, 31, 31, 34, 37, 36, 51, 60,
            60, 57.5, 38, 39, 61, 66, 73, 82, 102)),
    ),
    custom=NVLINK3_CUSTOM,
)
DGX_H100 = Interconnect(
    "nvlink4 (DGX H100)",
    2.95e-05,
    3.485e11,
    _FIT.format("network/h100_dgx all-reduce"),
    True,
    by_workers=((2, 2.197e-05, 3.042e11), (4, 2.56e-05, 3.537e11), (8, 3.739e-05, 3.778e11)),
    small_by_workers=(
        (2, _us(7, 11, 11, 31, 33, 40, 40, 38, 17, 27,
            38, 40, 40, 42, 40, 41, 42, 42, 43)),
        (4, _us(38, 38, 38, 40, 40, 40, 39.5, 41, 41, 41,
            41, 44, 44, 42, 41, 33, 39, 43, 46)),
        (8, _us(35, 33, 33, 33, 35, 33, 23, 21, 30, 35,
            36, 34.5, 31, 32, 32, 35, 44, 46, 56)),
    ),
    custom=NVLINK4_CUSTOM,
)
# fmt: on
# PCIe 4 x16, no NVLink (L40S, L4, A40 without its bridge): an estimate, not measured here. Bus
# bandwidth 20 GB/s, below the link's ~25 GB/s effective (FACTS.md), inside the 10-25 GB/s of a
# PCIe ring that issue 12 cites; latency 30 us, of the order of Vidur's NVLink all-reduce latencies
# (above: PCIe adds host round trips, so if anything more).
PCIE4 = Interconnect(
    "pcie4 (estimate)", 30e-6, 20e9, "estimate: PCIe 4 x16 ~25 GB/s (FACTS.md), no NVLink", False
)
# RTX 4090: no peer-to-peer over PCIe (FACTS.md), so NCCL stages through host memory and every byte
# crosses the link twice: half the bandwidth of PCIE4 (an estimate).
PCIE4_NO_P2P = Interconnect(
    "pcie4, no peer-to-peer (estimate)",
    30e-6,
    10e9,
    "estimate: PCIe 4 x16 without peer-to-peer (FACTS.md), staged through host memory",
    False,
)


@dataclass(frozen=True, slots=True)
class TensorPeaks:
    """Dense tensor-core peaks of one GPU by GEMM input type (FLOP/s, or OP/s for int8), as its
    datasheet or architecture whitepaper gives them **without** structured sparsity (the
    datasheets' starred figures are 2x these). `fp8` is None where the chip has no FP8 tensor
    cores (Ampere). None of these GPUs has FP4 tensor cores (Blackwell's are the first), so
    4-bit weights always run as 16-bit GEMMs (execution/precision.py)."""

    bf16: float
    fp8: float | None
    int8: float
    source: str


_A100_PEAKS = TensorPeaks(
    312e12,
    None,
    624e12,
    "NVIDIA A100 Tensor Core GPU datasheet: BF16/FP16 312 TFLOPS, INT8 624 TOPS (dense); "
    "Ampere has no FP8 tensor cores",
)
_H100_PEAKS = TensorPeaks(
    989e12,
    1979e12,
    1979e12,
    "NVIDIA H100/H200 datasheets (SXM): BF16/FP16 1,979 TFLOPS, FP8 3,958 TFLOPS, INT8 3,958 "
    "TOPS, all with sparsity: halved here",
)
# GPU preset name -> its peaks (catalog.py's GPUS). A GPU not listed (a custom [gpu]) has only
# its 16-bit figure: every weight dtype is priced at it, and the report says so.
TENSOR_PEAKS: dict[str, TensorPeaks] = {
    "a100-40gb": _A100_PEAKS,
    "a100-80gb": _A100_PEAKS,
    "h100-sxm": _H100_PEAKS,
    "h200-sxm": _H100_PEAKS,
    "l40s": TensorPeaks(
        362.05e12,
        733e12,
        733e12,
        "NVIDIA L40S datasheet: BF16/FP16 362.05, FP8 733 TFLOPS, INT8 733 TOPS (dense)",
    ),
    "l4": TensorPeaks(
        121e12,
        242.5e12,
        242.5e12,
        "NVIDIA L4 datasheet: FP16/BF16 242, FP8 485 TFLOPS, INT8 485 TOPS, all with sparsity: "
        "halved here",
    ),
    "rtx-4090": TensorPeaks(
        165.2e12,
        330.3e12,
        660.6e12,
        "NVIDIA Ada Lovelace architecture whitepaper, RTX 4090: FP16/BF16 with FP32 accumulate "
        "165.2, FP8 with FP32 accumulate 330.3 TFLOPS, INT8 660.6 TOPS (dense)",
    ),
    "a40": TensorPeaks(
        149.7e12,
        None,
        299.3e12,
        "NVIDIA A40 datasheet: BF16/FP16 149.7 TFLOPS, INT8 299.3 TOPS (dense); Ampere has no "
        "FP8 tensor cores",
    ),
}
