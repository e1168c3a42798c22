"""Nelder-Mead minimisation (NumPy only): the roofline fit's few nonlinear parameters.

Deterministic: the same start, steps and objective give the same answer on every machine, so
`pagesim calibrate fit-roofline` reproduces the constants it printed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def nelder_mead(
    objective: Callable[[np.ndarray], float],
    start: np.ndarray,
    step: float = 0.25,
    max_iterations: int = 4000,
    tolerance: float = 1e-12,
) -> tuple[np.ndarray, float]:
    """The point (and value) minimising `objective` found from `start` (standard coefficients:
    reflect 1, expand 2, contract 1/2, shrink 1/2); stops when the simplex's values agree to
    `tolerance` or after `max_iterations`."""
    start = np.asarray(start, dtype=float)
    n = len(start)
    simplex = np.vstack([start, start + step * np.eye(n)])
    values = np.array([objective(p) for p in simplex])
    for _ in range(max_iterations):
        order = np.argsort(values, kind="stable")
        simplex, values = simplex[order], values[order]
        if values[-1] - values[0] <= tolerance:
            break
        centroid = simplex[:-1].mean(axis=0)
        worst = simplex[-1]
        reflected = centroid + (centroid - worst)
        value_r = objective(reflected)
        if value_r < values[0]:
            expanded = centroid + 2 * (centroid - worst)
            value_e = objective(expanded)
            if value_e < value_r:
                simplex[-1], values[-1] = expanded, value_e
            else:
                simplex[-1], values[-1] = reflected, value_r
        elif value_r < values[-2]:
            simplex[-1], values[-1] = reflected, value_r
        else:
            contracted = centroid + 0.5 * (worst - centroid)
            value_c = objective(contracted)
            if value_c < values[-1]:
                simplex[-1], values[-1] = contracted, value_c
            else:
                simplex[1:] = simplex[0] + 0.5 * (simplex[1:] - simplex[0])
                values[1:] = [objective(p) for p in simplex[1:]]
    best = int(np.argmin(values))
    return simplex[best].copy(), float(values[best])
