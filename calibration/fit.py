"""Fits of the measured points, and their error on points held out of the fit.

- decode attention, per layer:  t = a + b·kv_tokens + c·num_seqs   (kv_tokens = Σ context lengths;
  the num_seqs term is what separates a skewed mix from a uniform one of the same total);
- prefill attention, per layer: t = a + b·Σ prompt_len² + c·Σ prompt_len;
- GEMMs (per layer, the sum of QKV, output, gate+up, down, and the layer's elementwise work) and
  the LM head: piecewise-linear in tokens over the measured medians, exactly as the simulator
  interpolates them.

Linear fits minimise the squared *relative* error (times span four orders of magnitude, and an
absolute fit would ignore the small points) with non-negative coefficients (a negative per-token
cost would price large steps below small ones): every subset of terms is solved by weighted least
squares and the best one whose coefficients are all >= 0 wins (three terms: seven subsets).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pagesim.calibration.measure import Point
from pagesim.simulator.execution.profile import piecewise_linear

# A section of the profile: a JSON object (formula, coefficients, errors, points).
Section = dict[str, Any]


def fit_nonnegative(features: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Coefficients β >= 0 minimising Σ ((features·β − t) / t)²."""
    rows = features / times[:, None]
    target = np.ones(len(times))
    best: tuple[float, np.ndarray] | None = None
    num_terms = features.shape[1]
    for size in range(1, num_terms + 1):
        for subset in itertools.combinations(range(num_terms), size):
            columns = list(subset)
            solution, *_ = np.linalg.lstsq(rows[:, columns], target, rcond=None)
            if (solution < 0).any():
                continue
            beta = np.zeros(num_terms)
            beta[columns] = solution
            error = float(np.sum((rows @ beta - target) ** 2))
            if best is None or error < best[0]:
                best = (error, beta)
    if best is None:  # cannot happen with positive times: a single term has a positive solution
        raise ValueError("no non-negative fit")
    return best[1]


def error_report(labels: list[str], measured: list[float], predicted: list[float]) -> Section:
    """Per-point and summary relative errors of predictions against measured medians."""
    rel = [(p - m) / m for m, p in zip(measured, predicted, strict=True)]
    return {
        "num_points": len(rel),
        "mean_abs_rel_err": float(np.mean(np.abs(rel))) if rel else None,
        "max_abs_rel_err": float(np.max(np.abs(rel))) if rel else None,
        "points": [
            {"label": lab, "measured_s": m, "predicted_s": p, "rel_err": r}
            for lab, m, p, r in zip(labels, measured, predicted, rel, strict=True)
        ],
    }


def _split(points: list[Point], kind: str) -> tuple[list[Point], list[Point]]:
    chosen = [p for p in points if p.kind == kind]
    return [p for p in chosen if not p.is_held_out], [p for p in chosen if p.is_held_out]


def _linear_section(
    train: list[Point],
    held: list[Point],
    features: Callable[[Point], Sequence[float]],
    names: list[str],
    formula: str,
) -> Section:
    if len(train) < 2:
        raise ValueError(f"{formula}: at least two measured points are needed, got {len(train)}")
    x = np.array([features(p) for p in train], dtype=float)
    t = np.array([p.samples.median_s for p in train])
    beta = fit_nonnegative(x, t)

    def predict(p: Point) -> float:
        return float(np.dot(beta, features(p)))

    return {
        "formula": formula,
        "per": "layer",
        "coef": dict(zip(names, (float(b) for b in beta), strict=True)),
        "fit_error": error_report([p.label for p in train], list(t), [predict(p) for p in train]),
        "held_out": error_report(
            [p.label for p in held], [p.samples.median_s for p in held], [predict(p) for p in held]
        ),
    }


def fit_decode(points: list[Point], copy_bandwidth_bps: float) -> Section:
    train, held = _split(points, "decode")
    section = _linear_section(
        train,
        held,
        lambda p: (1.0, p.kv_tokens, p.num_seqs),
        ["a_s", "b_s_per_kv_token", "c_s_per_seq"],
        "a + b*kv_tokens + c*num_seqs",
    )
    every = train + held
    section["range"] = {
        "kv_tokens": [min(p.kv_tokens for p in every), max(p.kv_tokens for p in every)],
        "num_seqs": [min(p.num_seqs for p in every), max(p.num_seqs for p in every)],
    }
    shares = [(p.bytes / p.samples.median_s) / copy_bandwidth_bps for p in every]
    largest = max(every, key=lambda p: p.kv_tokens)
    section["bandwidth"] = {
        "max_share_of_copy": max(shares),
        "largest_point": largest.label,
        "largest_point_bps": largest.bytes / largest.samples.median_s,
        "largest_point_share_of_copy": largest.bytes
        / largest.samples.median_s
        / copy_bandwidth_bps,
    }
    return section


def fit_prefill(points: list[Point]) -> Section:
    train, held = _split(points, "prefill")
    section = _linear_section(
        train,
        held,
        lambda p: (1.0, p.prefill_sq, p.tokens),
        ["a_s", "b_s_per_token_sq", "c_s_per_token"],
        "a + b*sum_prompt_len_sq + c*sum_prompt_len",
    )
    every = train + held
    section["range"] = {
        "sum_sq": [min(p.prefill_sq for p in every), max(p.prefill_sq for p in every)],
        "tokens": [min(p.tokens for p in every), max(p.tokens for p in every)],
    }
    return section


def monotone(values: list[float]) -> list[float]:
    """The closest non-decreasing sequence in least squares (pool adjacent violators).

    More tokens never take less time in this model; a noisy dip in the medians would otherwise
    price a bigger step below a smaller one.
    """
    blocks: list[tuple[float, int]] = []  # (mean, count)
    for v in values:
        blocks.append((v, 1))
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, n1), (m2, n2) = blocks[-2], blocks[-1]
            blocks[-2:] = [((m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2)]
    return [m for m, n in blocks for _ in range(n)]


def fit_tokens(points: list[Point], kind: str) -> Section:
    """Per-token-count medians (summed over a layer's GEMMs), made non-decreasing, and the
    held-out interpolation errors."""
    per_tokens: dict[int, float] = defaultdict(float)
    parts: dict[str, dict[int, float]] = defaultdict(dict)
    held_tokens: set[int] = set()
    for p in points:
        if p.kind != kind:
            continue
        per_tokens[p.tokens] += p.samples.median_s
        parts[p.label.split(" ")[0]][p.tokens] = p.samples.median_s
        if p.is_held_out:
            held_tokens.add(p.tokens)
    train = sorted(t for t in per_tokens if t not in held_tokens)
    if not train:
        raise ValueError(f"{kind}: no measured token counts")
    xs = [float(t) for t in train]
    measured = [per_tokens[t] for t in train]
    ys = monotone(measured)
    held = sorted(held_tokens)
    return {
        "interpolation": (
            "piecewise-linear in tokens through the non-decreasing fit of the medians; "
            "beyond the largest, the last slope"
        ),
        "per": "layer" if kind == "gemm" else "step",
        "tokens": train,
        "time_s": ys,
        "measured_median_s": measured,
        "parts": {name: [by_t[t] for t in train] for name, by_t in parts.items()},
        "range": {"tokens": [train[0], train[-1]]},
        "held_out": error_report(
            [f"{kind} t={t}" for t in held],
            [per_tokens[t] for t in held],
            [piecewise_linear(xs, ys, t) for t in held],
        ),
    }


def fit_overhead(
    points: list[Point], mode: str = "eager", graph_error: str | None = None
) -> Section:
    """The per-step floor: the executor's minimal step in `mode` ("eager" or "cuda-graph"; the
    eager one where no graph was measured), with both modes and the bare launches recorded."""
    (eager,) = [p for p in points if p.kind == "minimal_step"]
    graphs = [p for p in points if p.kind == "minimal_step_graph"]
    (launches,) = [p for p in points if p.kind == "launches"]
    graph = graphs[0] if graphs else None
    used = "cuda-graph" if mode == "cuda-graph" and graph is not None else "eager"
    floor = graph if used == "cuda-graph" and graph is not None else eager
    return {
        "what": "the executor's minimal step (1 sequence, 1 token over a 1-token context, every "
        "layer and the LM head): host time from the first launch to its results, median",
        "mode": used,
        "mode_asked": mode,
        "empty_step_s": floor.samples.median_s,
        "eager_step_s": eager.samples.median_s,
        "graph_step_s": None if graph is None else graph.samples.median_s,
        "graph_error": graph_error,
        "bare_launches": {"num_launches": launches.tokens, "time_s": launches.samples.median_s},
        "pricing": "compute_s = max(sum of fitted kernel times, empty_step_s)",
    }


def copy_bandwidth(points: list[Point]) -> Section:
    (copy,) = [p for p in points if p.kind == "copy"]
    return {
        "what": "device-to-device copy; bytes read + written per second",
        "bytes": copy.bytes,
        "median_bps": copy.bytes / copy.samples.median_s,
        "p10_s": copy.samples.p10_s,
        "p90_s": copy.samples.p90_s,
    }
