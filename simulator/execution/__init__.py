"""Execution models: what one StepPlan costs on a GPU, from an analytic roofline or a measured
profile file (never from CuPy or torch: profiles arrive as files).

Imports: core, kv (for sizes); never policies, metrics or workloads.
"""
