"""Metrics: the recorder the engine feeds each step, the bounded step and request logs, and the
RunResult with its summary (metric definitions: docs/design.md, "Metrics").

Imports: core, kv; reads schedulers only through the engine-facing protocol in `core`.
"""
