"""Calibration: launch the paged-attention kernel, time it soundly, fit a profile for the simulator.

`kernel` loads kernels/*.cu into CuPy (imported lazily: nothing here needs a GPU to import) and
plans its launches (`decode_inputs` checks the arrays, `partitions` sizes split-K from the
compiled variant's occupancy); `attention_reference` holds the NumPy reference and the CPU backend's
kernels; `harness` the timers; `backends` the per-device operations (`elementwise` a layer's
work between its GEMMs); `measure` the grids; `floor` the executor's minimal step; `fit` the
fits; `profile` the file format; `run.calibrate` and `kernel_bench.bench_kernel` the entry points
(`bench_baselines`: what the kernel is timed against).
The real executor: `executor` (the ExecutionModel), `step_inputs`, `forward` (NumPy) and
`forward_gpu` (CuPy), `graphs` (CUDA-graph mode), `layer_ops`; `fidelity` compares it with a
simulation (`fidelity_errors`, `held_out`: the figures). The GPU scripts
(gpu_check.sh, fidelity_check.sh, gpu_common.sh) run `preflight` and `gpu_stages`.

Public measurements (no GPU needed): `vidur_csv` reads the Vidur project's profiling CSVs,
`vidur_layout` finds them, `vidur_import` turns them into profiles (`vidur_sections` builds each
section; the shipped ones are in profiles/), `roofline_fit` fits the roofline's per-GPU factors
to them (with `minimize`), and `step_errors` tabulates the roofline's error against them
(profiles/ERRORS.md; `step_error_rows` computes the rows).

Imports: simulator, reports (the fidelity check's report page).
"""
