"""Deploying what pagesim found: the `vllm serve` and benchmark command lines of a system.

Imports: core, kv, execution, workload (a system's knobs, its KV layout, its engine era and the
traffic its benchmark replays).
"""
