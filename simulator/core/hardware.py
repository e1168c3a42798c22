"""The types of the hardware presets: a GPU's datasheet figures (`GPUSpec`), the roofline's
step-cost factors (`RooflineFactors`), the interconnect its tensor-parallel all-reduce crosses
(`Interconnect`, `CustomAllReduce`), its tensor-core peaks (`TensorPeaks`), and the links a
disaggregated fleet moves KV over (`LinkPreset`).

The figures themselves are data, each with its source: simulator/core/presets/*.toml, read once
per process by core/preset_files.py (which says how to add a figure). "Fitted" figures are the
output of `pagesim calibrate fit-roofline` on the Vidur project's public measurements
(microsoft/vidur, MIT; files and dates in calibration/vidur_csv.py, the fit in
calibration/roofline_fit.py, its errors in calibration/profiles/README.md); a test reruns the fit
and checks them. GPUs the data lacks take the factors of the closest measured GPU, marked
`is_fitted = False` so the report says they are extrapolated; their datasheet peaks still scale
every term.
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


@dataclass(frozen=True, slots=True)
class TensorPeaks:
    """Dense tensor-core peaks of one GPU by GEMM input type (FLOP/s, or OP/s for int8), as its
    datasheet or architecture whitepaper gives them **without** structured sparsity (the
    datasheets' starred figures are 2x these). `fp8` is None where the chip has no FP8 tensor
    cores (Ampere); `int8` None where the datasheet gives no usable INT8 figure (Blackwell
    Ultra cut INT8 to a sliver). `fp4` is the FP4 peak of chips with FP4 tensor cores
    (Blackwell, CDNA 4), and `fp4_formats` the block-scaled FP4 formats vLLM runs on them as
    W4A4 (space-separated: "nvfp4 mxfp4" on Blackwell, "mxfp4" on the MI355X); other 4-bit
    weights run as 16-bit GEMMs (execution/precision.py)."""

    bf16: float
    fp8: float | None
    int8: float | None
    source: str
    fp4: float | None = None
    fp4_formats: str = ""

    def runs_fp4(self, fmt: str) -> bool:
        """Whether this chip's tensor cores take `fmt` ("nvfp4", "mxfp4") operands."""
        return self.fp4 is not None and fmt in self.fp4_formats.split()


GIB = 2**30
GB = 1e9


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """Datasheet ceilings of one GPU (bandwidths in bytes/s, compute in FLOP/s), the roofline's
    factors for it and the link its tensor-parallel all-reduce crosses."""

    name: str
    memory_bytes: int
    mem_bandwidth_bps: float
    fp16_flops: float
    host_link_bps: float  # effective PCIe bandwidth for swapping KV blocks to CPU memory
    factors: RooflineFactors
    interconnect: Interconnect
    # GPUs one scale-up fabric joins (an NVLink/NVSwitch or xGMI domain, or one PCIe host): the
    # largest tensor-parallel group its all-reduce link prices. 8 in an HGX/DGX or MI300-class
    # platform; 72 in a GB200 NVL72 rack.
    scale_up_gpus: int = 8


# A GPU's datasheet figures as people write them (a scenario's [gpu], the preset file): key ->
# (GPUSpec field, the field's units per unit of the key). Memory as marketed ("80 GB" HBM is
# 80 GiB); bandwidths and FLOP/s in decimal units.
GPU_FIGURE_UNITS: dict[str, tuple[str, float]] = {
    "memory_gib": ("memory_bytes", GIB),
    "mem_bandwidth_gbps": ("mem_bandwidth_bps", GB),
    "fp16_tflops": ("fp16_flops", 1e12),
    "host_link_gbps": ("host_link_bps", GB),
}


@dataclass(frozen=True, slots=True)
class LinkPreset:
    """One kind of link a disaggregated fleet moves KV over (core/link.py): per lane (GPU port),
    one direction."""

    bandwidth_bytes_s: float
    latency_s: float
    basis: str  # nominal or effective, and where each figure comes from
