"""Scenario files: the schema, reading and checking TOML tables, systems and workloads, `--set`
overrides and sweep axes, and writing a resolved scenario back as TOML.

Imports `workload`, `kv` and `core`; never the engine.
"""
