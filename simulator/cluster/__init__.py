"""The run loop: one arrival process (arrivals.py) feeding replicas, each the SimPy step loop of
replica.py, sharing one clock: engine.simulate's single replica, a fleet behind a router
(fleet.py) and a disaggregated fleet's prefill and decode pools joined by a link (disagg.py);
the routers, and the result modules that turn a fleet's replicas into one result (result.py,
disagg_result.py).

Imports `fastpath` (through replica.py's one call), `policies`, `metrics`, `execution`,
`workload`, `kv` and `core`; never the engine, scenario files or studies.
"""
