"""Scheduling policies: static batching, Orca, vLLM V0 and V1 over the KV mechanism, the small
strategy pieces they share (admission order, victim choice), and the decode fast path.

Plain classes, no SimPy.

Imports: core, kv; never execution models, metrics or workloads.
"""
