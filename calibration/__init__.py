"""Calibration: launch the paged-attention kernel, time it soundly, fit a profile for the simulator.

`kernel` loads kernels/*.cu into CuPy (imported lazily: nothing here needs a GPU to import),
`reference` holds the NumPy reference and the CPU backend's kernels, `harness` the timers,
`backends` the per-device operations, `measure` the grids, `fit` the fits, `profile` the file
format, `run.calibrate` and `bench.bench_kernel` the entry points.
"""
