"""The run loop: one arrival process (arrivals.py) feeding replicas, each the SimPy step loop of
replica.py, sharing one clock: engine.simulate's single replica, a fleet behind a router
(fleet.py), a disaggregated fleet's prefill and decode pools joined by a link (disagg.py), a
DP attention + expert-parallel group of lock-stepped ranks (dp_group.py) and a pipelined
replica's batches (pipeline_loop.py); the routers, and the result modules that turn a fleet's
replicas into one result (result.py, disagg_result.py). docs/design.md, "Fleets".

Imports: core, kv, policies, metrics, execution, workload, fastpath (one call, from the
replica's loop); never the engine, scenario files or studies.
"""
