"""The simulator: KV-cache mechanism, scheduling policies, SimPy engine, metrics.

Layers, each importing only those below it (tests/simulator/test_layers.py checks it):

    studies                      sweeps, capacity search, golden summaries, bench
    engine | scenario | deploy   the SimPy loop and `simulate`; reading scenario files; the
                                 vLLM command lines of a configuration
    cluster                      fleets: replicas (the engine's loop) behind routers
    policies | metrics | execution | workload
    kv                           the KV-cache mechanism
    core                         requests, plan messages, config, catalog, errors

Never imports CuPy or torch (measured costs arrive as a profile file), the CLI, `calibration`
or `reports`. The package's own module, engine.py: Imports: cluster, metrics, execution, workload,
core.
"""
