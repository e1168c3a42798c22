"""How much power one GPU draws: idle, and busy as its step is compute- or memory-bound.

A GPU's draw while it serves follows what bounds its work (Splitwise, Patel et al., ISCA'24,
§III: the prompt phase is compute-bound and runs near the power limit, token generation is
memory-bound and draws far less; its power-capping results rest on that split). Per GPU:

    idle_w      powered, model loaded, no step running
    decode_w    a memory-bound step (token generation)
    prefill_w   a compute-bound step (a prompt's prefill)

and a step draws decode_w + (prefill_w - decode_w) x compute_share, where compute_share is the
share of the step's ideal time that its FLOPs take: (FLOPs / peak FLOP/s) / (FLOPs / peak FLOP/s
+ bytes / peak bandwidth) = MFU / (MFU + MBU). The mixing line between the two measured phases
is pagesim's (an estimate); the three draws are published measurements where a GPU has them:

- A100-80GB SXM and H100-SXM: idle 63 / 75 W, token phase 250 / 380 W, prompt phase 400 / 700
  W, the constant power model of Splitwise's simulator by the paper's authors
  (github.com/Mutinifni/splitwise-sim, configs/power_model/constant.yaml, commit 3780880), from
  the paper's DGX-A100 / DGX-H100 profiling. The prompt phase draws the TDP.
- TDPs from NVIDIA's datasheets: A100 SXM (40 and 80 GB) 400 W, H100 SXM 700 W, H200 SXM
  700 W, L40S 350 W, L4 72 W, A40 300 W, B200 1,000 W, GB200 1,200 W; GeForce RTX 4090 450 W
  total graphics power; AMD's typical board power: MI300X 750 W, MI325X 1,000 W, MI355X 1,400 W.
- Every other GPU's idle and token-phase draws are ESTIMATES: the shares of TDP Splitwise
  measured on the closest GPU (Ampere: the A100's 63/400 and 250/400; Hopper and Ada: the
  H100's 75/700 and 380/700; Blackwell and CDNA 3/4 take the H100's too) times the GPU's own TDP.
  Reports say so. The B300 has no profile (no primary power figure).

A GPU outside this table (a custom [gpu]) has no profile: its runs report no energy.
"""

from __future__ import annotations

from dataclasses import dataclass

SPLITWISE = (
    "Splitwise (Patel et al., ISCA'24) simulator's constant power model "
    "(github.com/Mutinifni/splitwise-sim configs/power_model/constant.yaml)"
)
_DATASHEET = {
    "a100-40gb": "NVIDIA A100 Tensor Core GPU datasheet (SXM: 400 W max TDP)",
    "a100-80gb": "NVIDIA A100 Tensor Core GPU datasheet (SXM: 400 W max TDP)",
    "h100-sxm": "NVIDIA H100 Tensor Core GPU datasheet (SXM: up to 700 W TDP)",
    "h200-sxm": "NVIDIA H200 Tensor Core GPU datasheet (SXM: up to 700 W TDP)",
    "l40s": "NVIDIA L40S datasheet (350 W max power consumption)",
    "l4": "NVIDIA L4 datasheet (72 W max TDP)",
    "rtx-4090": "NVIDIA GeForce RTX 4090 specifications (450 W total graphics power)",
    "a40": "NVIDIA A40 datasheet (300 W max power consumption)",
    "b200": "NVIDIA HGX B200 specifications (configurable up to 1,000 W per GPU)",
    "gb200": "NVIDIA GB200 NVL72 specifications (configurable up to 1,200 W per GPU)",
    "mi300x": "AMD Instinct MI300X data sheet (750 W typical board power)",
    "mi325x": "AMD Instinct MI325X product page (1,000 W typical board power)",
    "mi355x": "AMD Instinct MI355X product page (1,400 W typical board power)",
}


@dataclass(frozen=True, slots=True)
class PowerProfile:
    """One GPU's draws (W) and where each came from."""

    gpu: str
    tdp_w: float
    idle_w: float
    decode_w: float
    prefill_w: float
    source: str
    is_estimate: bool  # idle and decode draws scaled from another GPU's, not measured on it

    def __post_init__(self) -> None:
        if not 0 <= self.idle_w <= self.decode_w <= self.prefill_w <= self.tdp_w:
            raise ValueError(f"{self.gpu}: need 0 <= idle <= decode <= prefill <= TDP")

    def step_w(self, compute_share: float) -> float:
        """Draw of a step whose ideal time is `compute_share` FLOP-bound (0..1)."""
        share = min(1.0, max(0.0, compute_share))
        return self.decode_w + (self.prefill_w - self.decode_w) * share

    def describe(self) -> dict[str, object]:
        return {
            "gpu": self.gpu,
            "tdp_w": self.tdp_w,
            "idle_w": self.idle_w,
            "decode_w": self.decode_w,
            "prefill_w": self.prefill_w,
            "source": self.source,
            "estimate": self.is_estimate,
        }


def _measured(gpu: str, tdp: float, idle: float, decode: float) -> PowerProfile:
    return PowerProfile(gpu, tdp, idle, decode, tdp, f"{SPLITWISE}; {_DATASHEET[gpu]}", False)


def _scaled(gpu: str, tdp: float, like: PowerProfile) -> PowerProfile:
    """An ESTIMATE: `like`'s idle and token-phase shares of its TDP, times this TDP."""
    return PowerProfile(
        gpu,
        tdp,
        round(like.idle_w / like.tdp_w * tdp, 1),
        round(like.decode_w / like.tdp_w * tdp, 1),
        tdp,
        f"estimate: {like.gpu}'s measured shares of TDP ({SPLITWISE}) x {_DATASHEET[gpu]}",
        True,
    )


A100 = _measured("a100-80gb", 400.0, 63.0, 250.0)
H100 = _measured("h100-sxm", 700.0, 75.0, 380.0)
PROFILES: dict[str, PowerProfile] = {
    p.gpu: p
    for p in (
        A100,
        H100,
        _scaled("a100-40gb", 400.0, A100),  # the same chip and TDP, half the HBM
        _scaled("h200-sxm", 700.0, H100),  # the same chip and TDP, HBM3e
        _scaled("a40", 300.0, A100),  # Ampere
        _scaled("l40s", 350.0, H100),  # Ada: the newer generation's shares
        _scaled("l4", 72.0, H100),
        _scaled("rtx-4090", 450.0, H100),
        # The GPUs of 2026: no vendor publishes idle or inference draws, so Hopper's shares of
        # the TDP (the nearest measured generation), ESTIMATES. The B300's power is left out:
        # no primary figure was found (1,100 W HGX / 1,400 W GB300 in secondary sources only).
        _scaled("b200", 1000.0, H100),
        _scaled("gb200", 1200.0, H100),
        _scaled("mi300x", 750.0, H100),
        _scaled("mi325x", 1000.0, H100),
        _scaled("mi355x", 1400.0, H100),
    )
}


def power_profile(gpu: str) -> PowerProfile | None:
    """The GPU's profile by its catalog name; None for a GPU without one (a custom [gpu])."""
    return PROFILES.get(gpu)
