"""The decode fast path: lone decoding sequences advanced in closed form, and runs of pure
decode steps settled in one SimPy event. The same results as the per-step path, bit for bit,
at a fraction of the work on long decode-heavy runs; the per-step path reads without it.

    attach.py         the replica loop's one way in: when the fast path is on, and for whom
    decode_group.py   the group of lone decoders: members in closed form, their calendars
    grouped_plan.py   the plan of a step the members take part in (members summed, not listed)
    decode_window.py  the next pure steps (only members decode), their schedule and completion
    decode_costs.py   a pure step's price, the roofline's to the last bit, a few floats a step
    pure_runs.py      the SimPy side: price a run, wait for its end, apply its steps late
    run_rows.py       the runs' step-table rows, in closed form, expanded a chunk at a time

A paged scheduler and its step policies reach the group only through policies/grouping.py; the
step log takes the runs' rows through metrics/step_log.py `RowSource`. The differential tests
(tests/simulator/fastpath/, tests/simulator/cluster/test_windows.py) run both paths.

Imports: policies, metrics, execution, kv, core; never the cluster loop, which imports it (the
replica's loop calls attach.py).
"""
