"""The simulator: KV-cache mechanism, scheduling policies, the SimPy run loop, metrics.

Layers, each importing only those below it (tests/simulator/test_layers.py checks it):

    studies                      sweeps, capacity search, golden summaries, bench
    engine | scenario | deploy   `simulate` (one replica, a fleet or a DP group); reading
                                 scenario files; the vLLM command lines of a configuration
    cluster                      the run loop: one arrival process, replicas (each the SimPy
                                 step loop), fleets behind routers, disaggregated fleets, DP
                                 groups, pipelined replicas
    fastpath                     the decode fast path: closed-form decode groups and runs of
                                 pure decode steps (the per-step path's results, faster)
    policies | metrics | execution | workload
    kv                           the KV-cache mechanism
    core                         requests, plan messages, config, catalog, errors

Never imports CuPy or torch (measured costs arrive as a profile file), the CLI, `calibration`
or `reports`. The package's own module, engine.py: Imports: cluster, metrics, execution, core.
"""
