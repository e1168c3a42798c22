"""Scenario files: the schema, reading and checking TOML tables, systems and workloads, `--set`
overrides and sweep axes, and writing a resolved scenario back as TOML.

Imports: core, kv, workload, policies, execution, cluster (to check a scenario against what
they accept); never the engine.
"""
