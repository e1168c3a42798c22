"""Fleets: several replicas, each the step loop of cluster/replica.py (a single run's too),
behind a router, in one SimPy environment (docs/design.md, "Fleets").

Imports: core, kv, policies, metrics, execution, workload.
"""
